//! The recording: everything `record` measured, symbolized, in one versioned JSON document.
//! `report`, `flamegraph`, `top` and the daemon all read this model; none re-derives figures.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Serialize};

use super::hist::Log2Hist;

pub const FORMAT: &str = "fdprof-recording";
pub const VERSION: u32 = 1;

/// One stack frame. `address` is present only when recorded with `--raw-addrs` (KASLR).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame {
    pub function: String,
    /// Offset into the function, in bytes.
    pub offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<u64>,
}

/// Waits on one lock class from one pair of stacks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentionSite {
    /// `file_lock` (the target's own), `spinlock`, `mutex`, `rwsem`, `other`.
    pub lock: String,
    /// fd-table operation (`alloc`, `close`, `expand`, …, `other`).
    pub operation: String,
    /// Innermost frame first. Empty when the stack could not be taken (counted in drops).
    pub kernel_stack: Vec<Frame>,
    pub user_stack: Vec<Frame>,
    pub count: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
    /// Wait-time histogram (ns).
    pub wait: Log2Hist,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyscallStats {
    pub name: String,
    pub calls: u64,
    pub errors: u64,
    pub fds_created: u64,
    pub fds_closed: u64,
    /// fds taken with `alloc_fd` (not dup2/dup3).
    pub allocs: u64,
    /// Entry-to-exit latency (ns); syscall-level in tracepoint mode.
    pub latency: Log2Hist,
}

/// An fd-table operation seen by direct probes (fentry/kprobe modes) on its function and on
/// the spinlock slow path. `operation` "other" holds slow-path waits outside any probed call.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FunctionStats {
    pub operation: String,
    pub calls: u64,
    /// `expand_files` calls that grew the table.
    #[serde(default)]
    pub expanded: u64,
    /// Entry to exit of the function (ns).
    pub duration: Log2Hist,
    /// The locked section: duration minus the slow-path wait inside it (ns).
    pub hold: Log2Hist,
    /// Waits for the target's `file_lock` seen on the qspinlock slow path (ns).
    pub slowpath_wait: Log2Hist,
    /// Entries and exits that did not pair up.
    pub unpaired: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScanStats {
    pub allocations: u64,
    pub next_fd_hits: u64,
    /// Allocations that returned an fd below the origin read at entry (other threads at work).
    pub below_origin: u64,
    /// Where the origin was read and how exact it is.
    pub origin: String,
    pub bits: Log2Hist,
    pub open_fds_words: Log2Hist,
    pub full_fds_words: Log2Hist,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TableStats {
    /// `fdt->max_fds` at the first traced syscall, and the largest seen.
    pub max_fds_first: u64,
    pub max_fds_max: u64,
    /// Syscalls during which the table grew.
    pub expansions: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DropCount {
    pub probe: String,
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgramCost {
    pub name: String,
    pub run_time_ns: u64,
    pub run_count: u64,
    pub recursion_misses: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OwnCost {
    pub programs: Vec<ProgramCost>,
    /// CPU time (user + system) fdprof's collector spent while recording.
    pub collector_cpu_ns: u64,
    /// How long the kernel's run-time statistics were on (sampled windows): the programs'
    /// `run_time_ns` and `run_count` cover this much of the recording.
    #[serde(default)]
    pub stats_window_ns: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// `pid`, `tid`, `all` or `command`.
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// How a launched command ended; absent for other targets and in older recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<ExitStatus>,
}

/// How a launched command ended: `{"code": N}` or `{"signal": N}` in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// This signal killed it.
    Signal(i32),
}

impl ExitStatus {
    pub fn describe(self) -> String {
        match self {
            ExitStatus::Code(code) => format!("exited with code {code}"),
            ExitStatus::Signal(sig) => match signal_name(sig) {
                Some(name) => format!("killed by signal {sig} ({name})"),
                None => format!("killed by signal {sig}"),
            },
        }
    }
}

/// The name of a standard Linux signal (x86 and arm numbering).
fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    NAMES
        .get(usize::try_from(sig).ok()?.checked_sub(1)?)
        .copied()
}

impl Target {
    pub fn describe(&self) -> String {
        match self.kind.as_str() {
            "all" => "all processes".into(),
            "tid" => format!("thread {}", self.tid.unwrap_or(0)),
            "command" => {
                // The program's file name, not its path: titles and headers stay readable.
                let mut words = self.command.iter().map(String::as_str);
                let program = words
                    .next()
                    .map(|p| p.rsplit('/').next().unwrap_or(p))
                    .unwrap_or_default();
                let line: Vec<&str> = std::iter::once(program).chain(words).collect();
                format!("`{}` (pid {})", line.join(" "), self.pid.unwrap_or(0))
            }
            _ => format!(
                "pid {}{}",
                self.pid.unwrap_or(0),
                self.comm
                    .as_ref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            ),
        }
    }
}

/// How the contention stacks were obtained: walked, or reused from the same site (thread,
/// syscall, user return point, lock) walked before. Absent in recordings made before fdprof
/// reused stacks: then every one was walked.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StackWalks {
    pub walked: u64,
    pub reused: u64,
    /// A site's stacks are walked again at every this many contentions there.
    pub refresh_every: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recording {
    pub format: String,
    pub version: u32,
    pub fdprof_version: String,
    pub kernel_release: String,
    pub target: Target,
    pub started_unix_ms: u64,
    pub duration_ns: u64,
    /// `duration`, `interrupted`, `target_exited` or `command_exited`.
    pub end_reason: String,
    /// Overall probe mode (`fentry`, `kprobe`, `tracepoint`).
    pub mode: String,
    /// How each probe role was attached.
    pub modes: BTreeMap<String, String>,
    pub raw_addrs: bool,
    pub contention: Vec<ContentionSite>,
    #[serde(default)]
    pub stack_walks: StackWalks,
    /// Direct-probe figures per operation; empty in tracepoint mode.
    #[serde(default)]
    pub functions: Vec<FunctionStats>,
    pub syscalls: Vec<SyscallStats>,
    pub scan: ScanStats,
    pub table: TableStats,
    /// Every drop counter, zero or not.
    pub drops: Vec<DropCount>,
    pub own_cost: OwnCost,
    #[serde(default)]
    pub notes: Vec<String>,
}

impl Recording {
    /// Reads a recording, with a clear error for a missing, truncated or foreign file.
    pub fn read(path: &Path) -> Result<Self> {
        let data =
            std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        let value: serde_json::Value = serde_json::from_slice(&data).map_err(|e| {
            anyhow::anyhow!(
                "{} is not a complete fdprof recording (truncated or corrupt: {e})",
                path.display()
            )
        })?;
        if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
            bail!("{} is not an fdprof recording", path.display());
        }
        let version = value.get("version").and_then(|v| v.as_u64()).unwrap_or(0);
        if version != u64::from(VERSION) {
            bail!(
                "{} is recording format version {version}; this fdprof reads version {VERSION}",
                path.display()
            );
        }
        serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("{} is a corrupt fdprof recording: {e}", path.display()))
    }

    /// Writes atomically: a temporary file in the same directory, fsynced, then renamed.
    pub fn write(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec_pretty(self)?;
        crate::output::write_atomically(path, &json)
    }

    /// Total wait on the target's `file_lock`.
    pub fn file_lock_wait_ns(&self) -> u64 {
        self.contention
            .iter()
            .filter(|c| c.lock == "file_lock")
            .map(|c| c.total_wait_ns)
            .sum()
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().map(|d| d.count).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_status_is_optional_and_tagged() {
        let old: Target = serde_json::from_str(r#"{"kind": "command", "pid": 7}"#).unwrap();
        assert_eq!(old.exit_status, None);
        let json = serde_json::to_value(&old).unwrap();
        assert!(json.get("exit_status").is_none(), "{json}");

        let mut t = old;
        t.exit_status = Some(ExitStatus::Signal(15));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["exit_status"], serde_json::json!({"signal": 15}));
        let back: Target = serde_json::from_value(json).unwrap();
        assert_eq!(back.exit_status, Some(ExitStatus::Signal(15)));
        assert_eq!(
            ExitStatus::Signal(15).describe(),
            "killed by signal 15 (SIGTERM)"
        );
        assert_eq!(ExitStatus::Signal(64).describe(), "killed by signal 64");
        assert_eq!(ExitStatus::Code(3).describe(), "exited with code 3");
    }
}
