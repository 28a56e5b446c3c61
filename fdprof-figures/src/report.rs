//! The report's root and its header.

use std::collections::BTreeMap;

use fdprof_common::{
    probes::{Attachment, Mode, Role},
    session::{EndReason, ExitStatus, TargetKind},
};
use serde::{Deserialize, Serialize};

use crate::{
    Contention, Drops, Function, OwnCost, SCHEMA, SCHEMA_VERSION, Scan, StackWalks, Syscall, Table,
    TopStack,
};

/// Every figure of one report, as `fdprof report --json` prints it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// [`SCHEMA_VERSION`] of the fdprof that wrote it.
    pub schema_version: u32,
    /// The recording: whose, when, how. Its fields sit at the top level of the JSON.
    #[serde(flatten)]
    pub header: Header,
    /// The options the report was made with.
    pub options: ReportOptions,
    /// Lock waits by lock class and fd-table operation.
    pub contention: Contention,
    /// How the contention stacks were taken.
    pub stack_walks: StackWalks,
    /// Direct-probe figures per fd-table operation; empty in tracepoint mode.
    pub functions: Vec<Function>,
    /// The first `options.top` stack groups in `options.sort` order (all with `top` 0).
    pub top_stacks: Vec<TopStack>,
    /// How many stack groups there are in all, shown or not.
    pub stacks_total: usize,
    /// False for `record --lock-only` recordings: then `scan`, `syscalls` and `table` were not
    /// recorded (they are empty), not zero.
    pub fd_activity_recorded: bool,
    /// The lowest-free-fd search in `alloc_fd`.
    pub scan: Scan,
    /// What [`SyscallLatency::level`] says for every syscall of this recording.
    pub syscall_latency_level: crate::LatencyLevel,
    /// Traced syscalls that were called at least once, in the recording's order.
    pub syscalls: Vec<Syscall>,
    /// Names of [`Report::syscalls`], most calls first (ties by name).
    pub syscalls_by_calls: Vec<String>,
    /// Growth of the fd table.
    pub table: Table,
    /// Events lost, per counter.
    pub drops: Drops,
    /// What recording cost: the eBPF programs' run time and the collector's CPU time.
    pub own_cost: OwnCost,
    /// The patterns the figures show and their remedies (absent in reports made before
    /// fdprof diagnosed: then read as no finding).
    #[serde(default)]
    pub diagnosis: crate::Diagnosis,
    /// Rates over time, for a recording made with `record --interval`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rates: Option<crate::Rates>,
    /// The target's per-thread counters; absent when the recording has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counters: Option<crate::Counters>,
    /// On-CPU samples, for a recording made with `record --cpu`; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<crate::Cpu>,
    /// The machine's steal time over the recording; absent where it was not read (recordings
    /// made before fdprof read it, or without `/proc/stat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<crate::Steal>,
    /// The windows in which the fd syscalls were traced, in a recording of the daemon at rest
    /// (`--tier rest`): `syscalls`, `scan` and `table` cover only these, the lock waits the
    /// whole recording. Absent where they were traced throughout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_tracing: Option<crate::FullTracing>,
    /// Per process, for a system-wide recording (`-a`): every process that made an fd syscall
    /// or waited, most `file_lock` wait first, then most wait, most fd syscalls, lowest pid.
    /// Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<crate::Process>,
    /// The processes `processes` has no row of, folded into one (the daemon's bounded
    /// windows); absent where every process has its row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub processes_others: Option<crate::OtherProcesses>,
    /// The processes by container, or outside containers by cgroup (each process of
    /// `processes` in one group), most `file_lock` wait first, then most fd syscalls. Empty
    /// where `processes` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<crate::CgroupGroup>,
}

impl Default for Report {
    /// An empty report of this schema.
    fn default() -> Self {
        Report {
            schema: SCHEMA.into(),
            schema_version: SCHEMA_VERSION,
            header: Header::default(),
            options: ReportOptions::default(),
            contention: Contention::default(),
            stack_walks: StackWalks::default(),
            functions: Vec::new(),
            top_stacks: Vec::new(),
            stacks_total: 0,
            fd_activity_recorded: true,
            scan: Scan::default(),
            syscall_latency_level: crate::LatencyLevel::default(),
            syscalls: Vec::new(),
            syscalls_by_calls: Vec::new(),
            table: Table::default(),
            drops: Drops::default(),
            own_cost: OwnCost::default(),
            diagnosis: crate::Diagnosis::default(),
            rates: None,
            counters: None,
            cpu: None,
            steal: None,
            full_tracing: None,
            processes: Vec::new(),
            processes_others: None,
            cgroups: Vec::new(),
        }
    }
}

/// Whose recording this is, when and how it was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// The fdprof that recorded it.
    pub fdprof_version: String,
    pub target: Target,
    /// `uname -r` of the recording machine.
    pub kernel_release: String,
    /// Start of the recording, Unix time in ms.
    pub started_unix_ms: u64,
    pub duration_ns: u64,
    /// `duration`, `interrupted`, `target_exited` or `command_exited`.
    pub end_reason: EndReason,
    /// Overall probe mode: `fentry`, `kprobe` or `tracepoint`.
    pub mode: Mode,
    /// How each probe role was attached, by role, as text (`fentry (alloc_fd)`, `tp_btf`, …).
    pub modes: BTreeMap<String, String>,
    /// The same, typed: `{"how": "direct", "mode": "fentry", "functions": ["alloc_fd"]}`,
    /// `{"how": "tp_btf"}`, `{"how": "tracepoint"}`, `{"how": "off"}`, ….
    pub probes: BTreeMap<Role, Attachment>,
    /// What the recorder wants the reader to know (refused probes, approximations).
    pub notes: Vec<String>,
}

/// What was profiled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// `pid`, `pids`, `tid`, `all`, `command` or `name`.
    pub kind: TargetKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// The processes given (kind `pids`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pids: Vec<u32>,
    /// The processes they start are followed too (`--children`; a launched command's always, its
    /// figures counted as its own).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub children: bool,
    /// The cgroups followed (`--cgroup`); empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cgroups: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tid: Option<u32>,
    /// The launched command line (kind `command`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// The process name the kernel knew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// How a launched command ended: `{"code": N}` or `{"signal": N}`; absent for other
    /// targets and when it was still running.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_status: Option<ExitStatus>,
    /// The process's live threads at the end of a live view's interval; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// One line naming the target, control characters escaped: `pid 42 (nginx)`.
    pub description: String,
}

/// How the report is made (inferno style: plain data with a default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportOptions {
    /// How many stack groups to show; 0 shows all.
    pub top: usize,
    pub sort: SortKey,
    /// Keep offsets in frames (`alloc_fd+0x1f`) and do not merge stacks that differ only there.
    pub offsets: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        ReportOptions {
            top: 10,
            sort: SortKey::Wait,
            offsets: false,
        }
    }
}

/// How the top stacks are ranked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SortKey {
    /// Total wait time.
    #[default]
    Wait,
    /// Number of waits.
    Count,
    /// Longest single wait.
    Max,
    /// Average wait.
    Avg,
}
