//! Argument types several subcommands share (clap's side of them), each turned into the
//! library's own type where it is used.

use fdprof_common::probes::Mode;

use fdprof_profiler::analysis::{LockFilter, OpFilter};
use fdprof_profiler::collect::TargetSpec;

/// What to profile (record, top): the launched command, positional and last, is each
/// subcommand's own.
#[derive(clap::Args, Debug)]
pub(crate) struct TargetArgs {
    /// This process (all its threads, including ones created later); give -p several times
    /// for several processes, each with its own figures as under -a
    #[arg(short, long, value_name = "PID")]
    pub pid: Vec<u32>,
    /// With -p, also follow the processes they start, from their fork (threads are always
    /// followed)
    #[arg(long, requires = "pid")]
    pub children: bool,
    /// The processes of this cgroup and the cgroups below it (a directory under
    /// /sys/fs/cgroup, v2 or v1): those in it now, those started or moved in later; each with
    /// its own figures as under -a (repeatable)
    #[arg(long, value_name = "PATH")]
    pub cgroup: Vec<std::path::PathBuf>,
    /// This thread only
    #[arg(short, long)]
    pub tid: Option<u32>,
    /// Every process but fdprof itself
    #[arg(short, long)]
    pub all: bool,
}

impl TargetArgs {
    /// The target these flags name, `command` when none does.
    pub(crate) fn spec(&self, command: &[String]) -> TargetSpec {
        TargetSpec::of(
            &self.pid,
            self.children,
            &self.cgroup,
            self.tid,
            self.all,
            command,
        )
    }
}

/// How to probe (record, top, daemon): the mode, what to leave out, what to add.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ProbeArgs {
    /// Probe mode: auto picks the most direct one this kernel allows
    #[arg(long, value_enum, default_value = "auto")]
    pub mode: ModeArg,
    /// Lock contention only: no fd syscall or fd function probes, so no scan, syscall or
    /// table figures, at the lowest cost to the target
    #[arg(long)]
    pub lock_only: bool,
    /// Also time every fd syscall, entry to exit, for the latency histograms (two clock reads
    /// per syscall); without it the syscalls are counted exactly but not timed
    #[arg(long, conflicts_with = "lock_only")]
    pub latency: bool,
    /// Also sample the targets on CPU (kernel and user stacks), --freq times a second on each
    /// CPU: hardware cycles where the machine has a PMU, else cpu-clock; the figures get their
    /// on-CPU section and `flamegraph --cpu` (the daemon: /flamegraph.svg?cpu=1) draws it
    #[arg(long)]
    pub cpu: bool,
    /// On-CPU samples a second per CPU (with --cpu)
    #[arg(long, requires = "cpu", value_parser = clap::value_parser!(u64).range(1..=fdprof_common::cpu::MAX_FREQUENCY_HZ),
          default_value_t = fdprof_common::cpu::DEFAULT_FREQUENCY_HZ)]
    pub freq: u64,
    /// How user stacks are walked: dwarf, a copy of the stack's top unwound by fdprof from the
    /// mapped files' call-frame information (whole on code built without frame pointers, as
    /// distributions build it); fp, the kernel's frame-pointer walk (cheaper per new stack,
    /// but it stops after the first frame of such code)
    #[arg(long, value_enum, default_value = "dwarf")]
    pub call_graph: CallGraphArg,
}

/// How user stacks are walked (`--call-graph`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CallGraphArg {
    Dwarf,
    Fp,
}

impl CallGraphArg {
    pub(crate) fn walk(self) -> fdprof_profiler::collect::CallGraph {
        match self {
            CallGraphArg::Dwarf => fdprof_profiler::collect::CallGraph::Dwarf,
            CallGraphArg::Fp => fdprof_profiler::collect::CallGraph::Fp,
        }
    }
}

impl ProbeArgs {
    /// The sampling frequency, with `--cpu`.
    pub(crate) fn cpu_hz(&self) -> Option<u64> {
        self.cpu.then_some(self.freq)
    }
}

/// How to attach (`--mode`): record, top and the daemon.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ModeArg {
    Auto,
    Fentry,
    Kprobe,
    Tracepoint,
}

impl ModeArg {
    /// The mode forced on every function role; `None` lets each take the most direct one.
    pub(crate) fn forced(self) -> Option<Mode> {
        match self {
            ModeArg::Auto => None,
            ModeArg::Fentry => Some(Mode::Fentry),
            ModeArg::Kprobe => Some(Mode::Kprobe),
            ModeArg::Tracepoint => Some(Mode::Tracepoint),
        }
    }
}

/// Which operations to draw.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpArg {
    /// Waits while allocating an fd (`alloc_fd`).
    Alloc,
    /// Waits while closing an fd (`file_close_fd`, `close_fd`).
    Close,
    /// Every operation, including `expand`, `dup2`, … and `other`.
    All,
}

impl From<OpArg> for OpFilter {
    fn from(arg: OpArg) -> Self {
        match arg {
            OpArg::Alloc => OpFilter::Alloc,
            OpArg::Close => OpFilter::Close,
            OpArg::All => OpFilter::All,
        }
    }
}

/// Which locks to draw.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockArg {
    /// Only the target's own `files->file_lock`.
    #[value(name = "file_lock", alias = "file-lock")]
    FileLock,
    /// Every lock class recorded (other spinlocks, mutexes, rwsems).
    All,
}

impl From<LockArg> for LockFilter {
    fn from(arg: LockArg) -> Self {
        match arg {
            LockArg::FileLock => LockFilter::FileLock,
            LockArg::All => LockFilter::All,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn clap_names() {
        assert_eq!(LockArg::from_str("file_lock", false), Ok(LockArg::FileLock));
        assert_eq!(LockArg::from_str("file-lock", false), Ok(LockArg::FileLock));
        assert_eq!(OpArg::from_str("close", false), Ok(OpArg::Close));
    }
}

/// Where names for stripped binaries are looked for (record, top, daemon).
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct DebugArgs {
    /// Also look for debug files here (repeatable): a build-id tree (DIR/.build-id/ab/cdef….debug)
    /// or a folder of the files binaries' .gnu_debuglink names, as an artifact store keeps them.
    /// The binary's own folder, its .debug/, /usr/lib/debug (the process's, in a container) and
    /// MiniDebugInfo are always looked in
    #[arg(long, value_name = "DIR")]
    pub debug_dir: Vec<std::path::PathBuf>,
    /// debuginfod servers to fetch debug files from by build id, whitespace-separated (http://
    /// or https://) [default: $DEBUGINFOD_URLS, which sudo drops]; "" fetches nothing. Fetches
    /// run in the background and never hold up a screen or an interval
    #[arg(long, value_name = "URLS")]
    pub debuginfod: Option<String>,
    /// Where fetched debug files are kept: made root's, mode 0700, and written without
    /// following links
    #[arg(long, value_name = "DIR", default_value = fdprof_profiler::symbolize::debuginfod::DEFAULT_CACHE_DIR)]
    pub debuginfod_cache: std::path::PathBuf,
    /// The cache's bound (the oldest files go past it), and so one download's: bytes, or with a
    /// suffix K, M, G or T
    #[arg(long, value_name = "SIZE", value_parser = fdprof_profiler::size::parse, default_value = "2G")]
    pub debuginfod_cache_size: u64,
}

impl DebugArgs {
    /// The library's options; `wait`: how long a recording's end waits for fetches.
    pub(crate) fn options(
        &self,
        wait: std::time::Duration,
    ) -> fdprof_profiler::symbolize::DebugOptions {
        fdprof_profiler::symbolize::DebugOptions {
            dirs: self.debug_dir.clone(),
            debuginfod: self.debuginfod.clone(),
            cache: self.debuginfod_cache.clone(),
            cache_size: self.debuginfod_cache_size,
            wait,
        }
    }
}
