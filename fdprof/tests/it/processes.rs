//! Per-process figures of a system-wide recording (`record -a`) on the real kernel, against the
//! ground truth of two workload processes running side by side.

use crate::common::*;
use serde_json::Value;

/// The `report --json` of `out` with `extra` options.
fn report(out: &std::path::Path, extra: &[&str]) -> Value {
    let o = run(fdprof().arg("report").arg(out).arg("--json").args(extra));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn calls(rows: &Value, name: &str) -> u64 {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .map_or(0, |s| s["calls"].as_u64().unwrap())
}

#[test]
fn each_process_gets_exactly_its_own_syscalls() {
    require_root();
    let _kernel = kernel_lock();
    let out = tmp("processes-all.data");
    let ops = [1500u64, 2600];
    let workloads: Vec<Waiting> = ops
        .iter()
        .map(|k| start_workload(&["socket-close", "-t", "1", "--ops", &k.to_string()]))
        .collect();
    let pids: Vec<u32> = workloads.iter().map(|w| w.pid).collect();
    let rec = start_record(&["-a", "-o", out.to_str().unwrap()]);
    for w in &workloads {
        w.go();
    }
    let expected: Vec<Value> = workloads
        .into_iter()
        .map(|w| w.finish()["expected"].clone())
        .collect();
    // Both have exited (short-lived processes are kept); now stop the recording.
    // SAFETY: the recorder is our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let mut rec = rec;
    assert!(rec.wait().unwrap().success());

    let r = report(&out, &[]);
    let processes = r["processes"].as_array().expect("processes in -a reports");
    // fdprof itself (it reads /proc and its maps all along) is not among them.
    assert!(
        processes.iter().all(|p| p["pid"] != rec.id()),
        "the recorder profiled itself"
    );
    for ((pid, k), expected) in pids.iter().zip(ops).zip(&expected) {
        let rows: Vec<&Value> = processes.iter().filter(|p| p["pid"] == *pid).collect();
        assert_eq!(rows.len(), 1, "pid {pid} once");
        let p = rows[0];
        assert_eq!(p["comm"], "fdprof", "pid {pid}");
        assert_eq!(calls(&p["syscalls"], "socket"), k, "pid {pid} sockets");
        assert_eq!(calls(&p["syscalls"], "close"), k, "pid {pid} closes");
        // Nothing else: the measured phase did only what the generator says.
        for (name, n) in expected["syscalls"].as_object().unwrap() {
            assert_eq!(calls(&p["syscalls"], name), n.as_u64().unwrap(), "{name}");
        }
        let total: u64 = expected["syscalls"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(p["fd_syscalls"].as_u64().unwrap(), total, "pid {pid}");
        // The same rows as the whole-machine section.
        let row = &p["syscalls"][0];
        for field in [
            "name",
            "calls",
            "errors",
            "fds_created",
            "fds_closed",
            "allocs",
        ] {
            assert!(row.get(field).is_some(), "{field}");
        }
        // Its allocator's scans and its table, exactly the generator's.
        let allocs = expected["allocs"].as_array().unwrap();
        let count = |hits_only: bool| -> u64 {
            allocs
                .iter()
                .filter(|a| !hits_only || a["scan_bits"] == 0)
                .map(|a| a["count"].as_u64().unwrap())
                .sum()
        };
        let scan = &p["scan"];
        assert_eq!(scan["allocations"].as_u64(), Some(count(false)), "{scan}");
        assert_eq!(scan["next_fd_hits"].as_u64(), Some(count(true)), "{scan}");
        assert_eq!(scan["below_origin"], 0, "{scan}");
        let far: u64 = allocs
            .iter()
            .filter(|a| a["scan_bits"].as_u64().unwrap() >= 64)
            .map(|a| a["count"].as_u64().unwrap())
            .sum();
        assert_eq!(p["far_scans"].as_u64(), Some(far), "pid {pid}");
        assert_eq!(
            p["table"]["max_fds_max"], expected["max_fds"],
            "pid {pid}: {}",
            p["table"]
        );
        assert_eq!(p["table"]["expansions"], 0);
        // Narrowed to the one process, the whole report is its own.
        let only = report(&out, &["--pid", &pid.to_string()]);
        assert_eq!(calls(&only["syscalls"], "socket"), k);
        assert_eq!(only["scan"]["allocations"].as_u64(), Some(count(false)));
        assert_eq!(only["table"]["max_fds_max"], expected["max_fds"]);
        assert_eq!(only["processes"].as_array().unwrap().len(), 1);
    }
    // The machine's counts hold both, and more.
    assert!(calls(&r["syscalls"], "socket") >= ops.iter().sum::<u64>());
    // Every recording states the machine's steal time over it, and the interrupt-time waits.
    let steal = &r["steal"];
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    assert!(steal["cpus"].as_u64().unwrap() >= cpus.min(1), "{steal}");
    let (stolen, total) = (steal["steal_ns"].as_u64(), steal["total_ns"].as_u64());
    assert!(
        total.unwrap() > 0 && stolen.unwrap() <= total.unwrap(),
        "{steal}"
    );
    for part in ["irq", "softirq", "fdprof_on_stack"] {
        assert!(r["contention"][part]["count"].is_u64(), "{part}");
    }
    let text = run(fdprof().arg("report").arg(&out));
    assert!(String::from_utf8_lossy(&text.stdout).contains("steal time"));

    let o = run(fdprof()
        .arg("report")
        .arg(&out)
        .args(["--comm", "no-such-comm"]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no process with comm no-such-comm"), "{err}");
    assert_no_programs_left();
}

#[test]
fn process_filters_need_a_system_wide_recording() {
    let out = tmp("processes-one.data");
    std::fs::write(
        &out,
        serde_json::to_vec(&fdprof_recording::testdata::recording()).unwrap(),
    )
    .unwrap();
    let o = run(fdprof().arg("report").arg(&out).args(["--pid", "1"]));
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("system-wide"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The user frames of a process that exited before `record -a` ended: symbolized, with the
/// workload's own Rust functions named. Which stacks contend is up to the scheduler: a few runs
/// are allowed for one whose user stack reaches the workload's code.
#[test]
fn user_frames_of_an_exited_process_are_symbolized_system_wide() {
    require_root();
    let _kernel = kernel_lock();
    let out = tmp("processes-user.data");
    for _ in 0..4 {
        let w = start_workload(&["cputime", "-t", "3", "-d", "1s"]);
        let pid = w.pid;
        let rec = start_record(&["-a", "-o", out.to_str().unwrap()]);
        w.go();
        w.finish();
        // The workload has exited; the recording goes on until now.
        // SAFETY: the recorder is our own child.
        unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
        let mut rec = rec;
        assert!(rec.wait().unwrap().success());
        let recording = read_json(&out);
        let sites: Vec<&Value> = recording["contention"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["pid"] == pid)
            .collect();
        let named = sites.iter().any(|s| {
            s["user_stack"].as_array().unwrap().iter().any(|f| {
                f["function"]
                    .as_str()
                    .unwrap()
                    .starts_with("fdprof_workload::")
            })
        });
        if named {
            let notes = recording["notes"].to_string();
            assert!(notes.contains("user stacks of every process"), "{notes}");
            assert_no_programs_left();
            return;
        }
    }
    panic!("no wait of the exited workload had its user frames named in 4 runs");
}

/// Runs one workload process to its end, with no `--wait-signal`: it execs, works and exits in
/// well under a second, between two of `record -a`'s passes over `/proc`. Returns its pid.
fn short_workload(args: &[&str]) -> u32 {
    let child = fdprof()
        .arg("workload")
        .args(args)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "workload failed");
    pid
}

/// Stops a recorder started by this test and checks it succeeded.
fn stop_record(rec: std::process::Child) {
    // SAFETY: the recorder is our own child.
    unsafe { libc::kill(rec.id() as i32, libc::SIGINT) };
    let mut rec = rec;
    assert!(rec.wait().unwrap().success());
}

/// Processes that exec, wait and exit between two passes of `record -a` over `/proc` (each
/// lives about 0.1 s of the pass's 1 s): their user frames are symbolized from the snapshot
/// taken when the kernel told of their exec. Checked on the workload's own waits, those for
/// the runqueue lock its loop takes reading another thread's CPU clock (`task_sched_runtime`):
/// their user stacks run through the workload's Rust code, so each names it. Without the
/// starts, a process is read only if a pass falls within its life (~1 in 10), and every
/// other one's frames are `[unknown]`.
#[test]
fn user_frames_of_processes_shorter_than_a_pass_are_symbolized() {
    require_root();
    let _kernel = kernel_lock();
    let out = tmp("processes-short.data");
    for _ in 0..3 {
        let rec = start_record(&["-a", "-o", out.to_str().unwrap()]);
        let pids: Vec<u32> = (0..6)
            .map(|_| short_workload(&["cputime", "-t", "3", "-d", "100ms"]))
            .collect();
        stop_record(rec);
        let recording = read_json(&out);
        let mut checked = 0;
        for pid in &pids {
            let own: Vec<&Value> = recording["contention"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| s["pid"] == *pid)
                .filter(|s| {
                    let frames = |side: &str| s[side].as_array().unwrap().clone();
                    frames("kernel_stack")
                        .iter()
                        .any(|f| f["function"] == "task_sched_runtime")
                        && !frames("user_stack").is_empty()
                })
                .collect();
            if own.is_empty() {
                continue;
            }
            checked += 1;
            for site in own {
                let user = &site["user_stack"];
                assert!(
                    user.as_array().unwrap().iter().any(|f| f["function"]
                        .as_str()
                        .unwrap()
                        .starts_with("fdprof_workload::")),
                    "pid {pid}: a wait in its loop without its frames named: {user}"
                );
            }
        }
        // At least two processes waited in their loop: the chance that passes alone read both
        // is about 1 in 100.
        if checked >= 2 {
            let notes = recording["notes"].to_string();
            assert!(
                notes.contains("as the kernel told of each fork or exec"),
                "{notes}"
            );
            assert_no_programs_left();
            return;
        }
    }
    panic!("fewer than two of the short workloads waited in their loop, in 3 runs");
}

/// The number before `what` in `text` (`"… 42 starts …"`).
fn number_before(text: &str, what: &str) -> u64 {
    let at = text
        .find(what)
        .unwrap_or_else(|| panic!("no {what} in {text}"));
    text[..at]
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|w| !w.is_empty())
        .unwrap()
        .parse()
        .unwrap()
}

/// A fork and exec storm (a shell loop of `true`) under `record -a`: the recording is written
/// and every start is accounted for, read or counted as a drop: each iteration is one fork and
/// one exec, so the starts read and those the full ring dropped are at least twice the
/// iterations; those past the snapshot bounds are the `processes`/`limit` drops.
#[test]
fn a_fork_and_exec_storm_is_bounded_and_counted() {
    require_root();
    let _kernel = kernel_lock();
    let out = tmp("processes-storm.data");
    let iterations = 2000u64;
    let rec = start_record(&["-a", "-o", out.to_str().unwrap()]);
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "i=0; while [ $i -lt {iterations} ]; do /bin/true; i=$((i+1)); done"
        ))
        .status()
        .unwrap();
    assert!(status.success());
    stop_record(rec);
    let recording = read_json(&out);
    let note = recording["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.contains("fork or exec"))
        .expect("the starts' note")
        .to_string();
    let drop = |reason: &str| -> u64 {
        recording["drops"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["probe"] == "processes" && d["reason"] == reason)
            .map_or_else(
                || panic!("no processes/{reason} drop row"),
                |d| d["count"].as_u64().unwrap(),
            )
    };
    let received = number_before(&note, " starts");
    let full = drop("ringbuf_full");
    assert!(
        received + full >= 2 * iterations,
        "{received} read + {full} dropped of {} starts: {note}",
        2 * iterations
    );
    assert_eq!(
        drop("limit"),
        number_before(&note, " past the bounds"),
        "{note}"
    );
    // Each start read is accounted for once.
    let parts: u64 = [
        " processes read at once",
        " gone before",
        " past the bounds",
        " repeated",
    ]
    .iter()
    .map(|w| number_before(&note, w))
    .sum();
    assert_eq!(parts, received, "{note}");
    assert_no_programs_left();
}
