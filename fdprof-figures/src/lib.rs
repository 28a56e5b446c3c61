//! The figures of an fdprof report as typed serde structs: exactly what `fdprof report --json`
//! prints (`serde_json::to_string_pretty(&report)`), and what any reader of that JSON parses it
//! back into. fdprof computes them (its `analysis` layer); this crate only defines them, so a
//! reader such as `xtask` needs nothing but serde.
//!
//! Units: durations and times in ns (`_ns`) or ms (`_ms`), shares as fractions 0..=1, counts
//! as plain numbers. A figure that cannot be computed (a share of nothing, the quantile of an
//! empty histogram) is `null`.
#![warn(unreachable_pub)]

mod activity;
mod build_id;
mod cgroups;
mod comparison;
mod contention;
mod cost;
mod counters;
mod cpu;
mod diagnosis;
mod histogram;
mod live;
mod lock;
mod machine;
mod processes;
mod rates;
mod report;
mod stacks;
mod tiers;
mod timeline;

pub use activity::{Scan, Syscall, SyscallLatency, Table};
pub use build_id::BuildId;
pub use cgroups::{CgroupGroup, Container, FileLockWaits, Identity, Runtime};
pub use comparison::{Change, RangeComparison, Section, TimeRange};
pub use contention::{
    Contention, Function, LockOperation, LockTotal, StackWalks, UserWalks, WaitShare, WaitSource,
};
pub use cost::{DropCounter, Drops, OwnCost, ProgramCost};
pub use counters::{CounterName, CounterTotal, Counters, TargetCpu, ThreadRow};
pub use cpu::{Cpu, CpuOperation, CpuStack, Share};
pub use diagnosis::{
    Comparison, Diagnosis, Evidence, Figure, Finding, FindingStack, NotChecked, Remedy, Rule,
    STACKS as DIAGNOSIS_STACKS, StackSource,
};
pub use histogram::{Bucket, Histogram, LatencyLevel, Unit};
pub use live::{Event, EventKind, Interval};
pub use lock::{Lock, NamedBy};
pub use machine::Steal;
pub use processes::{OtherProcesses, Process};
pub use rates::{RateRow, Rates};
pub use report::{Header, Report, ReportOptions, SortKey, Target};
pub use stacks::{Frame, TopStack};
pub use tiers::{FullTracing, TracedWindow};
pub use timeline::{Timeline, TimelinePoint};

/// The value of [`Report::schema`]: names the document.
pub const SCHEMA: &str = "fdprof-report";
/// The value of [`Report::schema_version`]. Raised when a field changes or goes away; adding a
/// field keeps it.
pub const SCHEMA_VERSION: u32 = 2;

pub use fdprof_common::{
    contention::LockKind,
    cpu::CpuEvent,
    fnops::Operation,
    probes::{Attachment, Mode, Role},
    session::{EndReason, ExitStatus, TargetKind},
};

#[cfg(test)]
mod tests {
    use super::*;

    /// The header's fields sit at the top level and a report reads back as written.
    #[test]
    fn round_trip() {
        let mut r = Report::default();
        r.header.mode = Mode::Fentry;
        r.header.target.pid = Some(7);
        r.syscalls.push(Syscall {
            name: "socket".into(),
            calls: 3,
            ..Default::default()
        });
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["schema_version"], SCHEMA_VERSION);
        assert_eq!(v["mode"], "fentry");
        assert_eq!(v["options"]["sort"], "wait");
        assert_eq!(v["syscalls"][0]["latency"]["level"], "entry-to-exit");
        assert_eq!(v["syscalls"][0]["latency"]["unit"], "ns");
        assert!(v["target"].get("tid").is_none());
        let back: Report = serde_json::from_value(v).unwrap();
        assert_eq!(back, r);
    }

    /// An interval's JSON has one `duration_ns` (the report header's) and reads back whole.
    #[test]
    fn interval_round_trip() {
        let mut iv = Interval {
            index: 3,
            start_ns: 3_000,
            duration_ns: 1_000,
            ..Default::default()
        };
        iv.report.header.duration_ns = 1_000;
        let text = serde_json::to_string(&iv).unwrap();
        assert_eq!(text.matches("\"duration_ns\"").count(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["index"], 3);
        assert_eq!(v["duration_ns"], 1_000);
        let back: Interval = serde_json::from_str(&text).unwrap();
        assert_eq!(back, iv);
    }
}
