//! The static fdprof that the qemu guests run and the container image holds: built into a
//! target directory of its own and checked to need no dynamic loader.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::workspace::{cargo, root};

/// Builds fdprof statically linked (its eBPF objects embedded) into its own target directory,
/// so the normal build is not invalidated, and checks that it needs no loader.
pub(crate) fn build_static() -> Result<PathBuf> {
    let target_dir = root().join("target/static");
    let target = "x86_64-unknown-linux-gnu";
    eprintln!("==> build static fdprof (release) ...");
    let start = Instant::now();
    let status = cargo()
        .args(["build", "--release", "-p", "fdprof", "--target", target])
        .arg("--target-dir")
        .arg(&target_dir)
        // RUSTFLAGS replaces .cargo/config.toml's target rustflags: repeat them.
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C force-frame-pointers=yes",
        )
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .status()
        .context("cannot run cargo build")?;
    if !status.success() {
        bail!("static build of fdprof failed ({status})");
    }
    eprintln!(
        "==> build static fdprof (release): done in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    let bin = target_dir.join(target).join("release/fdprof");
    if !elf_is_static(&bin)? {
        bail!(
            "{} needs a dynamic loader; it must be static",
            bin.display()
        );
    }
    Ok(bin)
}

/// Whether an ELF executable runs without a dynamic loader (no `PT_INTERP` program header).
pub(crate) fn elf_is_static(path: &Path) -> Result<bool> {
    let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if data.len() < 64 || &data[..4] != b"\x7fELF" || data[4] != 2 || data[5] != 1 {
        bail!("{} is not a 64-bit little-endian ELF file", path.display());
    }
    let u16_at = |o: usize| u16::from_le_bytes([data[o], data[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(data[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    const PT_INTERP: u32 = 3;
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let Some(header) = data.get(at..at + 4) else {
            bail!("{}: truncated program headers", path.display());
        };
        if u32::from_le_bytes(header.try_into().unwrap()) == PT_INTERP {
            return Ok(false);
        }
    }
    Ok(true)
}
