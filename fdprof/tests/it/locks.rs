//! Every contended lock is named, on the real kernel: the scheduler's locks that
//! `clock_gettime` on other threads' CPU clocks contends (`fdprof workload cputime`), not
//! "spinlock other"; and the vDSO frame those calls leave on the user stack is symbolized.

use crate::common::*;
use serde_json::Value;

fn function_names(stack: &Value) -> Vec<&str> {
    stack
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect()
}

/// The function that took the lock: the first frame below the spinlock primitives.
fn taker<'a>(kernel: &[&'a str]) -> Option<&'a str> {
    const PRIMITIVES: [&str; 4] = ["_raw_", "__pv_queued", "native_queued", "queued_"];
    kernel
        .iter()
        .copied()
        .find(|f| !PRIMITIVES.iter().any(|p| f.starts_with(p)))
}

/// `fdprof record -o out -- fdprof workload ARGS`, then its `report --json --top TOP`.
fn record_and_report(out: &std::path::Path, workload: &[&str], top: &str) -> Value {
    let rec = run(fdprof()
        .args(["record", "-o", out.to_str().unwrap(), "--"])
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .arg("workload")
        .args(workload));
    assert!(rec.status.success(), "{rec:?}");
    let report = run(fdprof().args(["report", "--json", "--top", top]).arg(out));
    assert!(report.status.success());
    serde_json::from_slice(&report.stdout).unwrap()
}

/// The report of `cputime -t 3` (more threads than CPUs: each read of a running peer's clock
/// takes its runqueue's lock), recorded until a lock taken by `task_rq_lock` was waited for
/// through `task_sched_runtime` with the waiter's user stack (the scheduler decides how often
/// they collide: a few tries at most).
fn cputime_report() -> Value {
    let out = tmp("cputime.data");
    for _ in 0..6 {
        let report = record_and_report(&out, &["cputime", "-t", "3", "-d", "2s"], "100");
        let through_clock = report["top_stacks"].as_array().unwrap().iter().any(|s| {
            let kernel = function_names(&s["kernel_stack"]);
            kernel.contains(&"task_sched_runtime")
                && taker(&kernel) == Some("task_rq_lock")
                && s["user_stack"].as_array().is_some_and(|u| !u.is_empty())
        });
        if through_clock {
            return report;
        }
    }
    panic!("cputime -t 3 never waited for a lock task_rq_lock takes, from user space, in 6 runs");
}

#[test]
fn runqueue_waits_are_named_and_their_vdso_frame_too() {
    require_root();
    let _guard = kernel_lock();
    let report = cputime_report();
    let stacks = report["top_stacks"].as_array().unwrap();
    let mut vdso = 0;
    for s in stacks {
        let kernel = function_names(&s["kernel_stack"]);
        // Waits for the locks task_rq_lock takes (an interrupt's waits on that path are for
        // other locks, named after their own takers).
        if taker(&kernel) != Some("task_rq_lock") {
            continue;
        }
        // Named after the runqueue helper, or the caller below the lock functions.
        let lock = s["lock"].as_str().unwrap();
        assert!(
            ["task_rq_lock", "rq_lock"].contains(&lock),
            "a wait for a lock task_rq_lock takes named {lock:?}: {s}"
        );
        assert_eq!(s["lock_kind"], "spinlock");
        assert!(["caller", "kind"].contains(&s["lock_named_by"].as_str().unwrap()));
        assert_eq!(s["operation"], "other");
        // glibc's clock_gettime calls into the vDSO, which makes the syscall for CPU clocks.
        let user = s["user_stack"].as_array().unwrap();
        if let Some(top) = user.first() {
            assert_eq!(top["module"], "[vdso]", "{s}");
            assert!(
                top["function"].as_str().unwrap().contains("clock_gettime"),
                "{s}"
            );
            vdso += 1;
        }
    }
    assert!(vdso > 0, "no user stack through the vDSO: {report}");
    // The table rows carry the names too.
    let rows = report["contention"]["by_lock_operation"]
        .as_array()
        .unwrap();
    assert!(
        rows.iter()
            .any(|r| r["lock"] == "task_rq_lock" || r["lock"] == "rq_lock")
    );
    let anonymous: u64 = rows
        .iter()
        .filter(|r| r["lock_named_by"] == "flags")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    let all = report["contention"]["count"].as_u64().unwrap();
    assert!(
        anonymous * 10 <= all,
        "{anonymous} of {all} waits named only by their kind"
    );
    assert_no_programs_left();
}

/// The waits in `__schedule` are for the lock of the runqueue the waiting task runs on, though
/// `__schedule` locks it with a tail call (no helper frame names it): the programs tell it by
/// its address (`current->se.cfs_rq->rq->__lock`), so it is `rq_lock`, never `__schedule`.
#[test]
fn the_running_runqueue_lock_is_named_by_its_address() {
    require_root();
    let _guard = kernel_lock();
    let out = tmp("schedule.data");
    for _ in 0..6 {
        let workload = ["opensock", "-t", "3", "-n", "2000", "-d", "2s"];
        let report = record_and_report(&out, &workload, "200");
        let in_schedule: Vec<&Value> = report["top_stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| taker(&function_names(&s["kernel_stack"])) == Some("__schedule"))
            .collect();
        for s in &in_schedule {
            assert_eq!(s["lock"], "rq_lock", "{s}");
            assert_eq!(s["lock_named_by"], "kind", "{s}");
        }
        let rows = report["contention"]["by_lock_operation"]
            .as_array()
            .unwrap();
        assert!(
            rows.iter().all(|r| r["lock"] != "__schedule"),
            "a row named __schedule: {rows:?}"
        );
        if !in_schedule.is_empty() {
            assert_no_programs_left();
            return;
        }
    }
    panic!("opensock -t 3 never waited for a lock in __schedule in 6 runs");
}
