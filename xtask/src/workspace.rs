//! The workspace and the commands run in it: its root, cargo, and a step that announces a
//! command and how long it took. Below every task, so that each can use them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

/// The workspace root (xtask lives one level below it).
pub(crate) fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs a command in the workspace root, showing it and how long it took.
pub(crate) fn step(what: &str, cmd: &mut Command) -> Result<()> {
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

/// The cargo that runs xtask (`$CARGO`), else the one on the path.
pub(crate) fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}
