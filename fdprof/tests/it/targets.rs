//! `fdprof record`'s targets on the real kernel: processes whose main thread left, zombies,
//! commands that cannot run, the command's exit status, what becomes of the command when fdprof
//! is stopped or killed, and the capability check.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use fdprof_profiler::analysis::ExitStatus;
use serde_json::Value;

fn calls(rec: &Value, name: &str) -> u64 {
    syscall(rec, name).map_or(0, |s| s["calls"].as_u64().unwrap())
}

fn total_calls(rec: &Value) -> u64 {
    rec["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum()
}

/// The state letter of `/proc/ID/stat` (`None` once the task is gone).
fn state(id: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{id}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Waits up to `limit` for `cond`.
fn wait_for(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Gone, or a zombie nobody has reaped yet (the container's init may not reap): not running.
fn ended(pid: u32) -> bool {
    matches!(state(pid), None | Some('Z') | Some('X'))
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: signalling a process this test started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// A process whose main thread called pthread_exit is recorded until its last thread exits,
/// and every syscall of the worker that does the work is counted. `-t` of the exited main
/// thread is refused.
#[test]
fn a_process_is_recorded_until_its_last_thread_exits() {
    require_root();
    let _guard = kernel_lock();
    let program = tmp("main_thread_exits");
    cc("main_thread_exits.c", &program, &["-pthread"]);
    let mut target = Command::new(&program).stdin(Stdio::null()).spawn().unwrap();
    let pid = target.id();
    assert!(
        wait_for(Duration::from_secs(5), || state(pid) == Some('Z')),
        "the main thread did not exit"
    );
    let out = tmp("main_thread_exits.data");
    let refused = run(fdprof().args([
        "record",
        "-t",
        &pid.to_string(),
        "-d",
        "1s",
        "-o",
        out.to_str().unwrap(),
    ]));
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains(&format!("thread {pid} has exited (zombie)")),
        "{stderr}"
    );

    assert!(!out.exists());
    let (mut rec, stderr) = start_record_collecting(&[
        "-p",
        &pid.to_string(),
        "-d",
        "20s",
        "-o",
        out.to_str().unwrap(),
    ]);
    signal(pid, libc::SIGUSR1);
    let status = rec.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(target.wait().unwrap().success());
    let rec = read_json(&out);
    assert_eq!(rec["end_reason"], "target_exited", "{stderr}");
    // The worker sleeps 300 ms after the signal before its loop.
    assert!(rec["duration_ns"].as_u64().unwrap() >= 300_000_000);
    assert_eq!(calls(&rec, "dup"), 500);
    assert_eq!(calls(&rec, "close"), 500);
    assert_eq!(total_calls(&rec), 1000, "nothing else");
    assert_no_programs_left();
}

/// A zombie (exited, not yet reaped) is refused, as a process and as a thread, before anything
/// is attached and without writing a recording.
#[test]
fn zombies_are_refused() {
    require_root();
    let _guard = kernel_lock();
    let mut zombie = Command::new("sh").args(["-c", "exit 0"]).spawn().unwrap();
    let pid = zombie.id();
    assert!(wait_for(Duration::from_secs(5), || state(pid) == Some('Z')));
    let out = tmp("zombie.data");
    for (flag, kind) in [("-p", "process"), ("-t", "thread")] {
        let result = run(fdprof().args([
            "record",
            flag,
            &pid.to_string(),
            "-d",
            "1s",
            "-o",
            out.to_str().unwrap(),
        ]));
        assert_eq!(result.status.code(), Some(2), "{flag}");
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("{kind} {pid} has exited (zombie)")),
            "{stderr}"
        );
        assert!(!out.exists());
    }
    zombie.wait().unwrap();
    assert_no_programs_left();
}

/// `record -- CMD` with a command that cannot run fails like a shell (name, reason, 126/127),
/// writes nothing and leaves an existing file alone: refused before attaching when the file
/// is missing, a directory or not executable; reported by the child through a CLOEXEC pipe when
/// only exec can tell (here ENOEXEC: executable, but in no format the kernel runs).
#[test]
fn commands_that_cannot_run_are_refused() {
    require_root();
    let _guard = kernel_lock();
    let not_executable = tmp("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    std::fs::set_permissions(&not_executable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let directory = tmp("a-directory");
    std::fs::create_dir_all(&directory).unwrap();
    let unknown_format = tmp("unknown-format");
    std::fs::write(&unknown_format, b"\x7fnot an ELF file\n\x01\x02").unwrap();
    std::fs::set_permissions(&unknown_format, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = |p: &Path| p.to_str().unwrap().to_string();
    let cases = [
        (
            "/nonexistent".to_string(),
            127,
            "No such file or directory",
            false,
        ),
        (
            "fdprof-no-such-command".into(),
            127,
            "command not found",
            false,
        ),
        (path(&not_executable), 126, "Permission denied", false),
        (path(&directory), 126, "Is a directory", false),
        (path(&unknown_format), 126, "Exec format error", true),
    ];
    let out = tmp("cannot-run.data");
    let kept = tmp("kept.data");
    std::fs::write(&kept, "an older recording").unwrap();
    for (command, code, reason, at_exec) in &cases {
        for output in [&out, &kept] {
            let result = run(fdprof()
                .arg("record")
                .arg("-o")
                .arg(output)
                .arg("--")
                .arg(command)
                .arg("an-argument"));
            let stderr = String::from_utf8_lossy(&result.stderr);
            assert_eq!(result.status.code(), Some(*code), "{command}: {stderr}");
            let last = stderr.trim().lines().last().unwrap_or_default();
            assert_eq!(last, format!("fdprof: error: {command}: {reason}"));
            if !at_exec {
                assert_eq!(stderr.trim().lines().count(), 1, "refused early: {stderr}");
            }
            assert!(!out.exists(), "{command}: a recording was written");
            assert_eq!(
                std::fs::read_to_string(&kept).unwrap(),
                "an older recording"
            );
        }
    }
    assert_no_programs_left();
}

/// The command's exit code or killing signal is kept in the recording and shown by `report`,
/// text and JSON; record itself succeeds.
#[test]
fn the_command_exit_status_is_kept() {
    require_root();
    let _guard = kernel_lock();
    for (script, key, value, text) in [
        ("exit 3", "code", 3, "exited with code 3"),
        (
            "kill -TERM $$",
            "signal",
            15,
            "killed by signal 15 (SIGTERM)",
        ),
    ] {
        let out = tmp("exit-status.data");
        let result = run(fdprof()
            .arg("record")
            .arg("-o")
            .arg(&out)
            .args(["--", "sh", "-c", script]));
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(result.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("command_exited, command {text})")),
            "{stderr}"
        );
        let rec = read_json(&out);
        assert_eq!(rec["end_reason"], "command_exited");
        assert_eq!(rec["target"]["exit_status"][key], value, "{script}");

        let report = run(fdprof().arg("report").arg(&out));
        let report = String::from_utf8_lossy(&report.stdout);
        let line = report
            .lines()
            .find(|l| l.contains("exit status"))
            .unwrap_or_else(|| panic!("no exit status in:\n{report}"));
        assert!(line.ends_with(text), "{line}");
        // The JSON report, read through its type.
        let json = run(fdprof().arg("report").arg("--json").arg(&out));
        let report: fdprof_profiler::analysis::Report =
            serde_json::from_slice(&json.stdout).unwrap();
        let want = match key {
            "code" => ExitStatus::Code(value),
            _ => ExitStatus::Signal(value),
        };
        assert_eq!(report.header.target.exit_status, Some(want));
    }
    // The help says record's own status does not follow the command's.
    let help = run(fdprof().args(["record", "--help"]));
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("record's own exit status is 0"), "{help}");
    assert_no_programs_left();
}

/// `record -o OUT -- sh -c 'echo $$ > PIDFILE; SCRIPT'` started and running: fdprof, the
/// command's pid, and fdprof's stderr to come.
fn record_a_command(
    name: &str,
    script: &str,
    extra: &[&str],
) -> (Child, u32, std::thread::JoinHandle<String>, PathBuf) {
    let out = tmp(&format!("{name}.data"));
    let pid_file = tmp(&format!("{name}.pid"));
    let _ = std::fs::remove_file(&pid_file);
    let script = format!("echo $$ > {}; {script}", pid_file.display());
    let mut args = extra.to_vec();
    args.extend(["-o", out.to_str().unwrap(), "--", "sh", "-c", &script]);
    let (rec, stderr) = start_record_collecting(&args);
    assert!(
        wait_for(Duration::from_secs(10), || std::fs::read_to_string(
            &pid_file
        )
        .is_ok_and(|s| s.ends_with('\n'))),
        "the command did not start"
    );
    let pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (rec, pid, stderr, out)
}

/// SIGTERM or SIGINT to fdprof is passed on to the command; fdprof records until it has exited
/// and writes the recording.
#[test]
fn stop_signals_are_passed_on_to_the_command() {
    require_root();
    let _guard = kernel_lock();
    for (sig, number) in [(libc::SIGTERM, 15), (libc::SIGINT, 2)] {
        let (mut rec, pid, stderr, out) = record_a_command("passed-on", "exec sleep 1000", &[]);
        signal(rec.id(), sig);
        let status = rec.wait().unwrap();
        let stderr = stderr.join().unwrap();
        assert!(status.success(), "{stderr}");
        assert!(ended(pid), "the command outlived fdprof");
        let rec = read_json(&out);
        assert_eq!(rec["end_reason"], "interrupted");
        // The signal passed on ended it, not the SIGKILL after the grace period.
        assert_eq!(rec["target"]["exit_status"]["signal"], number);
    }
    assert_no_programs_left();
}

/// A command that ignores the signal is killed after the grace period, or at once when fdprof
/// gets a second signal.
#[test]
fn a_command_that_ignores_the_signal_is_killed() {
    require_root();
    let _guard = kernel_lock();
    let ignore = "trap '' TERM INT; while :; do sleep 0.1; done";
    // One signal: SIGKILL after the 5 s grace period.
    let (mut rec, pid, stderr, out) = record_a_command("grace", ignore, &[]);
    let start = Instant::now();
    signal(rec.id(), libc::SIGTERM);
    assert!(rec.wait().unwrap().success(), "{}", stderr.join().unwrap());
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(4900) && waited < Duration::from_secs(9),
        "{waited:?}"
    );
    assert!(ended(pid));
    let recording = read_json(&out);
    assert_eq!(recording["end_reason"], "interrupted");
    assert_eq!(recording["target"]["exit_status"]["signal"], 9);

    // A second signal: at once.
    let (mut rec, pid, stderr, out) = record_a_command("second", ignore, &[]);
    signal(rec.id(), libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    signal(rec.id(), libc::SIGINT);
    assert!(rec.wait().unwrap().success(), "{}", stderr.join().unwrap());
    // The grace period would end it 4.7 s after the second signal.
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert!(ended(pid));
    assert_eq!(read_json(&out)["target"]["exit_status"]["signal"], 9);
    assert_no_programs_left();
}

/// SIGKILL to fdprof cannot be passed on: the parent-death signal ends the command.
#[test]
fn a_killed_fdprof_takes_the_command_with_it() {
    require_root();
    let _guard = kernel_lock();
    let (mut rec, pid, _stderr, _) = record_a_command("killed", "exec sleep 1000", &[]);
    signal(rec.id(), libc::SIGKILL);
    rec.wait().unwrap();
    assert!(
        wait_for(Duration::from_secs(2), || ended(pid)),
        "the command outlived fdprof"
    );
    assert_no_programs_left();
}

/// With -d, a command still running when the recording ends is ended too (SIGTERM).
#[test]
fn a_command_outliving_the_duration_is_ended() {
    require_root();
    let _guard = kernel_lock();
    let (mut rec, pid, stderr, out) =
        record_a_command("duration", "exec sleep 1000", &["-d", "1s"]);
    let status = rec.wait().unwrap();
    let stderr = stderr.join().unwrap();
    assert!(status.success(), "{stderr}");
    assert!(ended(pid));
    let rec = read_json(&out);
    assert_eq!(rec["end_reason"], "duration");
    assert_eq!(rec["target"]["exit_status"]["signal"], 15);
    assert!(
        stderr.contains("command killed by signal 15 (SIGTERM)"),
        "{stderr}"
    );
    assert_no_programs_left();
}

/// A launched command is followed into the processes it starts, from their fork (a shell's
/// child, a pipeline, a child's child), their counts added to its own; its own (after exec)
/// stay exact, and a process it did not start is not counted, busy as it is meanwhile.
#[test]
fn a_command_is_followed_into_what_it_starts() {
    require_root();
    let _guard = kernel_lock();
    let w = env!("CARGO_BIN_EXE_fdprof");
    let sockets = |n: u32| format!("{w} workload socket-close --ops {n} >/dev/null");
    let mut outsider = Command::new(w)
        .args(["workload", "socket-close", "-d", "20s"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    // Each makes 1500 sockets in all; `; true` keeps sh from exec-ing its last command.
    let cases = [
        ("own", format!("exec {}", sockets(1500))),
        ("child", format!("{}; true", sockets(1500))),
        (
            "child and own",
            format!("{}; exec {}", sockets(1000), sockets(500)),
        ),
        ("pipeline", format!("{} | {}", sockets(1000), sockets(500))),
        (
            "grandchild",
            format!("sh -c '{}; true'; true", sockets(1500)),
        ),
    ];
    for (name, script) in &cases {
        let out = tmp("command-children.data");
        let result = run(fdprof()
            .arg("record")
            .arg("-o")
            .arg(&out)
            .args(["--", "sh", "-c", script]));
        let stderr = String::from_utf8_lossy(&result.stderr);
        assert!(result.status.success(), "{name}: {stderr}");
        assert!(stderr.contains("and what it starts"), "{stderr}");
        let rec = read_json(&out);
        assert_eq!(rec["end_reason"], "command_exited", "{name}");
        assert_eq!(rec["target"]["children"], true, "{name}");
        assert_eq!(calls(&rec, "socket"), 1500, "{name}: {script}");
        let lost: u64 = rec["drops"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["probe"] == "targets")
            .map(|d| d["count"].as_u64().unwrap())
            .sum();
        assert_eq!(lost, 0, "{name}");
    }
    let _ = outsider.kill();
    let _ = outsider.wait();
    assert_no_programs_left();
}

fn setpriv(args: &[&str], fdprof_args: &[&str]) -> std::process::Output {
    run(Command::new("setpriv")
        .args(args)
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(fdprof_args)
        .current_dir("/"))
}

/// The kernel's rule for /proc/kallsyms addresses (kallsyms_show_value) on this machine.
fn kallsyms_needs_syslog() -> bool {
    let sysctl = |n: &str| {
        std::fs::read_to_string(format!("/proc/sys/kernel/{n}"))
            .unwrap()
            .trim()
            .parse::<i64>()
            .unwrap()
    };
    match sysctl("kptr_restrict") {
        0 => sysctl("perf_event_paranoid") > 1,
        1 => true,
        _ => false,
    }
}

/// Capabilities decide, not the user id: root without capabilities is refused with the missing
/// ones named; a non-root user with CAP_BPF and CAP_PERFMON passes the check.
#[test]
fn capabilities_decide_not_the_user_id() {
    require_root();
    let _guard = kernel_lock();
    let none = ["--inh-caps=-all", "--bounding-set=-all"];
    for command in ["doctor", "record"] {
        let mut args = vec![command];
        if command == "record" {
            args.extend(["-a", "-d", "1s", "-o", "/tmp/fdprof-no-caps.data"]);
        }
        let out = setpriv(&none, &args);
        assert_eq!(out.status.code(), Some(2), "{command}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(
            stderr.contains(&format!("fdprof {command} needs CAP_BPF")),
            "{stderr}"
        );
        assert!(stderr.contains("CAP_PERFMON"), "{stderr}");
        assert!(stderr.contains("missing: CAP_BPF"), "{stderr}");
    }

    let nobody = |caps: &str| {
        let inh = format!("--inh-caps={caps}");
        let ambient = format!("--ambient-caps={caps}");
        [
            "--reuid=65534".to_string(),
            "--regid=65534".into(),
            "--clear-groups".into(),
            inh,
            ambient,
        ]
    };
    let bpf = nobody("+bpf,+perfmon");
    let bpf: Vec<&str> = bpf.iter().map(String::as_str).collect();
    // doctor needs nothing more: it runs and says what record will use.
    let doctor = setpriv(&bpf, &["doctor"]);
    let stdout = String::from_utf8_lossy(&doctor.stdout);
    assert!(
        doctor.status.success(),
        "{}",
        String::from_utf8_lossy(&doctor.stderr)
    );
    assert!(stdout.contains("record will use"), "{stdout}");

    // record symbolizes kernel stacks from /proc/kallsyms, which may show addresses only to
    // CAP_SYSLOG: then it is named too, before anything is loaded.
    let dir = tmp("nobody");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = dir.join("nobody.data");
    // Something to record: -a leaves fdprof itself out.
    let _load = Load::start();
    let record = ["record", "-a", "-d", "1s", "-o", out.to_str().unwrap()];
    let result = setpriv(&bpf, &record);
    let stderr = String::from_utf8_lossy(&result.stderr);
    if kallsyms_needs_syslog() {
        assert_eq!(result.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("needs CAP_BPF, CAP_PERFMON and CAP_SYSLOG (missing: CAP_SYSLOG)"),
            "{stderr}"
        );
        assert!(!out.exists());
        let with_syslog = nobody("+bpf,+perfmon,+syslog");
        let with_syslog: Vec<&str> = with_syslog.iter().map(String::as_str).collect();
        let result = setpriv(&with_syslog, &record);
        assert!(
            result.status.success(),
            "{}",
            String::from_utf8_lossy(&result.stderr)
        );
    } else {
        assert!(result.status.success(), "{stderr}");
    }
    // It records, but the kernel's run-time statistics take CAP_SYS_ADMIN: the recording says
    // its programs' run times were not measured.
    let rec = read_json(&out);
    assert_eq!(rec["end_reason"], "duration");
    assert!(total_calls(&rec) > 0);
    assert_eq!(rec["own_cost"]["stats_window_ns"], 0);
    let notes = rec["notes"].to_string();
    assert!(notes.contains("CAP_SYS_ADMIN"), "{notes}");
    assert_no_programs_left();
}
