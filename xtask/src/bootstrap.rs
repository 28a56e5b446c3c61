//! `cargo xtask bootstrap`: installs what fdprof needs, only what is missing, saying what it
//! does and how long each step took. A second run on a ready machine takes seconds.
//!
//! The eBPF toolchain, for `cargo xtask ebpf` and the tests' object check only (fdprof builds
//! from the committed objects): a rustc with `rust-src` of the same release (a rustup toolchain
//! that has it, else Debian's `rustc-web` + `rust-web-src`) and `bpf-linker` built against
//! LLVM 22. The Debian package: `dpkg-dev`. Tests: all of these, and `bpftool`,
//! `tmux`, and `prometheus` (with `promtool`) for the daemon's and the dashboard's tests, which
//! run their own Prometheus: the packaged service is never left running (`service_guard`);
//! `golang-go`, `python3-jsonschema` and `npm` for the export tests (`go tool pprof`, speedscope's
//! schema); `nginx` and `apache2-utils` for the trace of a real server.

use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};

mod service_guard;

use crate::ebpf::toolchain as ebpf_toolchain;

const TOOLCHAIN_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src"];
const LLVM_PACKAGE: &str = "llvm-22-dev";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
const BPF_LINKER_VERSION: &str = "0.13.0";
/// `cargo xtask deb`'s tools: dpkg-shlibdeps (and strip, through binutils).
const DEB_PACKAGES: &[&str] = &["dpkg-dev"];
/// What the tests run: bpftool (an independent reader of the kernel's BTF and of the daemon's
/// maps, their entries counted through churn), tmux (a real
/// terminal for `fdprof top`'s screen) and prometheus + promtool (scrape `fdprof daemon`, check
/// the dashboard's queries and the scrape config) and systemd (`systemd-analyze verify` checks
/// the unit example in `dashboards/`; most Debian hosts have it already), golang-go (`go tool
/// pprof` reads `fdprof export`'s profiles), python3-jsonschema (checks speedscope exports
/// against the schema of the `speedscope` npm package), what the Debian package's round
/// trip needs (dpkg-dev, lintian, sudo, man-db), linux-perf (`perf record`, the reference
/// the on-CPU samples are checked against), and nginx with apache2-utils' `ab` (a server
/// nobody here wrote, under its own load client, traced and replayed; the tests run their own
/// nginx on loopback, never the packaged service), and the daemon's access tests' clients:
/// curl run as another user (setpriv, from util-linux), openssl for a TLS certificate and
/// python3 for a flood of idle connections; podman with runc (real containers, from a root
/// file system directory: no image is pulled); chromium (the daemon's page in a real browser);
/// python3-yaml (reads the Parca config and the Kubernetes manifests as YAML); python3-venv (a
/// virtualenv for `kubernetes-validate`, from PyPI, which checks the manifests); redis-server
/// and redis-tools (a server nobody here wrote, run in a container beside the DaemonSet's pod
/// under `redis-benchmark`; its packaged service never started); rust-web-clippy (clippy of the
/// eBPF toolchain's release, for fdprof-ebpf's lints); haproxy (a server built as Debian builds,
/// without frame pointers, whose on-CPU stacks fdprof's unwinder is judged on against `perf
/// record --call-graph dwarf`; the tests run their own on loopback, never the packaged
/// service); debuginfod (elfutils' symbol server, which the tests run on loopback over a
/// directory of debug files to fetch from).
const TEST_PACKAGES: &[&str] = &[
    "bpftool",
    "rust-web-clippy",
    "tmux",
    "prometheus",
    "systemd",
    "golang-go",
    "python3-jsonschema",
    "dpkg-dev",
    "lintian",
    "sudo",
    "man-db",
    "linux-perf",
    "nginx",
    "apache2-utils",
    "curl",
    "openssl",
    "util-linux",
    "python3",
    "podman",
    "runc",
    "chromium",
    "python3-yaml",
    "python3-venv",
    "redis-server",
    "redis-tools",
    "haproxy",
    "debuginfod",
    // The seccomp allow-list's trace (`cargo xtask seccomp`) and its test.
    "strace",
    // The static shell the pod test execs in the DaemonSet's pod (tests/it/pod_user.rs).
    "busybox-static",
    // setcap: the image's file capabilities (`cargo xtask image`).
    "libcap2-bin",
];
/// Commands the tests run and the package that brings each where it is missing: npm installs
/// the `speedscope` package for its schema (a host's Node.js may bring npm from elsewhere).
const TEST_COMMANDS: &[(&str, &str)] = &[("npm", "npm")];

/// Whether `command` is on the PATH.
fn on_path(command: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(command).is_file()))
}

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn timed(what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    eprintln!("[bootstrap] {what} ...");
    let start = Instant::now();
    f()?;
    eprintln!(
        "[bootstrap] {what}: done in {:.1}s",
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Runs apt-get non-interactively, showing its progress.
pub(crate) fn apt_get(args: &[&str]) -> Result<()> {
    let status = Command::new("apt-get")
        .args(args)
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .context("cannot run apt-get")?;
    if !status.success() {
        bail!("apt-get {} failed ({status})", args.join(" "));
    }
    Ok(())
}

fn apt_install(packages: &[&str]) -> Result<()> {
    if Command::new("apt-get").arg("--version").output().is_err() {
        bail!(
            "apt-get not found: install {} by other means (see TOOLCHAIN notes in README)",
            packages.join(" ")
        );
    }
    if !is_root() {
        bail!(
            "installing {} needs root: run `sudo cargo xtask bootstrap`, or install them yourself",
            packages.join(" ")
        );
    }
    apt_get(&["update"])?;
    let mut args = vec!["install", "-y", "--no-install-recommends"];
    args.extend_from_slice(packages);
    // Packages such as prometheus start their service from postinst: the guard forbids that
    // for the install's duration (restoring any policy the machine had), and afterwards makes
    // sure a systemd host neither runs nor boots the packaged services.
    let guard = service_guard::NoServiceStarts::install()?;
    let installed = apt_get(&args);
    guard.restore()?;
    installed?;
    service_guard::disable_packaged_services(packages)
}

/// What a task needs installed. Building and running fdprof (`build`, `demo`, `install`) needs
/// nothing: its eBPF objects are committed, so those tasks call no bootstrap at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Needs {
    /// Rebuilding the eBPF objects (`ebpf`): the eBPF toolchain.
    Ebpf,
    /// The Debian package (`deb`): dpkg-dev.
    Deb,
    /// The tests (which check the objects) and benchmarks: the eBPF toolchain, dpkg-dev and
    /// the tests' servers and tools (`test`, `bench`, `vm-test`, `bootstrap`).
    Tests,
}

impl Needs {
    fn ebpf(self) -> bool {
        self != Needs::Deb
    }
}

/// Everything (`cargo xtask bootstrap`).
pub(crate) fn run() -> Result<()> {
    install(Needs::Tests)
}

pub(crate) fn install(needs: Needs) -> Result<()> {
    let start = Instant::now();
    let mut missing: Vec<&str> = Vec::new();
    if needs.ebpf() {
        match ebpf_toolchain::find_rustc() {
            Some(r) => eprintln!(
                "[bootstrap] eBPF compiler: {} ({})",
                r.rustc.display(),
                r.origin
            ),
            None => missing.extend_from_slice(TOOLCHAIN_PACKAGES),
        }
        if ebpf_toolchain::find_bpf_linker().is_none() && !installed(LLVM_PACKAGE) {
            missing.push(LLVM_PACKAGE);
        }
    }
    if needs != Needs::Ebpf {
        missing.extend(DEB_PACKAGES.iter().filter(|p| !installed(p)));
    }
    if needs == Needs::Tests {
        missing.extend(TEST_PACKAGES.iter().filter(|p| !installed(p)));
        missing.extend(
            TEST_COMMANDS
                .iter()
                .filter(|(command, _)| !on_path(command))
                .map(|&(_, package)| package),
        );
    }

    if !missing.is_empty() {
        timed(&format!("apt-get install {}", missing.join(" ")), || {
            apt_install(&missing)
        })?;
        if needs.ebpf() && ebpf_toolchain::find_rustc().is_none() {
            bail!("still no rustc with rust-src after installing {TOOLCHAIN_PACKAGES:?}");
        }
    }
    if needs.ebpf() {
        bpf_linker()?;
    }
    eprintln!("[bootstrap] ready in {:.1}s", start.elapsed().as_secs_f64());
    Ok(())
}

/// Builds bpf-linker where none is found.
fn bpf_linker() -> Result<()> {
    match ebpf_toolchain::find_bpf_linker() {
        Some(path) => eprintln!("[bootstrap] bpf-linker: {}", path.display()),
        None => timed(
            &format!(
                "cargo install bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (takes a few minutes)"
            ),
            || {
                let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
                let status = Command::new(cargo)
                    .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION])
                    .args(["--no-default-features", "--features", "llvm-22"])
                    .env("LLVM_PREFIX", LLVM_PREFIX)
                    .env_remove("RUSTUP_TOOLCHAIN")
                    .status()
                    .context("cannot run cargo install")?;
                if !status.success() {
                    bail!("cargo install bpf-linker failed ({status})");
                }
                Ok(())
            },
        )?,
    }
    Ok(())
}
