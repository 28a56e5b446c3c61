//! Scenarios recorded from their measured phase, in a clean fd table, and read back through
//! `report --json`: what the diagnosis and remedy tests share.

use std::os::unix::process::CommandExt;
use std::process::Command;

use serde_json::Value;

use super::*;

/// `fdprof` for a workload in a table with only stdio open, so that its fd numbers (and
/// close-loop's consecutive fds) do not depend on what the test harness has open.
pub fn clean_fdprof() -> Command {
    let mut cmd = fdprof();
    // SAFETY: the closure only makes one async-signal-safe system call.
    unsafe {
        cmd.pre_exec(|| {
            let r = libc::syscall(
                libc::SYS_close_range,
                3 as libc::c_long,
                libc::c_long::from(u32::MAX),
                0 as libc::c_long,
            );
            if r != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd
}

/// `report --json` of a recording.
pub fn report(path: &std::path::Path) -> Value {
    let out = run(fdprof().args(["report", "--json"]).arg(path));
    assert!(out.status.success(), "report failed: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A deterministic scenario in a clean table, recorded with `record -p [OPTIONS]` from its
/// measured phase: (the generator's result, the recording, its report).
pub fn recorded(scenario: &[&str], options: &[&str], name: &str) -> (Value, Value, Value) {
    let out = tmp(name);
    let w = start_workload_with(clean_fdprof(), scenario);
    let pid = w.pid.to_string();
    let mut args = vec!["-p", &pid, "-o", out.to_str().unwrap()];
    args.extend(options);
    let mut rec = start_record(&args);
    w.go();
    let result = w.finish();
    assert!(rec.wait().unwrap().success(), "record failed");
    let recording = read_json(&out);
    assert_eq!(recording["end_reason"], "target_exited");
    (result, recording, report(&out))
}

/// Every count of `expected` is the recording's, and nothing else was traced.
pub fn check_counts(expected: &Value, rec: &Value) {
    let mut total = 0;
    for (field, rec_field) in [
        ("syscalls", "calls"),
        ("fds_created", "fds_created"),
        ("fds_closed", "fds_closed"),
    ] {
        for (name, n) in expected[field].as_object().unwrap() {
            let got = syscall(rec, name).map_or(0, |s| s[rec_field].as_u64().unwrap());
            assert_eq!(got, n.as_u64().unwrap(), "{field} of {name}");
            if field == "syscalls" {
                total += got;
            }
        }
    }
    let calls: u64 = rec["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(calls, total, "total traced fd syscalls");
    let allocs: u64 = expected["allocs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["count"].as_u64().unwrap())
        .sum();
    assert_eq!(rec["scan"]["allocations"].as_u64().unwrap(), allocs);
}
