//! What a live profile (`fdprof top`, the daemon, `record --interval`) streams: one
//! [`Interval`] per snapshot interval, and the [`Event`]s that each deserve a record of their
//! own.

use fdprof_common::fnops::Operation;
use serde::{Deserialize, Serialize};

use crate::{Frame, Report};

/// What happened between two snapshots of one profiler.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "IntervalJson")]
pub struct Interval {
    /// 0 for the first interval.
    pub index: u64,
    /// Start of the interval, ns since the probes were attached.
    pub start_ns: u64,
    /// The same as `report.header.duration_ns`, which the JSON carries: a second
    /// `duration_ns` key at the top level would make the JSON unreadable.
    #[serde(skip)]
    pub duration_ns: u64,
    /// The interval's figures, with the names and shapes `report --json` gives a whole
    /// recording (its fields sit at the top level of the JSON).
    #[serde(flatten)]
    pub report: Report,
    /// The events of the interval, oldest first.
    #[serde(default)]
    pub events: Vec<Event>,
}

/// An [`Interval`] as its JSON holds it: its length only in the report's header.
#[derive(Deserialize)]
struct IntervalJson {
    index: u64,
    start_ns: u64,
    #[serde(flatten)]
    report: Report,
    #[serde(default)]
    events: Vec<Event>,
}

impl From<IntervalJson> for Interval {
    fn from(json: IntervalJson) -> Self {
        Interval {
            index: json.index,
            start_ns: json.start_ns,
            duration_ns: json.report.header.duration_ns,
            report: json.report,
            events: json.events,
        }
    }
}

/// An event read from the kernel's ring buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// ns since the probes were attached.
    pub at_ns: u64,
    /// Process and thread it happened in.
    pub pid: u32,
    pub tid: u32,
    #[serde(flatten)]
    pub what: EventKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EventKind {
    /// The fd table grew from `old_max_fds` to `new_max_fds`; `duration_ns` is the growth's own
    /// time where a direct probe on `expand_files` saw it.
    Expansion {
        old_max_fds: u64,
        new_max_fds: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        duration_ns: Option<u64>,
    },
    /// A wait longer than the `--slow` threshold.
    SlowWait {
        #[serde(flatten)]
        lock: crate::Lock,
        operation: Operation,
        wait_ns: u64,
        /// Innermost frame first; empty when not captured.
        kernel_stack: Vec<Frame>,
        user_stack: Vec<Frame>,
    },
    /// A thread of the target exited; `process` when it was the last one.
    Exit { process: bool },
}
