//! Developer tasks: `cargo xtask bootstrap | ebpf | build | demo | test | bench | vm-test |
//! install | uninstall | deb | image | seccomp`.
#![warn(unreachable_pub)]

mod bench;
mod bootstrap;
mod ebpf;
#[cfg(test)]
mod house_rules;
mod image;
mod package;
mod run;
mod seccomp;
mod static_fdprof;
mod vm_test;
mod workspace;

use anyhow::Result;
use bootstrap::Needs;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "cargo xtask", about = "fdprof's developer tasks")]
struct Cli {
    #[command(subcommand)]
    command: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what rebuilding the eBPF objects and running the tests needs (idempotent)
    Bootstrap,
    /// Rebuild the committed eBPF objects (fdprof-profiler/ebpf/) from fdprof-ebpf, installing the eBPF
    /// toolchain where missing
    Ebpf {
        /// Only check that the committed objects are what the sources build (CI)
        #[arg(long)]
        check: bool,
    },
    /// Build fdprof (release) with its committed eBPF objects embedded
    Build,
    /// Build, then run the main job on the built-in default
    Demo,
    /// Bootstrap, then check the eBPF objects and run formatting, lints and every test (needs
    /// root: tests attach for real)
    Test,
    /// Benchmarks: `workload` (generator vs C), `overhead` (cost of profiling here),
    /// `top` (fdprof top's own CPU and memory), `daemon` (the daemon's overhead, scrape latency,
    /// memory and cost against its number of targets), `churn` (the daemon's scrape cost and
    /// memory at 1k, 10k and 100k short processes seen), `export` (how long `fdprof export`
    /// takes), `remedies` (each remedy against its load, measured by fdprof), `page` (the
    /// daemon page's requests and the browser's CPU with 32 names and 300 intervals kept),
    /// `stacks` (whole user stacks' cost beside the frame-pointer walk, and the unwinder's
    /// memory), `soak` (the daemon under churn, windows and scrapes on a busy host: memory, CPU
    /// and every endpoint's latency per hour) or `vm-overhead` (cost of each probe mode inside
    /// the qemu guests)
    Bench {
        #[arg(value_parser = ["workload", "overhead", "top", "daemon", "churn", "export", "remedies", "page", "stacks", "soak", "vm-overhead"])]
        what: String,
        /// Passed to the benchmark (e.g. --rounds 7)
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Boot Debian's 5.10, 6.1 and 6.12 kernels under qemu TCG and run the ground-truth scenarios there
    VmTest {
        /// Kernel series to boot
        #[arg(long, default_value = "all", value_parser = vm_test::kernel_choices())]
        kernel: String,
        /// Probe mode to record in (all: one boot runs every mode)
        #[arg(long, default_value = "all", value_parser = vm_test::mode_choices())]
        mode: String,
        /// Kill a guest that has not powered off after this many seconds
        #[arg(long, default_value_t = 480)]
        timeout: u64,
        /// One host thread per vCPU (real parallelism; guests may crash patching kernel text)
        #[arg(long)]
        mttcg: bool,
    },
    /// Build, then install the binary, man pages and completions under a prefix (replacing an
    /// earlier install there)
    Install {
        /// Where to install (bin/, share/man/, share/…-completion/ under it)
        #[arg(long, value_name = "DIR")]
        prefix: Option<std::path::PathBuf>,
    },
    /// Remove what `install` put under the prefix
    Uninstall {
        #[arg(long, value_name = "DIR")]
        prefix: Option<std::path::PathBuf>,
    },
    /// Build the container image (OCI, FROM scratch, the static fdprof; entrypoint fdprof,
    /// `daemon --all` by default) with podman, offline, and run it once (`--version`)
    Image,
    /// Trace the static fdprof under strace through a broad scenario (doctor, workload, record,
    /// report, top, the daemon at every endpoint and signal) and write the seccomp allow-list
    /// deploy/kubernetes/seccomp/fdprof.json (needs root)
    Seccomp,
    /// Build the Debian package: target/deb/fdprof_VERSION_ARCH.deb
    Deb,
}

fn main() {
    let cli = Cli::parse();
    let result: Result<()> = match cli.command {
        Task::Bootstrap => bootstrap::run(),
        Task::Ebpf { check } => bootstrap::install(Needs::Ebpf).and_then(|()| match check {
            true => ebpf::check(),
            false => ebpf::write(),
        }),
        // The eBPF objects are committed: building and running fdprof installs nothing.
        Task::Build => run::build_release(),
        Task::Demo => run::demo(),
        Task::Test => bootstrap::run().and_then(|()| run::test()),
        Task::Bench { what, args } => bootstrap::run().and_then(|()| bench::run(&what, &args)),
        Task::Install { prefix } => package::prefix_arg(prefix).and_then(|p| package::install(&p)),
        Task::Uninstall { prefix } => {
            package::prefix_arg(prefix).and_then(|p| package::uninstall(&p))
        }
        Task::Image => image::run(),
        Task::Seccomp => seccomp::run(),
        Task::Deb => bootstrap::install(Needs::Deb).and_then(|()| package::deb().map(drop)),
        Task::VmTest {
            kernel,
            mode,
            timeout,
            mttcg,
        } => bootstrap::run().and_then(|()| {
            let opts = vm_test::Options {
                timeout: std::time::Duration::from_secs(timeout),
                mttcg,
            };
            let (_, failed) = vm_test::run(&kernel, &mode, &opts)?;
            if failed > 0 {
                anyhow::bail!("{failed} vm-test check(s) failed");
            }
            Ok(())
        }),
    };
    if let Err(err) = result {
        eprintln!("xtask: error: {err:#}");
        std::process::exit(1);
    }
}
