//! Finds a compiler able to build fdprof's eBPF programs: a rustc together with the `core`
//! sources of the *same* release (for `-Z build-std=core`), the cargo of that release, and
//! `bpf-linker`.
//!
//! Shared by `cargo xtask ebpf` (which builds the objects) and `cargo xtask bootstrap` (which
//! installs what is missing), so that both agree on what "ready" means.

use std::path::{Path, PathBuf};

/// A compiler whose sysroot holds `rust-src`.
#[derive(Debug, Clone)]
pub(crate) struct EbpfRustc {
    pub rustc: PathBuf,
    /// The cargo beside it: the same release, so that a toolchain builds the same bytes
    /// whichever cargo runs `xtask`.
    pub cargo: PathBuf,
    /// Where it came from, for messages ("rustup toolchain nightly-…", "Debian rustc-web").
    pub origin: String,
}

fn has_core_sources(sysroot: &Path) -> bool {
    sysroot
        .join("lib/rustlib/src/rust/library/core/Cargo.toml")
        .is_file()
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

/// Prefers a rustup toolchain that already has `rust-src`, else Debian's `rustc-web`.
pub(crate) fn find_rustc() -> Option<EbpfRustc> {
    let rustup_home = std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".rustup")));
    if let Some(toolchains) = rustup_home.map(|h| h.join("toolchains")) {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&toolchains)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default();
        names.sort();
        for sysroot in names {
            let rustc = sysroot.join("bin/rustc");
            if rustc.is_file() && has_core_sources(&sysroot) {
                let name = sysroot.file_name().unwrap_or_default().to_string_lossy();
                return Some(EbpfRustc {
                    rustc,
                    cargo: sysroot.join("bin/cargo"),
                    origin: format!("rustup toolchain {name} with rust-src"),
                });
            }
        }
    }
    let debian = Path::new("/usr");
    if debian.join("bin/rustc").is_file() && has_core_sources(debian) {
        return Some(EbpfRustc {
            rustc: debian.join("bin/rustc"),
            cargo: debian.join("bin/cargo"),
            origin: "Debian rustc-web with rust-web-src".into(),
        });
    }
    None
}

/// `$CARGO_HOME`, else `~/.cargo`.
pub(crate) fn cargo_home() -> Option<PathBuf> {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".cargo")))
}

/// Finds `bpf-linker` on `PATH` or in cargo's bin directory.
pub(crate) fn find_bpf_linker() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(cargo_home().map(|h| h.join("bin")))
        .map(|dir| dir.join("bpf-linker"))
        .find(|p| p.is_file())
}
