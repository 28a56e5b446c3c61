//! The diagnosis: rules that read the report's own figures (and, for close loops, the fd
//! trace) and name the pattern behind them, the stacks that carry it and the remedy. Computed
//! once here, so `report`, `--json`, `top` and the daemon's `/report.json` all show the same.
//! Thresholds are the constants below; `docs/figures.md` states them.

mod loops;
mod rules;

use fdprof_figures::{
    Comparison, DIAGNOSIS_STACKS, Diagnosis, Evidence, Figure, FindingStack, NotChecked, Operation,
    Report, ReportOptions, Rule, SortKey, StackSource,
};
use fdprof_recording::Recording;

use super::{cpu, top_stacks};

/// shared-table: at least this many waits on the target's `file_lock` …
pub(super) const SHARED_MIN_WAITS: u64 = 100;
/// … adding up to at least this share of the recording's duration (100 µs a second).
pub(super) const SHARED_MIN_WAIT_SHARE: f64 = 0.0001;
/// long-scans: a scan this many bits past the origin or more is far (past one bitmap word).
pub(super) use super::scan::FAR_SCAN_BITS;
/// long-scans: at least this many far scans …
pub(super) const LONG_SCAN_MIN: u64 = 100;
/// … making at least this share of the allocations …
pub(super) const LONG_SCAN_SHARE: f64 = 0.1;
/// … while `next_fd` hits at most this share of them.
pub(super) const NEXT_FD_HIT_MAX: f64 = 0.9;
/// table-growth: at least this many syscalls grew the table during the recording.
pub(super) const GROWTH_MIN: u64 = 1;
/// close-loops: a run is this many closes or more, one after another by one thread, of fds
/// each one above or below the last …
pub(super) const CLOSE_RUN_MIN: u64 = 8;
/// … and the rule fires when the runs close at least this many fds in all.
pub(super) const CLOSE_LOOP_MIN_FDS: u64 = 64;
/// interrupt-time: at least this many waits in interrupt handlers (`irq` and `softirq`) …
pub(super) const INTERRUPT_MIN_WAITS: u64 = 10;
/// … making at least this share of all the wait …
pub(super) const INTERRUPT_MIN_SHARE: f64 = 0.1;
/// … and at least this share of the recording's duration (100 µs a second) …
pub(super) const INTERRUPT_MIN_WAIT_SHARE: f64 = 0.0001;
/// … and at least this much wait in all (1 ms): a few stray handler waits in a short, quiet
/// recording are no pattern.
pub(super) const INTERRUPT_MIN_WAIT_NS: u64 = 1_000_000;
/// host-steal: the host took at least this share of the CPUs' time over the recording …
pub(super) const STEAL_MIN_SHARE: f64 = 0.05;
/// … while the recording holds at least this many lock waits (else no wait was the host's).
pub(super) const STEAL_MIN_WAITS: u64 = 100;

/// The diagnosis of `report`, the report of `rec` (every figure but this one filled in).
pub(crate) fn diagnosis(rec: &Recording, report: &Report) -> Diagnosis {
    let mut d = Diagnosis::default();
    let stacks = Stacks::new(rec);
    d.findings.extend(rules::shared_table(report, &stacks));
    if report.fd_activity_recorded {
        d.findings.extend(rules::long_scans(report, &stacks));
        d.findings.extend(rules::table_growth(report, &stacks));
    } else {
        for rule in [Rule::LongScans, Rule::TableGrowth] {
            d.not_checked.push(NotChecked {
                rule,
                why: "recorded with --lock-only: no scan or table figures".into(),
            });
        }
    }
    d.findings.extend(rules::interrupt_time(report, &stacks));
    d.findings.extend(rules::host_steal(report));
    match loops::close_loops(rec, report) {
        Ok(finding) => d.findings.extend(finding),
        Err(why) => d.not_checked.push(NotChecked {
            rule: Rule::CloseLoops,
            why,
        }),
    }
    d.findings.sort_by_key(|f| f.rule);
    d
}

/// The stacks findings may point at: every contention stack group by total wait, and the
/// on-CPU stacks by samples.
struct Stacks {
    contention: Vec<fdprof_figures::TopStack>,
    cpu: Vec<fdprof_figures::CpuStack>,
}

impl Stacks {
    fn new(rec: &Recording) -> Self {
        let all = ReportOptions {
            top: 0,
            sort: SortKey::Wait,
            offsets: false,
        };
        Stacks {
            contention: top_stacks(rec, &all).0,
            // All of them, not the report's first `--top`: a pattern's stacks may rank low.
            cpu: cpu(rec, &all).map(|c| c.top_stacks).unwrap_or_default(),
        }
    }

    /// The heaviest stacks of `operation` (`None`: any) on the target's `file_lock`, then its
    /// on-CPU stacks, at most [`DIAGNOSIS_STACKS`].
    fn of(&self, operation: Option<Operation>, cpu_first: bool) -> Vec<FindingStack> {
        let wanted = |op: Operation| operation.is_none_or(|o| o == op);
        let contention = self
            .contention
            .iter()
            .filter(|s| s.lock.kind == fdprof_figures::LockKind::FileLock && wanted(s.operation))
            .map(contention_stack);
        let cpu = self
            .cpu
            .iter()
            .filter(|s| operation.is_some() && wanted(s.operation))
            .map(|s| FindingStack {
                source: StackSource::Cpu,
                operation: s.operation,
                weight: s.samples.samples,
                kernel_stack: s.kernel_stack.clone(),
                user_stack: s.user_stack.clone(),
            });
        let all: Vec<FindingStack> = if cpu_first {
            cpu.chain(contention).collect()
        } else {
            contention.chain(cpu).collect()
        };
        all.into_iter().take(DIAGNOSIS_STACKS).collect()
    }
}

impl Stacks {
    /// The stack groups of waits in interrupt handlers, on any lock, heaviest first, but those
    /// with one of fdprof's programs on the stack: fdprof's own doing (its ring buffer's wake-up
    /// is an irq_work interrupt), counted apart as `contention.fdprof_on_stack`.
    fn interrupts(&self) -> impl Iterator<Item = &fdprof_figures::TopStack> {
        self.contention.iter().filter(|s| {
            s.operation.is_interrupt()
                && !crate::model::own::on_stack(s.kernel_stack.iter().map(|f| f.function.as_str()))
        })
    }

    fn of_interrupts(&self) -> Vec<FindingStack> {
        self.interrupts()
            .take(DIAGNOSIS_STACKS)
            .map(contention_stack)
            .collect()
    }
}

fn contention_stack(s: &fdprof_figures::TopStack) -> FindingStack {
    FindingStack {
        source: StackSource::Contention,
        operation: s.operation,
        weight: s.total_wait_ns,
        kernel_stack: s.kernel_stack.clone(),
        user_stack: s.user_stack.clone(),
    }
}

/// `figure` against its threshold; `None` when it does not hold (the rule stays silent).
fn check(figure: &str, value: f64, comparison: Comparison, threshold: f64) -> Option<Evidence> {
    comparison.holds(value, threshold).then(|| Evidence {
        figure: figure.into(),
        value,
        comparison,
        threshold,
    })
}

fn figure(name: &str, value: f64) -> Figure {
    Figure {
        name: name.into(),
        value,
    }
}

/// A duration for a sentence: `12.3 ms`, `850 µs`, `1.20 s`.
fn span(ns: u64) -> String {
    let ns = ns as f64;
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.1} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.0} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// A share for a sentence: `38%`.
fn pct(share: f64) -> String {
    format!("{:.0}%", share * 100.0)
}

/// The functions of a stack, for tests and text: innermost first.
#[cfg(test)]
fn functions(frames: &[fdprof_figures::Frame]) -> Vec<&str> {
    frames.iter().map(|f| f.function.as_str()).collect()
}

#[cfg(test)]
mod tests;
