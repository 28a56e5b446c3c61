//! Hostile and careless input on the command line and from targets: out-of-range durations are
//! refused (exit 2, never a panic or a silent clamp), and a target's chosen name never reaches
//! the terminal raw.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::common::*;

fn refused_with(args: &[&str], says: &str) {
    let out = run(fdprof().args(args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(stderr.contains(says), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn durations_out_of_range_are_refused() {
    for d in ["18446744073709551615", "9999999999999999999s", "8761h"] {
        refused_with(&["record", "-a", "-d", d], "longer than the longest");
        refused_with(
            &["workload", "opensock", "-d", d],
            "longer than the longest",
        );
    }
    for d in ["0.0000000001s", "999us", "1ns"] {
        refused_with(&["record", "-a", "-d", d], "shorter than the shortest");
        refused_with(
            &["workload", "opensock", "-d", d],
            "shorter than the shortest",
        );
    }
    refused_with(&["record", "-a", "-d", "1e-10s"], "unknown unit");
}

/// A target that names itself with terminal control sequences (retitle the window, clear the
/// screen) gets them escaped in record's messages and in the report.
#[test]
fn a_hostile_comm_is_escaped() {
    require_root();
    let _guard = kernel_lock();
    let hostile = "\x1b]0;pwn\x07\x1b[2J";
    let mut target = Command::new("sh")
        .arg("-c")
        .arg(r#"printf '\033]0;pwn\007\033[2J' > /proc/$$/comm; echo ready; exec 3>/dev/null; while :; do exec 4</dev/null 4<&-; sleep 0.05; done"#)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(target.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let pid = target.id();
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    assert_eq!(
        comm.trim_end_matches('\n'),
        hostile,
        "the target renamed itself"
    );

    let dir = std::env::temp_dir().join(format!("fdprof-input-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = dir.join("comm.data");
    let rec = run(fdprof()
        .args(["record", "-p", &pid.to_string(), "-d", "1s", "-o"])
        .arg(&data));
    // SAFETY: ending the shell this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = target.wait();
    let stderr = String::from_utf8_lossy(&rec.stderr);
    assert!(rec.status.success(), "{stderr}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );
    assert!(stderr.contains(r"(\x1b]0;pwn\x07\x1b[2J)"), "{stderr}");

    let report = run(fdprof().arg("report").arg(&data));
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success());
    assert!(!text.contains('\x1b') && !text.contains('\x07'), "{text:?}");
    assert!(text.contains(r"\x1b]0;pwn\x07\x1b[2J"), "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_no_programs_left();
}
