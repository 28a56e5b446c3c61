//! The io_uring remedy on the real kernel: `opensock --io-uring-direct` creates and closes its
//! sockets as direct descriptors, so a recording sees no fd syscall, no allocation and no
//! `file_lock` wait, exactly as the generator's `expected` says, where plain opensock with
//! the same threads waits on `file_lock` in alloc and close.

use crate::common::remedy::{check_counts, recorded};
use crate::common::*;
use serde_json::Value;

/// The recording's `file_lock` waits, from its contention sites.
fn file_lock_waits(rec: &Value) -> u64 {
    rec["contention"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["lock"] == "file_lock")
        .map(|s| s["count"].as_u64().unwrap())
        .sum()
}

/// One thread, K ops: the generator says zero fd-table allocations and K sockets created and
/// closed in fixed slots; the recording agrees exactly.
#[test]
fn io_uring_direct_sockets_never_enter_the_table() {
    require_root();
    let _guard = kernel_lock();
    let ops = 3000u64;
    let (result, rec, r) = recorded(
        &[
            "opensock",
            "--io-uring-direct",
            "--ops",
            "3000",
            "-n",
            "200",
        ],
        &[],
        "uring.data",
    );
    assert_eq!(result["variant"], "io-uring-direct");
    let expected = &result["expected"];
    assert_eq!(expected["allocs"], serde_json::json!([]), "{expected}");
    assert_eq!(expected["syscalls"], serde_json::json!({}));
    assert_eq!(expected["direct_files"]["created"], ops);
    assert_eq!(expected["direct_files"]["closed"], ops);
    check_counts(expected, &rec);
    assert_eq!(rec["scan"]["allocations"], 0);
    assert_eq!(rec["table"]["expansions"], 0);
    assert_eq!(file_lock_waits(&rec), 0);
    assert_eq!(r["diagnosis"]["findings"], serde_json::json!([]));
    assert_no_programs_left();
}

/// Two threads: plain opensock's sockets take file_lock in alloc_fd and close and wait on it
/// (a few tries at most: the scheduler decides how often they collide); with
/// --io-uring-direct the same load records no file_lock wait and no allocation.
#[test]
fn io_uring_direct_removes_the_file_lock_waits() {
    require_root();
    let _guard = kernel_lock();
    let two = ["opensock", "-t", "2", "-n", "4000", "-d", "2s"];
    let mut contended = false;
    for _ in 0..3 {
        let (_, rec, _) = recorded(&two, &[], "plain2.data");
        if file_lock_waits(&rec) > 0 {
            contended = true;
            break;
        }
    }
    assert!(
        contended,
        "plain opensock -t 2 never waited on file_lock in 3 runs"
    );

    let mut direct = two.to_vec();
    direct.push("--io-uring-direct");
    let (result, rec, r) = recorded(&direct, &[], "uring2.data");
    assert!(result["ops"].as_u64().unwrap() > 0);
    assert_eq!(file_lock_waits(&rec), 0, "{}", rec["contention"]);
    assert_eq!(rec["scan"]["allocations"], 0);
    let fd_calls: u64 = rec["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(fd_calls, 0, "{}", rec["syscalls"]);
    assert!(
        !r["diagnosis"]["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["rule"] == "shared-table")
    );
    assert_no_programs_left();
}
