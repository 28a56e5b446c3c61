//! The overhead bench's variants: what each runs the workload under (nothing, a profiler, or
//! programs of the bench's own held attached around it), and `--only`'s choice of them.

use std::path::Path;

use anyhow::{Result, bail};

use crate::bench::floor::{LOCK_HOOKS, RECORD_HOOKS};
use crate::bench::harness::args::list_arg;
use crate::bench::lock_reference::Reference;

const BPFTRACE_SCRIPT: &str = "tracepoint:lock:contention_begin /pid == cpid/ { @start[tid] = nsecs; } \
tracepoint:lock:contention_end /@start[tid]/ { @wait_ns[kstack] = sum(nsecs - @start[tid]); delete(@start[tid]); }";

/// The `record --trace` row's recording.
pub(crate) const TRACE_OUTPUT: &str = "fdprof-trace.data";

/// The variants whose lock probes' run time is measured: the reference and fdprof's two.
pub(crate) const PROBE_TIME: &[&str] = &[
    "floor: lock timestamps",
    "floor: timestamps + site",
    "fdprof record",
    "fdprof --lock-only",
];

/// What runs the workload: the command before its argv.
#[derive(Clone, Copy)]
pub(crate) enum Wrap {
    /// Nothing: the workload alone.
    Bare,
    /// `fdprof record FLAGS -o OUTPUT --`.
    Record(&'static [&'static str]),
    /// `fdprof top --jsonl --interval 1s --` ([`top_wrap`]).
    Top,
    /// `perf lock record -o OUTPUT --`.
    PerfLock,
    /// The bpftrace one-liner, given the workload as one `-c` string.
    Bpftrace,
}

pub(crate) struct Variant {
    pub name: &'static str,
    pub wrap: Wrap,
    /// Where the profiler writes its recording, for the size figure.
    pub output: Option<&'static str>,
    /// Empty programs to hold attached around the run.
    pub empty_hooks: &'static [&'static str],
    /// Measure the waits with a minimal reference ([`crate::bench::lock_reference`]).
    pub lock_reference: Option<Reference>,
}

impl Variant {
    /// The whole command: the wrapper's, then `workload`'s argv.
    pub(crate) fn argv(&self, fdprof: &Path, out: &Path, workload: Vec<String>) -> Vec<String> {
        let file = |name: &str| out.join(name).display().to_string();
        let output = || file(self.output.expect("a profiler's recording"));
        let mut argv: Vec<String> = match self.wrap {
            Wrap::Bare => vec![],
            Wrap::Record(flags) => [fdprof.display().to_string(), "record".into()]
                .into_iter()
                .chain(flags.iter().map(|f| f.to_string()))
                .chain(["-o".into(), output(), "--".into()])
                .collect(),
            Wrap::Top => top_wrap(fdprof, out),
            Wrap::PerfLock => ["perf", "lock", "record", "-o", &output(), "--"]
                .map(String::from)
                .to_vec(),
            Wrap::Bpftrace => ["bpftrace", "-q", "-e", BPFTRACE_SCRIPT, "-c"]
                .map(String::from)
                .to_vec(),
        };
        match self.wrap {
            Wrap::Bpftrace => argv.push(workload.join(" ")),
            _ => argv.extend(workload),
        }
        argv
    }
}

/// The workload with nothing around it but the bench's own programs, if any.
const fn bare(
    name: &'static str,
    empty_hooks: &'static [&'static str],
    lock_reference: Option<Reference>,
) -> Variant {
    Variant {
        name,
        wrap: Wrap::Bare,
        output: None,
        empty_hooks,
        lock_reference,
    }
}

/// The workload under `fdprof record FLAGS`, recorded into `output`.
const fn record(
    name: &'static str,
    flags: &'static [&'static str],
    output: &'static str,
) -> Variant {
    Variant {
        name,
        wrap: Wrap::Record(flags),
        output: Some(output),
        empty_hooks: &[],
        lock_reference: None,
    }
}

/// The workload under another profiler.
const fn profiler(name: &'static str, wrap: Wrap, output: Option<&'static str>) -> Variant {
    Variant {
        name,
        wrap,
        output,
        empty_hooks: &[],
        lock_reference: None,
    }
}

/// Every variant, the baseline first.
pub(crate) fn variants() -> Vec<Variant> {
    vec![
        bare("baseline", &[], None),
        bare("floor: record hooks", RECORD_HOOKS, None),
        bare("floor: lock hooks", LOCK_HOOKS, None),
        bare("floor: lock timestamps", &[], Some(Reference::Timestamps)),
        bare("floor: timestamps + site", &[], Some(Reference::WithSite)),
        record("fdprof record", &[], "fdprof.data"),
        // What the per-thread counters (on by default) cost on top of the probes.
        record(
            "fdprof record --no-counters",
            &["--no-counters"],
            "fdprof-no-counters.data",
        ),
        record(
            "fdprof record --latency",
            &["--latency"],
            "fdprof-latency.data",
        ),
        record("fdprof record --trace", &["--trace"], TRACE_OUTPUT),
        record(
            "fdprof --lock-only",
            &["--lock-only"],
            "fdprof-lock-only.data",
        ),
        record("fdprof --cpu", &["--cpu"], "fdprof-cpu.data"),
        profiler("fdprof top", Wrap::Top, None),
        profiler("perf lock record", Wrap::PerfLock, Some("perf.data")),
        profiler("bpftrace one-liner", Wrap::Bpftrace, None),
    ]
}

/// `fdprof top --jsonl --interval 1s` with its intervals in `top.jsonl`: a shell keeps the
/// bench's stdout as fd 3 for the workload, so top's lines (tens of kB, not written atomically
/// to a pipe) cannot split the workload's result line.
fn top_wrap(fdprof: &Path, out: &Path) -> Vec<String> {
    [
        "sh",
        "-c",
        r#"top_out="$1"; shift; exec 3>&1 >"$top_out"; exec "$@""#,
        "sh",
        &out.join("top.jsonl").display().to_string(),
        &fdprof.display().to_string(),
        "top",
        "--jsonl",
        "--interval",
        "1s",
        "--",
        "sh",
        "-c",
        r#"exec "$@" >&3 3>&-"#,
        "sh",
    ]
    .map(String::from)
    .to_vec()
}

/// `--only NAME,NAME`: the baseline and the variants named (the syscall-cost bench is skipped).
pub(crate) fn selected(all: Vec<Variant>, args: &[String]) -> Result<Vec<Variant>> {
    const USAGE: &str = "--only takes variant names, comma-separated";
    let Some(names) = list_arg(args, "--only", USAGE)? else {
        return Ok(all);
    };
    if let Some(unknown) = names.iter().find(|n| !all.iter().any(|v| v.name == **n)) {
        let known: Vec<&str> = all.iter().map(|v| v.name).collect();
        bail!(
            "--only: no variant {unknown:?} (variants: {})",
            known.join(", ")
        );
    }
    Ok(all
        .into_iter()
        .enumerate()
        .filter(|(i, v)| *i == 0 || names.contains(&v.name))
        .map(|(_, v)| v)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv_of(name: &str) -> Vec<String> {
        let v = variants().into_iter().find(|v| v.name == name).unwrap();
        v.argv(
            Path::new("/f"),
            Path::new("/o"),
            vec!["/f".into(), "w".into()],
        )
    }

    #[test]
    fn each_wrapper_comes_before_the_workload() {
        assert_eq!(argv_of("baseline"), ["/f", "w"]);
        assert_eq!(
            argv_of("fdprof record"),
            ["/f", "record", "-o", "/o/fdprof.data", "--", "/f", "w"]
        );
        assert_eq!(
            argv_of("fdprof record --latency"),
            [
                "/f",
                "record",
                "--latency",
                "-o",
                "/o/fdprof-latency.data",
                "--",
                "/f",
                "w"
            ]
        );
        assert_eq!(
            argv_of("perf lock record"),
            [
                "perf",
                "lock",
                "record",
                "-o",
                "/o/perf.data",
                "--",
                "/f",
                "w"
            ]
        );
        assert_eq!(
            argv_of("bpftrace one-liner"),
            ["bpftrace", "-q", "-e", BPFTRACE_SCRIPT, "-c", "/f w"]
        );
        assert_eq!(
            argv_of("fdprof top")[5..10],
            ["/f", "top", "--jsonl", "--interval", "1s"]
        );
    }
}
