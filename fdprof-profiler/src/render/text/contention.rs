//! Contention by lock and operation, the per-lock totals and how the stacks were taken.

use crate::analysis::{LockOperation, Report};
use crate::render::human::{self, duration, duration_f, percent};
use crate::render::layout::{columns, section};
use fdprof_figures::WaitSource;

pub(super) fn contention(out: &mut Vec<String>, r: &Report) {
    section(out, "contention by lock and operation");
    let c = &r.contention;
    if let Some(limit) = c.source.limit() {
        out.push(format!("  {limit}"));
        if c.source == WaitSource::Unavailable {
            return;
        }
    }
    if c.by_lock_operation.is_empty() {
        out.push("  no lock waits recorded".into());
        return;
    }
    let body: Vec<Vec<String>> = c.by_lock_operation.iter().map(row).collect();
    out.extend(columns(
        &[
            "lock",
            "operation",
            "count",
            "total wait",
            "avg",
            "p50",
            "p99",
            "max",
            "of lock",
            "of all",
        ],
        2,
        &body,
        2,
    ));
    out.push("  (p50/p99: upper bound of the log2 bucket; max: exact)".into());
    let mut totals = format!(
        "  all locks: {} in {} waits",
        duration(c.total_wait_ns),
        c.count
    );
    for lock in &c.by_lock {
        totals.push_str(&format!(
            "; {} {} ({})",
            lock.lock,
            duration(lock.total_wait_ns),
            percent(lock.share_of_all)
        ));
    }
    out.push(totals);
    notes(out, r);
}

/// What the waits include or leave out: interrupts, fdprof's own programs, how stacks were taken.
fn notes(out: &mut Vec<String>, r: &Report) {
    let c = &r.contention;
    for (what, w) in [("irq", &c.irq), ("softirq", &c.softirq)] {
        if w.count > 0 {
            out.push(format!(
                "  in {what}: {} in {} waits ({} of all): an interrupt's waits, not the fd \
                 operation of the task it landed on",
                duration(w.total_wait_ns),
                w.count,
                percent(w.share_of_all)
            ));
        }
    }
    if c.fdprof_on_stack.count > 0 {
        let w = &c.fdprof_on_stack;
        out.push(format!(
            "  fdprof on the stack: {} in {} waits ({} of all) had one of fdprof's own programs \
             beneath them",
            duration(w.total_wait_ns),
            w.count,
            percent(w.share_of_all)
        ));
    }
    let w = &r.stack_walks;
    // Recordings made before stacks were reused have no figure.
    if w.walked > 0 || w.reused > 0 {
        out.push(format!(
            "  stacks: walked at {} contentions, reused from the same site (thread, syscall, \
             user return point, lock) at {}, re-walked every {}th",
            w.walked, w.reused, w.refresh_every
        ));
    }
    let u = &w.user;
    if u.copies > 0 {
        let truncated: u64 = u.truncated.values().sum();
        let why: Vec<String> = u
            .truncated
            .iter()
            .map(|(end, n)| format!("{n} {}", end.name()))
            .collect();
        out.push(format!(
            "  user stacks: {} copies unwound from call-frame information (.eh_frame, frame \
             pointers where kept): {} whole to the thread's start, {truncated} truncated{}",
            u.copies,
            u.whole,
            match why.is_empty() {
                true => String::new(),
                false => format!(" ({})", why.join(", ")),
            }
        ));
    }
    if let Some(ns) = c.probe_ns_per_wait {
        out.push(format!(
            "  probe time: each wait includes at most ~{} of fdprof's own (the lock probes' mean \
             run time, stack walks left out as they are from the wait: contention_begin reads the \
             clock first, contention_end once it has the wait)",
            duration(ns.round() as u64)
        ));
    }
}

fn row(r: &LockOperation) -> Vec<String> {
    vec![
        r.lock.to_string(),
        r.operation.to_string(),
        r.count.to_string(),
        duration(r.total_wait_ns),
        r.avg_wait_ns.map_or("-".into(), duration_f),
        human::opt(r.p50_wait_ns, duration),
        human::opt(r.p99_wait_ns, duration),
        duration(r.max_wait_ns),
        percent(r.share_of_lock),
        percent(r.share_of_all),
    ]
}
