//! The report of recordings added together ([`crate::model::merge::add`]) counts what the
//! reports of the parts count, added.

use std::collections::BTreeMap;

use fdprof_recording::recording::FunctionStats;

use super::*;
use crate::model::merge::{add, bound_sites};
use crate::testdata::{self, hist};

/// Every additive figure of a report, by name.
fn counts(r: &Report) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let mut put = |name: String, n: u64| {
        *out.entry(name).or_insert(0) += n;
    };
    let c = &r.contention;
    put("waits".into(), c.count);
    put("wait ns".into(), c.total_wait_ns);
    put("file_lock waits".into(), c.file_lock_count);
    put("file_lock wait ns".into(), c.file_lock_wait_ns);
    for l in &c.by_lock {
        put(format!("{} waits", l.lock.name()), l.count);
        put(format!("{} wait ns", l.lock.name()), l.total_wait_ns);
    }
    for row in &c.by_lock_operation {
        let key = format!("{}/{}", row.lock.name(), row.operation.name());
        put(format!("{key} waits"), row.count);
        put(format!("{key} wait ns"), row.total_wait_ns);
        put(format!("{key} histogram"), row.wait.count);
    }
    for s in &r.top_stacks {
        put("top stack waits".into(), s.count);
    }
    put("stacks walked".into(), r.stack_walks.walked);
    put("stacks reused".into(), r.stack_walks.reused);
    for f in &r.functions {
        let op = f.operation.name();
        put(format!("{op} calls"), f.calls);
        put(format!("{op} unpaired"), f.unpaired);
        put(format!("{op} durations"), f.duration.count);
        put(format!("{op} slow-path wait ns"), f.slowpath_wait.sum);
    }
    for s in &r.syscalls {
        put(format!("{} calls", s.name), s.calls);
        put(format!("{} errors", s.name), s.errors);
        put(format!("{} fds created", s.name), s.fds_created);
        put(format!("{} fds closed", s.name), s.fds_closed);
        put(format!("{} allocs", s.name), s.allocs);
        put(format!("{} latencies", s.name), s.latency.histogram.count);
    }
    put("allocations".into(), r.scan.allocations);
    put("next_fd hits".into(), r.scan.next_fd_hits);
    put("below origin".into(), r.scan.below_origin);
    put("scans".into(), r.scan.bits.count);
    put("expansions".into(), r.table.expansions);
    put("drops".into(), r.drops.total);
    for d in &r.drops.counters {
        put(format!("drop {}/{}", d.probe, d.reason), d.count);
    }
    let o = &r.own_cost;
    put("program run ns".into(), o.run_time_ns);
    put("program runs".into(), o.run_count);
    put("recursion misses".into(), o.recursion_misses);
    put("collector ns".into(), o.collector_cpu_ns);
    out
}

fn added(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = a.clone();
    for (k, n) in b {
        *out.entry(k.clone()).or_insert(0) += n;
    }
    out
}

/// The fixtures with direct-probe figures as well.
fn recordings() -> (Recording, Recording) {
    let f = |name, calls, unpaired| FunctionStats {
        operation: testdata::operation(name),
        calls,
        unpaired,
        duration: hist(&[(700, calls)]),
        slowpath_wait: hist(&[(300, 2)]),
        ..Default::default()
    };
    let mut a = testdata::recording();
    a.functions = vec![f("alloc", 591, 1)];
    let mut b = testdata::command_recording();
    b.functions = vec![f("alloc", 191, 0), f("close", 100, 3)];
    (a, b)
}

#[test]
fn the_report_of_a_sum_counts_the_sum_of_the_reports() {
    let opts = ReportOptions {
        top: 0,
        ..Default::default()
    };
    let (a, b) = recordings();
    let (ra, rb) = (report(&a, &opts), report(&b, &opts));
    let mut sum = a.clone();
    add(&mut sum, &b);
    let rs = report(&sum, &opts);
    assert_eq!(counts(&rs), added(&counts(&ra), &counts(&rb)));
    assert_eq!(rs.contention.count, 1_001 + 391, "the fixtures' waits");
    let max = |r: &Report| r.contention.by_lock.iter().map(|l| l.max_wait_ns).max();
    assert_eq!(max(&rs), max(&ra).max(max(&rb)));
    // The fixtures share no stack: every group of both is shown.
    assert_eq!(rs.stacks_total, ra.stacks_total + rb.stacks_total);

    // A recording added to itself: every count doubles, no stack group is new.
    let mut twice = a.clone();
    add(&mut twice, &a);
    let rt = report(&twice, &opts);
    assert_eq!(counts(&rt), added(&counts(&ra), &counts(&ra)));
    assert_eq!(rt.stacks_total, ra.stacks_total);
    assert_eq!(
        rt.contention.by_lock_operation[0].sites, 2,
        "two alloc sites"
    );
}

#[test]
fn a_bounded_sum_counts_everything_and_shows_what_it_dropped() {
    let opts = ReportOptions::default();
    let (a, b) = recordings();
    let mut sum = a.clone();
    add(&mut sum, &b);
    let whole = counts(&report(&sum, &opts));
    assert_eq!(bound_sites(&mut sum, 2), 6);
    let r = report(&sum, &opts);
    let mut bounded = counts(&r);
    // Only the drop counters differ: every wait is still counted, without its stacks.
    let dropped = bounded.remove("drop daemon/stack_bound").unwrap();
    assert_eq!(bounded.remove("drops"), Some(whole["drops"] + dropped));
    let mut expected = whole.clone();
    expected.remove("drops");
    assert_eq!(bounded, expected);
    // Kept: the mutex (5 ms) and the first close (4 ms); the other six sites are folded.
    assert_eq!(
        dropped,
        300 + 291 + 10 + 90 + 101 + 100,
        "the waits of the folded sites"
    );
    let line = r
        .drops
        .counters
        .iter()
        .find(|d| d.probe == "daemon")
        .unwrap();
    assert_eq!((line.reason.as_str(), line.count), ("stack_bound", dropped));
}
