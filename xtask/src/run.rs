//! Build, demo and test: thin sequences of cargo and fdprof commands, each step announced.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs a command in the workspace root, showing it and how long it took.
pub fn step(what: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("==> {what}: {cmd:?}");
    let start = Instant::now();
    let status = cmd
        .current_dir(root())
        .status()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    eprintln!(
        "==> {what}: {} in {:.1}s",
        if status.success() { "done" } else { "FAILED" },
        start.elapsed().as_secs_f64()
    );
    if !status.success() {
        bail!("{what} failed ({status})");
    }
    Ok(())
}

fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

pub fn fdprof_release() -> PathBuf {
    root().join("target/release/fdprof")
}

pub fn build_release() -> Result<()> {
    step(
        "build fdprof (release, eBPF embedded)",
        cargo().args(["build", "--release", "-p", "fdprof"]),
    )
}

pub fn demo() -> Result<()> {
    build_release()?;
    step(
        "fdprof doctor",
        Command::new(fdprof_release()).arg("doctor"),
    )
}

pub fn test() -> Result<()> {
    step("format check", cargo().args(["fmt", "--all", "--", "--check"]))?;
    step(
        "clippy (host crates)",
        cargo().args(["clippy", "--all-targets", "--", "-D", "warnings"]),
    )?;
    step("tests (real kernel)", cargo().args(["test", "--no-fail-fast"]))
}
