//! `cargo xtask ebpf [--check]`: builds fdprof-ebpf for `bpfel-unknown-none` into the objects
//! kept in the repository (`fdprof-profiler/ebpf/*.bpf.o`, which the library embeds, so that building
//! fdprof needs only cargo), or checks that the committed objects are what the sources build.
//!
//! The build is reproducible byte for byte with one toolchain: the checkout, cargo's home and
//! the target directory are remapped (`--remap-path-prefix`), so a clone in another folder
//! builds the same bytes. `toolchain.txt` beside the objects names the rustc and bpf-linker that
//! built them; another release builds other bytes.

pub(crate) mod toolchain;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::workspace::{root, step};

/// Each object: the binary fdprof-ebpf builds and the file it is kept as.
const OBJECTS: [(&str, &str); 2] = [
    ("fdprof", "fdprof.bpf.o"),
    ("fdprof-doctor", "fdprof-doctor.bpf.o"),
];

/// What names the toolchain beside the objects.
const TOOLCHAIN_FILE: &str = "toolchain.txt";

/// The command that rebuilds the objects, for messages.
const FIX: &str = "cargo xtask ebpf";

/// Where the objects are committed (inside the fdprof package, so `cargo install --path
/// fdprof` and `cargo package` find them).
pub(crate) fn committed_dir() -> PathBuf {
    root().join("fdprof-profiler/ebpf")
}

/// `cargo xtask ebpf`: rebuilds the objects and writes them over the committed ones.
pub(crate) fn write() -> Result<()> {
    let built = build()?;
    let dir = committed_dir();
    std::fs::create_dir_all(&dir)?;
    for (_, file) in OBJECTS {
        std::fs::copy(built.dir.join(file), dir.join(file))
            .with_context(|| format!("cannot write {}", dir.join(file).display()))?;
    }
    std::fs::write(dir.join(TOOLCHAIN_FILE), &built.toolchain)?;
    eprintln!(
        "==> wrote {}/{{{}}}: commit them with the eBPF sources",
        dir.display(),
        OBJECTS.map(|(_, f)| f).join(",")
    );
    Ok(())
}

/// `cargo xtask ebpf --check`: rebuilds the objects apart and fails, naming each object that
/// differs and the sections where, if the committed ones are not what the sources build.
pub(crate) fn check() -> Result<()> {
    let built = build()?;
    let dir = committed_dir();
    let mut wrong = Vec::new();
    for (_, file) in OBJECTS {
        let fresh = std::fs::read(built.dir.join(file))?;
        let committed = dir.join(file);
        match std::fs::read(&committed) {
            Ok(old) if old == fresh => {}
            Ok(old) => wrong.push(format!(
                "fdprof-profiler/ebpf/{file} differs from what the sources build; sections that differ: {}",
                differing_sections(&old, &fresh)
            )),
            Err(e) => wrong.push(format!("cannot read {}: {e}", committed.display())),
        }
    }
    if wrong.is_empty() {
        eprintln!("==> eBPF objects: the committed ones are what fdprof-ebpf's sources build");
        return Ok(());
    }
    let committed_toolchain = std::fs::read_to_string(dir.join(TOOLCHAIN_FILE)).unwrap_or_default();
    let why = if committed_toolchain == built.toolchain {
        "the same toolchain built both: the eBPF sources (fdprof-ebpf, fdprof-common) changed \
         without the objects"
            .to_string()
    } else {
        format!(
            "the toolchain differs, which alone changes the bytes: the committed objects were \
             built by\n{committed_toolchain}this machine has\n{}",
            built.toolchain
        )
    };
    bail!(
        "{}\n{why}\nrun `{FIX}` and commit fdprof-profiler/ebpf/ with the source change",
        wrong.join("\n")
    )
}

/// Objects built apart from the committed ones, and the toolchain that built them.
struct Built {
    dir: PathBuf,
    toolchain: String,
}

/// Builds both objects under `target/ebpf` and copies them to `target/ebpf/out/`.
fn build() -> Result<Built> {
    let (rustc, linker) = find_toolchain()?;
    let target_dir = root().join("target/ebpf");
    let cargo = if rustc.cargo.is_file() {
        rustc.cargo.clone().into_os_string()
    } else {
        std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
    };
    let mut cmd = bpf_cargo(cargo, "build", &rustc, &linker, &target_dir)?;
    step(&format!("build fdprof-ebpf ({})", rustc.origin), &mut cmd)?;
    let out = target_dir.join("out");
    std::fs::create_dir_all(&out)?;
    for (binary, file) in OBJECTS {
        let object = target_dir.join("bpfel-unknown-none/release").join(binary);
        std::fs::copy(&object, out.join(file))
            .with_context(|| format!("cannot copy {}", object.display()))?;
    }
    let toolchain = format!("{}\n{}\n", version(&rustc.rustc)?, version(&linker)?);
    Ok(Built {
        dir: out,
        toolchain,
    })
}

/// `cargo clippy -D warnings` on fdprof-ebpf, for `bpfel-unknown-none` as [`build`] builds it
/// (host clippy leaves it out: it is no default member). The toolchain's own `cargo-clippy`,
/// run directly: `cargo clippy` would find the first `cargo-clippy` on PATH, whose release
/// cannot read this rustc's `core`.
pub(crate) fn clippy() -> Result<()> {
    let (rustc, linker) = find_toolchain()?;
    let cargo_clippy = rustc.cargo.with_file_name("cargo-clippy");
    if !cargo_clippy.is_file() {
        bail!(
            "no {} beside the eBPF toolchain's cargo: install its clippy (Debian: \
             rust-web-clippy, which `cargo xtask bootstrap` installs)",
            cargo_clippy.display()
        );
    }
    let target_dir = root().join("target/ebpf");
    let mut cmd = bpf_cargo(cargo_clippy.into(), "clippy", &rustc, &linker, &target_dir)?;
    cmd.env("CARGO", &rustc.cargo)
        .args(["--", "-D", "warnings"]);
    step("clippy (fdprof-ebpf, bpfel-unknown-none)", &mut cmd)
}

/// The eBPF toolchain: a rustc with rust-src, and bpf-linker.
fn find_toolchain() -> Result<(toolchain::EbpfRustc, PathBuf)> {
    let hint = "run `cargo xtask bootstrap`";
    let rustc = toolchain::find_rustc()
        .with_context(|| format!("no rustc with rust-src for the eBPF programs; {hint}"))?;
    let linker =
        toolchain::find_bpf_linker().with_context(|| format!("bpf-linker not found; {hint}"))?;
    Ok((rustc, linker))
}

/// `cargo` (or `cargo-clippy`) running `subcommand` on fdprof-ebpf's binaries for
/// `bpfel-unknown-none` with `rustc` and `linker`, into `target_dir`.
fn bpf_cargo(
    cargo: std::ffi::OsString,
    subcommand: &str,
    rustc: &toolchain::EbpfRustc,
    linker: &Path,
    target_dir: &Path,
) -> Result<Command> {
    let mut cmd = Command::new(cargo);
    cmd.args([subcommand, "-p", "fdprof-ebpf", "--bins", "--release"])
        .args(["--target", "bpfel-unknown-none", "-Z", "build-std=core"])
        .arg("--target-dir")
        .arg(target_dir);
    clean_env(&mut cmd);
    // The linker must be on PATH for rustc; put its directory first.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![linker.parent().unwrap().to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    // RUSTC_BOOTSTRAP lets a stable rustc (and cargo) take `-Z build-std`.
    cmd.env("RUSTC", &rustc.rustc)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("PATH", std::env::join_paths(dirs)?)
        .env("CARGO_ENCODED_RUSTFLAGS", rustflags(&root(), target_dir));
    Ok(cmd)
}

/// The outer build's settings are for the host; they must not leak into the BPF build.
fn clean_env(cmd: &mut Command) {
    for var in [
        "RUSTFLAGS",
        "RUSTC_WRAPPER",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_TARGET",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
}

/// BTF (from the debug info) for aya, and every absolute path the object would hold mapped to
/// a fixed one: the debug info and BTF name source files.
fn rustflags(root: &Path, target_dir: &Path) -> String {
    let mut flags = vec![
        "--cfg=bpf_target_arch=\"x86_64\"".to_string(),
        "-Cdebuginfo=2".into(),
        "-Clink-arg=--btf".into(),
    ];
    let mut remap = |from: &Path, to: &str| {
        flags.push(format!("--remap-path-prefix={}={to}", from.display()));
    };
    if let Some(home) = toolchain::cargo_home() {
        remap(&home, "/cargo");
    }
    remap(root, "/fdprof");
    // The last match wins: the target directory (inside the checkout) before the checkout's.
    remap(target_dir, "/target");
    flags.join("\x1f")
}

/// `tool --version`'s line.
fn version(tool: &Path) -> Result<String> {
    let out = Command::new(tool)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {}", tool.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The names of the ELF sections whose contents differ between `a` and `b` (or that only one
/// has), the first few: program sections mean other instructions, `maps`/`.maps` other maps,
/// `.BTF*` and `.debug_*` other types or debug info.
fn differing_sections(a: &[u8], b: &[u8]) -> String {
    let (Some(a), Some(b)) = (sections(a), sections(b)) else {
        return "(not an ELF object)".into();
    };
    let mut names: Vec<&String> = a.keys().chain(b.keys()).collect();
    names.sort();
    names.dedup();
    let differ: Vec<&str> = names
        .into_iter()
        .filter(|n| a.get(*n) != b.get(*n))
        .map(String::as_str)
        .collect();
    const SHOWN: usize = 12;
    let more = differ.len().saturating_sub(SHOWN);
    let mut text = differ[..differ.len().min(SHOWN)].join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    if text.is_empty() {
        text = "none (the ELF headers or layout)".into();
    }
    text
}

/// Each section's contents by name.
fn sections(data: &[u8]) -> Option<BTreeMap<String, Vec<u8>>> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(data).ok()?;
    file.sections()
        .map(|s| Some((s.name().ok()?.to_string(), s.data().ok()?.to_vec())))
        .collect()
}
