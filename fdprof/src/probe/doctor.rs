//! `fdprof doctor`: what this kernel offers and which probes `record` will use.

use std::fmt::Write as _;

use anyhow::Result;

use super::{
    capabilities::{Capabilities, TracepointTrial},
    offsets::KernelOffsets,
};
use crate::privileges;

#[derive(clap::Args, Debug)]
pub struct DoctorArgs {
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &DoctorArgs) -> Result<()> {
    privileges::require("fdprof doctor", &privileges::LOAD_BPF)?;
    let caps = Capabilities::detect()?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&caps)?);
    } else {
        print!("{}", render(&caps));
    }
    Ok(())
}

fn tracepoint_lines(out: &mut String, trials: &[TracepointTrial]) {
    for t in trials {
        let _ = write!(
            out,
            "    {:<24} tracepoint: {}",
            t.name,
            t.tracepoint.summary()
        );
        if let Some(btf) = &t.tp_btf {
            let _ = write!(out, "; tp_btf: {}", btf.summary());
        }
        out.push('\n');
    }
}

/// The human-readable report.
pub fn render(caps: &Capabilities) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "kernel          {}", caps.kernel_release);
    let _ = writeln!(
        out,
        "BTF             {}",
        if caps.btf {
            "/sys/kernel/btf/vmlinux"
        } else {
            "missing"
        }
    );
    let _ = writeln!(
        out,
        "RLIMIT_NOFILE   soft {}, hard {}",
        caps.rlimit_nofile.soft, caps.rlimit_nofile.hard
    );
    for note in &caps.notes {
        let _ = writeln!(out, "note            {note}");
    }
    let _ = writeln!(
        out,
        "\nfunction probes (load + attach + detach tried for each):"
    );
    for role in &caps.functions {
        let _ = writeln!(out, "  {} -> {}", role.role, role.chosen.name());
        if role.functions.is_empty() {
            let _ = writeln!(
                out,
                "    none of {} found in BTF or kallsyms",
                role.candidates.join(", ")
            );
        }
        for f in &role.functions {
            let seen: Vec<&str> = [("BTF", f.function.btf), ("kallsyms", f.function.kallsyms)]
                .iter()
                .filter(|(_, yes)| *yes)
                .map(|(name, _)| *name)
                .collect();
            let _ = writeln!(out, "    {} (in {})", f.function.name, seen.join(", "));
            let _ = writeln!(
                out,
                "      fentry: {}; fexit: {}",
                f.fentry.summary(),
                f.fexit.summary()
            );
            let _ = writeln!(
                out,
                "      kprobe: {}; kretprobe: {}",
                f.kprobe.summary(),
                f.kretprobe.summary()
            );
        }
    }
    let _ = writeln!(out, "\nlock contention tracepoints:");
    tracepoint_lines(&mut out, &caps.lock_tracepoints);
    let _ = writeln!(out, "fd syscall tracepoints:");
    tracepoint_lines(&mut out, &caps.fd_syscall_tracepoints);
    let _ = writeln!(
        out,
        "cpu sampling (perf_event cpu-clock): {}",
        caps.cpu_sampling.summary()
    );

    let _ = writeln!(out, "\nrecord will use: {} mode", caps.mode.name());
    for (role, mode) in &caps.chosen {
        let _ = writeln!(out, "  {role:<18} {mode}");
    }
    let _ = writeln!(out, "\nstruct offsets (bytes, from BTF):");
    for ((s, f), v) in KernelOffsets::FIELDS.iter().zip(caps.offsets.values()) {
        let _ = writeln!(out, "  {:<28} {v}", format!("{s}.{f}"));
    }
    out
}
