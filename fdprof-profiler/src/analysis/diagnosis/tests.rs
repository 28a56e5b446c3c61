use fdprof_common::syscalls::FD_SYSCALLS;
use fdprof_common::trace::op;
use fdprof_figures::{Rule, StackSource};
use fdprof_recording::hist::Log2Hist;
use fdprof_recording::trace::codec::Row;

use super::loops::{Runs, closes, runs};
use crate::analysis::{ReportOptions, report};

fn rules(rec: &fdprof_recording::Recording) -> Vec<Rule> {
    report(rec, &ReportOptions::default())
        .diagnosis
        .findings
        .iter()
        .map(|f| f.rule)
        .collect()
}

/// The test recording: 991 `file_lock` waits of 10 ms in all in 10 s
/// and 4 expansions; its one long scan is not a pattern.
#[test]
fn the_test_recording_shows_sharing_and_growth() {
    let rec = crate::testdata::recording();
    let r = report(&rec, &ReportOptions::default());
    let d = &r.diagnosis;
    assert_eq!(
        d.findings.iter().map(|f| f.rule).collect::<Vec<_>>(),
        [Rule::SharedTable, Rule::TableGrowth]
    );
    let shared = &d.findings[0];
    assert!(
        shared
            .summary
            .starts_with("file_lock wait is 60% alloc and 40% close across the threads"),
        "{}",
        shared.summary
    );
    assert_eq!(shared.remedy.wait_ns, Some(10_000_000));
    assert_eq!(
        shared.stacks.len(),
        2,
        "the two alloc sites differ only in an offset"
    );
    assert!(
        shared
            .stacks
            .iter()
            .all(|s| s.source == StackSource::Contention)
    );
    // The heaviest first: 591 waits in alloc (6 ms), then 400 in close (4 ms).
    assert_eq!(shared.stacks[0].operation, fdprof_figures::Operation::Alloc);
    assert_eq!(shared.stacks[0].weight, 6_000_000);
    assert!(super::functions(&shared.stacks[0].user_stack).contains(&"__socket"));
    assert_eq!(shared.stacks[1].operation, fdprof_figures::Operation::Close);
    assert_eq!(d.findings[1].remedy.table_copies, Some(4));
    assert_eq!(d.not_checked.len(), 1);
    assert_eq!(d.not_checked[0].rule, Rule::CloseLoops);
}

#[test]
fn each_threshold_silences_its_rule() {
    let mut rec = crate::testdata::recording();
    // 10 ms of file_lock wait is under 100 µs a second of 110 s.
    rec.duration_ns = 110_000_000_000;
    rec.table.expansions = 0;
    assert_eq!(rules(&rec), []);
    let mut rec = crate::testdata::recording();
    // 99 waits: one too few, whatever they add up to.
    for site in &mut rec.contention {
        site.count = 33;
    }
    assert!(!rules(&rec).contains(&Rule::SharedTable));
}

fn hist(values: &[(u64, u64)]) -> Log2Hist {
    let mut h = Log2Hist::default();
    for &(v, n) in values {
        for _ in 0..n {
            h.record(v);
        }
    }
    h
}

/// The holes pattern: one allocation in two at next_fd, the other 995 bits past it.
#[test]
fn holes_scans_are_long_scans() {
    let mut rec = crate::testdata::recording();
    rec.scan.allocations = 1000;
    rec.scan.next_fd_hits = 500;
    rec.scan.bits = hist(&[(0, 500), (995, 500)]);
    rec.scan.open_fds_words = hist(&[(1, 500), (16, 500)]);
    let r = report(&rec, &ReportOptions::default());
    let f = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.rule == Rule::LongScans)
        .expect("long scans");
    // 995 bits is in the bucket 512..=1023: at least 512 bits, 8 words, each.
    assert_eq!(f.remedy.scan_words, Some(500 * 8));
    assert!(
        f.summary.contains("500 of 1000 allocations"),
        "{}",
        f.summary
    );
    assert!(f.summary.contains("hit 50%"), "{}", f.summary);
    // Just under the far share: silent.
    rec.scan.bits = hist(&[(0, 500), (63, 400), (64, 99)]);
    rec.scan.allocations = 999;
    assert!(!rules(&rec).contains(&Rule::LongScans));
}

/// With on-CPU samples, a long-scans finding's stacks are the allocator's samples first, even
/// where the report shows fewer stacks than there are; then its file_lock waits in alloc.
#[test]
fn long_scans_carry_the_allocators_cpu_stacks() {
    let mut rec = crate::testdata::cpu_recording();
    rec.scan.allocations = 1000;
    rec.scan.next_fd_hits = 500;
    rec.scan.bits = hist(&[(0, 500), (995, 500)]);
    let opts = ReportOptions {
        top: 1,
        ..ReportOptions::default()
    };
    let r = report(&rec, &opts);
    let f = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.rule == Rule::LongScans)
        .unwrap();
    assert_eq!(f.stacks.len(), 2, "{:?}", f.stacks);
    assert_eq!(f.stacks[0].source, StackSource::Cpu);
    assert_eq!(f.stacks[0].weight, 7);
    assert_eq!(super::functions(&f.stacks[0].kernel_stack), ["alloc_fd"]);
    assert_eq!(f.stacks[1].source, StackSource::Contention);
    assert_eq!(f.stacks[1].operation, fdprof_figures::Operation::Alloc);
}

fn close(tid: u32, fd: i32, at: u64) -> Row {
    let close = FD_SYSCALLS.iter().position(|s| s.name == "close").unwrap() as u8;
    Row {
        exit_ns: at,
        enter_ns: at,
        tid,
        op: op::RELEASE,
        syscall: close,
        fd,
        ..Default::default()
    }
}

#[test]
fn runs_of_consecutive_closes_per_thread() {
    // Thread 1 closes 10..=29 upwards, thread 2 40 down to 31 meanwhile, interleaved; thread 3
    // closes fd 5 again and again (socket/close): no run.
    let mut rows = Vec::new();
    for i in 0..20u64 {
        rows.push(close(1, 10 + i as i32, 10 * i));
        if i < 10 {
            rows.push(close(2, 40 - i as i32, 10 * i + 1));
        }
        rows.push(close(3, 5, 10 * i + 2));
    }
    // A run too short to count, then one broken by a change of direction.
    for (k, fd) in [100, 101, 102, 200, 201, 202, 203, 202, 201]
        .iter()
        .enumerate()
    {
        rows.push(close(4, *fd, 1000 + k as u64));
    }
    assert_eq!(
        runs(closes(rows.iter().map(|r| Ok(*r))).unwrap()),
        Runs {
            runs: 2,
            fds: 30,
            longest: 20,
            closes: 59,
        }
    );
}

/// A timer's softirq waiting on a scheduler lock while the task beneath it was in `alloc_fd`
/// (the stack of issue 17), 40 times for 4 ms: a third of all the wait is the interrupt's.
#[test]
fn interrupt_time_fires_on_waits_in_interrupt_handlers() {
    use crate::testdata::{frame, site};
    let mut rec = crate::testdata::recording();
    let kernel: Vec<_> = [
        "__pv_queued_spin_lock_slowpath",
        "_raw_spin_lock",
        "try_to_wake_up",
        "call_timer_fn",
        "handle_softirqs",
        "__irq_exit_rcu",
        "sysvec_apic_timer_interrupt",
        "asm_sysvec_apic_timer_interrupt",
        "alloc_fd",
        "__x64_sys_socket",
    ]
    .iter()
    .map(|f| frame(f, 0, None))
    .collect();
    let below = rules(&rec);
    assert!(!below.contains(&Rule::InterruptTime));
    rec.contention.push(site(
        "spinlock",
        "softirq",
        kernel,
        vec![],
        &[(100_000, 40)],
    ));
    let r = report(&rec, &ReportOptions::default());
    let f = r
        .diagnosis
        .findings
        .iter()
        .find(|f| f.rule == Rule::InterruptTime)
        .expect("interrupt-time fires");
    assert_eq!(f.remedy.wait_ns, Some(4_000_000));
    assert_eq!(f.stacks.len(), 1);
    assert_eq!(f.stacks[0].operation, fdprof_figures::Operation::Softirq);
    // Nine waits are too few to be a pattern, whatever their share.
    rec.contention.last_mut().unwrap().count = 9;
    assert!(!rules(&rec).contains(&Rule::InterruptTime));
    // fdprof's own wake-up interrupt (its ring buffer's irq_work) is fdprof's doing, not an
    // interrupt's that landed on the program.
    let site = rec.contention.last_mut().unwrap();
    site.count = 40;
    site.operation = crate::testdata::operation("irq");
    site.kernel_stack.insert(
        4,
        frame("bpf_prog_6337228e2445929d_fdprof_sys_exit", 0, Some("bpf")),
    );
    assert!(!rules(&rec).contains(&Rule::InterruptTime));
}

#[test]
fn host_steal_fires_on_steal_beside_waits_and_not_without_them() {
    use fdprof_recording::recording::StealTime;
    let mut rec = crate::testdata::recording();
    let steal = |steal_ns| StealTime {
        steal_ns,
        total_ns: 20_000_000_000,
        cpus: 2,
        max_cpu_steal_ns: steal_ns,
        max_cpu_total_ns: 10_000_000_000,
    };
    rec.steal = Some(steal(200_000_000)); // 1%: a VM's usual
    assert!(!rules(&rec).contains(&Rule::HostSteal));
    rec.steal = Some(steal(2_000_000_000)); // 10%
    assert!(rules(&rec).contains(&Rule::HostSteal));
    rec.contention.clear();
    assert!(!rules(&rec).contains(&Rule::HostSteal), "no wait to blame");
}
