//! The recording: everything `record` measured, symbolized, in one versioned JSON document.
//! `report`, `flamegraph`, `top` and the daemon all read this model; none re-derives figures.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use fdprof_common::{
    contention::LockKind,
    fnops::Operation,
    probes::{Attachment, Mode, Role},
    session::{EndReason, TargetKind},
};

pub use fdprof_common::session::ExitStatus;

use super::bounded;
use super::hist::Log2Hist;

pub const FORMAT: &str = "fdprof-recording";
/// 2: roles' attachments typed (`probes`), enums for lock, operation, mode and end reason.
pub const VERSION: u32 = 2;

pub use super::frame::Frame;

/// Waits on one lock class from one pair of stacks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ContentionSite {
    /// `file_lock` (the target's own), `spinlock`, `mutex`, `rwsem`, `other`.
    pub lock: LockKind,
    /// The lock's name where fdprof could tell more than its kind (not in recordings made
    /// before fdprof named locks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_name: Option<super::lock::LockName>,
    /// The fd-table operation on the waiter's kernel stack.
    pub operation: Operation,
    /// Innermost frame first. Empty when the stack could not be taken (counted in drops).
    #[serde(deserialize_with = "bounded::frames")]
    pub kernel_stack: Vec<Frame>,
    #[serde(deserialize_with = "bounded::frames")]
    pub user_stack: Vec<Frame>,
    pub count: u64,
    pub total_wait_ns: u64,
    pub max_wait_ns: u64,
    /// Wait-time histogram (ns).
    pub wait: Log2Hist,
    /// The waiting process, in system-wide recordings (`-a`); absent otherwise, and for waits
    /// of the idle task (an interrupt landing on an idle CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
}

impl ContentionSite {
    /// The lock as the figures name it.
    pub fn figure_lock(&self) -> fdprof_figures::Lock {
        super::lock::figure(self.lock, self.lock_name.as_ref())
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SyscallStats {
    #[serde(deserialize_with = "bounded::name")]
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
    pub operation: Operation,
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
    #[serde(deserialize_with = "bounded::text")]
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
    #[serde(deserialize_with = "bounded::name")]
    pub probe: String,
    #[serde(deserialize_with = "bounded::name")]
    pub reason: String,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgramCost {
    #[serde(deserialize_with = "bounded::name")]
    pub name: String,
    pub run_time_ns: u64,
    pub run_count: u64,
    pub recursion_misses: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OwnCost {
    #[serde(deserialize_with = "bounded::programs")]
    pub programs: Vec<ProgramCost>,
    /// CPU time (user + system) fdprof's collector spent while recording.
    pub collector_cpu_ns: u64,
    /// How long the kernel's run-time statistics were on (sampled windows): the programs'
    /// `run_time_ns` and `run_count` cover this much of the recording.
    #[serde(default)]
    pub stats_window_ns: u64,
    /// Time the lock probes spent walking stacks within that window, ns: part of their
    /// `run_time_ns`, but left out of the waits they measure.
    #[serde(default)]
    pub walk_ns_sampled: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    pub kind: TargetKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The processes given (`-p` several times, or with `--children`); empty otherwise.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::pids"
    )]
    pub pids: Vec<u32>,
    /// The processes the given ones start are followed too (`--children`); a launched command's
    /// always are, from their fork, counted as the command's own (false in recordings made
    /// before they were).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub children: bool,
    /// The cgroups followed (`--cgroup`), as `/proc/PID/cgroup` names them; empty otherwise.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::cgroups"
    )]
    pub cgroups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::command"
    )]
    pub command: Vec<String>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "bounded::opt_name"
    )]
    pub comm: Option<String>,
    /// How a launched command ended; absent for other targets, and when it was still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<ExitStatus>,
    /// The process's live threads when last looked at (live views); absent in recordings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
}

impl Target {
    /// One line naming the target, its comm and command line escaped ([`crate::escape`]).
    pub fn describe(&self) -> String {
        let line = match self.kind {
            TargetKind::All => "all processes".into(),
            TargetKind::Tid => format!("thread {}", self.tid.unwrap_or(0)),
            TargetKind::Command => {
                // The program's file name, not its path: titles and headers stay readable.
                let mut words = self.command.iter().map(String::as_str);
                let program = words
                    .next()
                    .map(|p| p.rsplit('/').next().unwrap_or(p))
                    .unwrap_or_default();
                let line: Vec<&str> = std::iter::once(program).chain(words).collect();
                format!(
                    "`{}` (pid {}){}",
                    line.join(" "),
                    self.pid.unwrap_or(0),
                    if self.children {
                        " and what it starts"
                    } else {
                        ""
                    }
                )
            }
            TargetKind::Pids => {
                let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
                format!(
                    "pids {}{}",
                    pids.join(", "),
                    if self.children {
                        " and the processes they start"
                    } else {
                        ""
                    }
                )
            }
            TargetKind::Cgroup => format!(
                "the processes of cgroup{} {}",
                if self.cgroups.len() > 1 { "s" } else { "" },
                self.cgroups.join(", ")
            ),
            TargetKind::Name => format!(
                "processes named {}",
                self.comm.as_deref().unwrap_or_default()
            ),
            TargetKind::Pid => format!(
                "pid {}{}",
                self.pid.unwrap_or(0),
                self.comm
                    .as_ref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default()
            ),
        };
        crate::escape::name(&line).into_owned()
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
    /// The user stacks unwound from call-frame information.
    #[serde(default)]
    pub user: UserWalks,
}

pub use fdprof_figures::UserWalks;

/// The event that drove on-CPU sampling (defined with the kernel contract, so the collector
/// and the figures name it the same way).
pub use fdprof_common::cpu::CpuEvent;

/// On-CPU samples of the target (`record --cpu`), merged by stack pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuProfile {
    pub event: CpuEvent,
    /// Samples a second asked for, per CPU; each sample stands for 1/frequency of CPU time.
    pub frequency_hz: u64,
    #[serde(deserialize_with = "bounded::cpu_sites")]
    pub samples: Vec<CpuSite>,
}

/// Samples taken in one pair of stacks.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuSite {
    /// Innermost frame first; empty when the sample was taken in user mode or the stack could
    /// not be taken (counted in drops).
    #[serde(deserialize_with = "bounded::frames")]
    pub kernel_stack: Vec<Frame>,
    #[serde(deserialize_with = "bounded::frames")]
    pub user_stack: Vec<Frame>,
    pub count: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Recording {
    #[serde(deserialize_with = "bounded::name")]
    pub format: String,
    pub version: u32,
    #[serde(deserialize_with = "bounded::name")]
    pub fdprof_version: String,
    #[serde(deserialize_with = "bounded::name")]
    pub kernel_release: String,
    pub target: Target,
    pub started_unix_ms: u64,
    pub duration_ns: u64,
    pub end_reason: EndReason,
    /// Overall probe mode: the allocator's (with `--lock-only`, the lock slow path's).
    pub mode: Mode,
    /// How each probe role was attached. Keys are roles and values are bounded, so a map read
    /// from a file has at most one entry per role.
    pub probes: BTreeMap<Role, Attachment>,
    /// The same as text (`fentry (alloc_fd)`, `tp_btf`, …), for people and scripts reading the
    /// file; fdprof itself reads `probes`.
    #[serde(deserialize_with = "bounded::modes")]
    pub modes: BTreeMap<String, String>,
    pub raw_addrs: bool,
    /// Whether the fd syscalls were timed (`record --latency`); when not, `syscalls[].latency`
    /// is empty. Absent in recordings made while they always were: then true.
    #[serde(default = "always_timed")]
    pub syscall_latency: bool,
    #[serde(deserialize_with = "bounded::sites")]
    pub contention: Vec<ContentionSite>,
    #[serde(default)]
    pub stack_walks: StackWalks,
    /// Direct-probe figures per operation; empty in tracepoint mode.
    #[serde(default, deserialize_with = "bounded::functions")]
    pub functions: Vec<FunctionStats>,
    #[serde(deserialize_with = "bounded::syscalls")]
    pub syscalls: Vec<SyscallStats>,
    pub scan: ScanStats,
    pub table: TableStats,
    /// Every drop counter, zero or not.
    #[serde(deserialize_with = "bounded::drops")]
    pub drops: Vec<DropCount>,
    pub own_cost: OwnCost,
    #[serde(default, deserialize_with = "bounded::notes")]
    pub notes: Vec<String>,
    /// `record --interval`: one sample per interval; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub series: Option<super::series::Series>,
    /// `record --cpu`: the target's on-CPU samples; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuProfile>,
    /// `record --trace`: every fd-table operation of the target; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<super::trace::Trace>,
    /// The target's per-thread counters (`record`, unless `--no-counters` or `-a`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<super::counters::Counters>,
    /// Each process's fd syscalls in a system-wide recording (`-a`), most calls first; empty
    /// otherwise.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "bounded::processes"
    )]
    pub processes: Vec<ProcessRecord>,
    /// The processes a bounded recording holds no row of (the daemon's kept intervals, and the
    /// captures made of them), added up into one; absent where every process has its row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_folded: Option<FoldedProcesses>,
    /// The machine's steal time over the recording (`record`); absent where `/proc/stat`
    /// could not be read and in recordings made before fdprof read it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<StealTime>,
    /// The daemon at rest (`--tier rest`): the windows in which the fd syscalls were traced
    /// (`syscalls`, `scan`, `table` and the process rows cover only these; the lock waits the
    /// whole recording). Absent where they were traced throughout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_tracing: Option<fdprof_figures::FullTracing>,
}

/// One process of a system-wide recording: its name and its fd syscalls (rows as the
/// recording's own, without latencies). Its waits are the `contention` sites with its `pid`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProcessRecord {
    pub pid: u32,
    /// As the kernel named it at its latest first use of an fd syscall.
    #[serde(deserialize_with = "bounded::name")]
    pub comm: String,
    /// Its cgroup, container and pid in its namespace, read while it lived; empty in
    /// recordings made before fdprof read them.
    #[serde(flatten)]
    pub identity: fdprof_figures::Identity,
    #[serde(deserialize_with = "bounded::syscalls")]
    pub syscalls: Vec<SyscallStats>,
    /// Its allocator's scans (the bits histogram only: no word counts per process) and its
    /// table's size (no first size: `max_fds_first` 0). Absent where it allocated nothing, and
    /// in recordings made before fdprof kept them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableStats>,
}

/// Processes folded together out of a bounded recording: how many rows went into it, their fd
/// syscalls, scans and table sizes added up as a process's are, and their waits (whose sites
/// no longer name their pids).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FoldedProcesses {
    /// Process rows folded: in a recording of several intervals, a process folded in two of
    /// them counts in each.
    pub processes: u64,
    #[serde(deserialize_with = "bounded::syscalls")]
    pub syscalls: Vec<SyscallStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan: Option<ScanStats>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table: Option<TableStats>,
    /// Their waits on their own `file_lock`, and on every lock.
    pub file_lock_count: u64,
    pub file_lock_wait_ns: u64,
    pub wait_count: u64,
    pub wait_ns: u64,
}

/// Time the hypervisor ran something else while this machine's vCPUs were runnable, from
/// `/proc/stat` at the start and the end of the recording (tick resolution, 10 ms).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StealTime {
    pub steal_ns: u64,
    /// All the CPUs' time over the recording (idle included): the whole the steal is part of.
    pub total_ns: u64,
    pub cpus: u32,
    /// The CPU that lost the most: its steal and its total time.
    pub max_cpu_steal_ns: u64,
    pub max_cpu_total_ns: u64,
}

fn always_timed() -> bool {
    true
}

impl Recording {
    /// This recording's facts (format, target, time, modes, notes) and no figure: what a
    /// narrowed view (one process, one sample of the series) fills with its own.
    pub fn facts_only(&self) -> Recording {
        Recording {
            format: self.format.clone(),
            version: self.version,
            fdprof_version: self.fdprof_version.clone(),
            kernel_release: self.kernel_release.clone(),
            target: self.target.clone(),
            started_unix_ms: self.started_unix_ms,
            duration_ns: self.duration_ns,
            end_reason: self.end_reason,
            mode: self.mode,
            probes: self.probes.clone(),
            modes: self.modes.clone(),
            raw_addrs: self.raw_addrs,
            syscall_latency: self.syscall_latency,
            contention: Vec::new(),
            stack_walks: Default::default(),
            functions: Vec::new(),
            syscalls: Vec::new(),
            scan: Default::default(),
            table: Default::default(),
            drops: Vec::new(),
            own_cost: Default::default(),
            notes: self.notes.clone(),
            series: None,
            cpu: None,
            trace: None,
            counters: None,
            processes: Vec::new(),
            processes_folded: None,
            steal: None,
            full_tracing: self.full_tracing.clone(),
        }
    }

    /// Writes the recording file's bytes (pretty JSON) to `out`. The caller opens the file:
    /// fdprof's `output` never writes through a path it did not create.
    pub fn write(&self, out: impl std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer_pretty(out, self).map_err(std::io::Error::from)
    }

    /// The role attachments as text, for the `modes` field.
    pub fn modes_text(probes: &BTreeMap<Role, Attachment>) -> BTreeMap<String, String> {
        probes
            .iter()
            .map(|(role, how)| (role.name().to_string(), how.to_string()))
            .collect()
    }

    /// Whether fd syscall activity was recorded (not with `--lock-only`).
    pub fn fd_activity_recorded(&self) -> bool {
        self.probes.get(&Role::FdSyscalls) != Some(&Attachment::Off)
    }

    /// Total wait on the target's `file_lock`.
    pub fn file_lock_wait_ns(&self) -> u64 {
        self.contention
            .iter()
            .filter(|c| c.lock == LockKind::FileLock)
            .fold(0, |sum, c| sum.saturating_add(c.total_wait_ns))
    }

    pub fn total_drops(&self) -> u64 {
        self.drops
            .iter()
            .fold(0, |sum, d| sum.saturating_add(d.count))
    }
}

#[cfg(test)]
mod tests {
    use crate::read::parse;

    /// The error for `version` set to `json` (`None`: no version field) in a valid recording.
    fn version_error(json: Option<&str>) -> String {
        let mut doc = serde_json::to_string(&crate::testdata::recording()).unwrap();
        doc = doc.replacen("\"version\":2,", "", 1);
        if let Some(v) = json {
            doc = doc.replacen('{', &format!("{{\"version\":{v},"), 1);
        }
        format!("{:#}", parse(doc.as_bytes(), "x.data").unwrap_err())
    }

    /// Recordings made while the syscalls were always timed have no `syscall_latency`.
    #[test]
    fn a_recording_without_syscall_latency_was_timed() {
        let mut rec = crate::testdata::recording();
        rec.syscall_latency = false;
        let doc = serde_json::to_string(&rec).unwrap();
        let old = doc.replacen("\"syscall_latency\":false,", "", 1);
        assert_ne!(old, doc);
        assert!(!parse(doc.as_bytes(), "x.data").unwrap().syscall_latency);
        assert!(parse(old.as_bytes(), "x.data").unwrap().syscall_latency);
    }

    #[test]
    fn older_versions_are_refused_naming_both() {
        for v in ["1", "0"] {
            assert_eq!(
                version_error(Some(v)),
                format!(
                    "x.data: recording format version {v} was written by an older fdprof; this \
                     fdprof reads version 2: record it again"
                )
            );
        }
    }

    #[test]
    fn wrong_versions_say_what_was_found() {
        let reads = "is not one this fdprof reads (it reads version 2)";
        for (json, found) in [
            ("\"1\"", "\"1\" (a string)"),
            ("1.0", "1.0 (not an integer)"),
            ("1e0", "1.0 (not an integer)"),
            ("-1", "-1 (a negative number)"),
            ("null", "null"),
            (
                "18446744073709551616",
                "18446744073709551616 (an integer beyond 64 bits)",
            ),
            ("3", "3"),
            ("true", "true (a boolean)"),
            ("[1]", "[…] (an array)"),
            ("{\"major\": 1}", "{…} (an object)"),
        ] {
            assert_eq!(
                version_error(Some(json)),
                format!("x.data: recording format version {found} {reads}"),
                "version {json}"
            );
        }
        assert_eq!(
            version_error(Some(&format!("\"{}\"", "9".repeat(100)))),
            format!(
                "x.data: recording format version \"{}\"… (a string) {reads}",
                "9".repeat(40)
            )
        );
    }

    #[test]
    fn missing_version_is_named() {
        assert_eq!(
            version_error(None),
            "x.data has no format version; this fdprof reads version 2"
        );
    }

    #[test]
    fn the_right_version_reads() {
        let doc = serde_json::to_vec(&crate::testdata::recording()).unwrap();
        let rec = parse(&doc, "x.data").unwrap();
        assert_eq!(rec.version, super::VERSION);
        assert_eq!(rec.contention.len(), 4);
    }
}

#[cfg(test)]
mod exit_status_tests {
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
            ExitStatus::Signal(15).to_string(),
            "killed by signal 15 (SIGTERM)"
        );
        assert_eq!(ExitStatus::Signal(64).to_string(), "killed by signal 64");
        assert_eq!(ExitStatus::Code(3).to_string(), "exited with code 3");
    }
}
