//! Builds fdprof-ebpf for `bpfel-unknown-none` and hands the object to the library, so that a
//! plain `cargo build` gives a binary with its programs embedded.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "build/ebpf_toolchain.rs"]
mod ebpf_toolchain;

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().to_path_buf();
    for dir in [
        "fdprof-ebpf/src",
        "fdprof-ebpf/Cargo.toml",
        "fdprof-common/src",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
    println!("cargo:rerun-if-changed=build/ebpf_toolchain.rs");

    println!("cargo:rustc-env=FDPROF_GIT_COMMIT={}", git_commit(&root));

    let out = PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
    if let Err(msg) = build_ebpf(&root, &out) {
        eprintln!("error: {msg}");
        std::process::exit(1);
    }
}

/// The commit being built, for `--version`, or `unknown` outside a git checkout (a source
/// tarball). The build reruns when HEAD or the branch it names moves.
fn git_commit(root: &Path) -> String {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(root)
            .output()
            .ok()?;
        let text = String::from_utf8(out.stdout).ok()?;
        (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short=12", "HEAD"]) else {
        return "unknown".into();
    };
    let mut watched = vec!["HEAD".to_string(), "packed-refs".to_string()];
    watched.extend(git(&["symbolic-ref", "-q", "HEAD"]));
    // Only files that exist: cargo reruns a build script whose watched file is missing every
    // time (a clone without packed-refs, a branch whose ref is packed and not loose).
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && root.join(&path).exists()
        {
            println!("cargo:rerun-if-changed={}", root.join(path).display());
        }
    }
    commit
}

/// Builds the objects and copies them to `out_dir/{fdprof,fdprof-doctor}.bpf.o`.
fn build_ebpf(root: &Path, out_dir: &Path) -> Result<(), String> {
    let hint = ebpf_toolchain::INSTALL_HINT;
    let rustc = ebpf_toolchain::find_rustc().ok_or_else(|| {
        format!("no Rust compiler with rust-src for the eBPF programs; run `{hint}`")
    })?;
    let linker = ebpf_toolchain::find_bpf_linker()
        .ok_or_else(|| format!("bpf-linker not found; run `{hint}`"))?;

    let target_dir = root.join("target/ebpf");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // The linker must be on PATH for rustc; put its directory first.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![linker.parent().unwrap().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let path = std::env::join_paths(dirs).map_err(|e| e.to_string())?;

    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "-p", "fdprof-ebpf", "--bins", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's settings are for the host; they must not leak into the BPF build.
    for var in [
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
    // Keep the environment clean of cargo's per-build-script variables too.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if key.starts_with("CARGO_FEATURE_") || key.starts_with("CARGO_CFG_") {
            cmd.env_remove(key.as_ref());
        }
    }
    // RUSTC_BOOTSTRAP lets a stable rustc (and cargo) take `-Z build-std`.
    cmd.env("RUSTC", &rustc.rustc)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("PATH", path)
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            "--cfg=bpf_target_arch=\"x86_64\"\x1f-Cdebuginfo=2\x1f-Clink-arg=--btf",
        );
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run cargo for the eBPF build: {e}"))?;
    if !status.success() {
        return Err(format!(
            "building fdprof-ebpf with {} ({}) failed; if the toolchain is incomplete run `{hint}`",
            rustc.rustc.display(),
            rustc.origin
        ));
    }
    for name in ["fdprof", "fdprof-doctor"] {
        let object = target_dir.join("bpfel-unknown-none/release").join(name);
        std::fs::copy(&object, out_dir.join(format!("{name}.bpf.o")))
            .map_err(|e| format!("cannot copy {}: {e}", object.display()))?;
    }
    Ok(())
}
