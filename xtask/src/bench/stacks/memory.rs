//! The unwinder's memory with many distinct executables: copies of one small spinning program,
//! each its own file, all sampled on CPU under `record -a`.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::bench::harness::figures::FigureTable;
use crate::bench::harness::process::{Children, rss_kb};
use crate::bench::harness::workloads::report_of;

const SPIN: &str = "#include <time.h>\nint main(void) { volatile unsigned long n = 0; \
                    time_t end = time(0) + 60; while (time(0) < end) \
                    for (int i = 0; i < 100000; i++) n++; return 0; }\n";

pub(super) fn run(fdprof: &Path, out: &Path, table: &FigureTable) -> Result<()> {
    let source = out.join("spin.c");
    std::fs::write(&source, SPIN)?;
    let spin = out.join("spin");
    let built = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-o"])
        .arg(&spin)
        .arg(&source)
        .status()
        .context("cannot run cc")?;
    if !built.success() {
        bail!("cc spin.c failed");
    }
    for n in [1, 50, 500] {
        let dir = out.join(format!("exes-{n}"));
        std::fs::create_dir_all(&dir)?;
        // Killed when dropped, once recorded.
        let mut running = Children::default();
        for i in 0..n {
            // A copy is a file of its own (another inode): another executable to unwind.
            let exe = dir.join(format!("spin{i}"));
            std::fs::copy(&spin, &exe)?;
            running.0.push(
                Command::new(&exe)
                    .stdout(Stdio::null())
                    .spawn()
                    .context("cannot start a spinner")?,
            );
        }
        let data = out.join(format!("memory-{n}.data"));
        let mut record = Command::new(fdprof)
            .args([
                "record",
                "-a",
                "--lock-only",
                "--cpu",
                "--freq",
                "999",
                "-d",
                "8s",
                "-o",
            ])
            .arg(&data)
            .stderr(Stdio::null())
            .spawn()?;
        let mut peak = 0;
        while record.try_wait()?.is_none() {
            peak = peak.max(rss_kb(record.id()).unwrap_or(0));
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut alive = 0;
        for child in &mut running.0 {
            alive += usize::from(matches!(child.try_wait(), Ok(None)));
        }
        drop(running);
        let report = report_of(fdprof, &data)?;
        let user = &report.stack_walks.user;
        table.row(
            &format!("{n} executables: sampled, of them (alive at the end)"),
            format!("{} ({alive})", spinners_sampled(&data)?),
        );
        table.row(
            &format!("{n} executables: call-frame information held (KiB, files)"),
            format!("{} ({})", user.held_bytes / 1024, user.held_files),
        );
        table.row(
            &format!("{n} executables: record -a peak RSS (MiB)"),
            format!("{:.1}", peak as f64 / 1024.0),
        );
    }
    Ok(())
}

/// How many of the spinners the recording has samples of (each its own module).
fn spinners_sampled(data: &Path) -> Result<usize> {
    let rec: serde_json::Value = serde_json::from_slice(&std::fs::read(data)?)?;
    let modules: std::collections::BTreeSet<&str> = rec["cpu"]["samples"]
        .as_array()
        .context("no on-CPU samples")?
        .iter()
        .filter_map(|s| s["user_stack"][0]["module"].as_str())
        .filter(|m| m.starts_with("spin"))
        .collect();
    Ok(modules.len())
}
