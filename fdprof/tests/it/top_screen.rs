//! `fdprof top`'s screen in a real terminal: tmux (Debian's package; `cargo xtask bootstrap`
//! installs it) runs top in a 100×30 session on its own server socket, the test types keys with
//! `send-keys` and reads the screen with `capture-pane`. Every way out (q, the target exiting,
//! SIGTERM) must exit 0, leave the terminal's settings as they were (`stty -a` before and
//! after, in the same pane) and nothing loaded.

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;

/// One tmux server and session running `fdprof top` inside a shell that records the terminal's
/// settings before and after, top's pid and its exit status.
struct Screen {
    socket: String,
    dir: PathBuf,
}

impl Screen {
    /// Starts `fdprof top ARGS` in a 100×30 tmux session.
    fn start(name: &str, args: &str) -> Self {
        Self::start_sized(name, args, 100, 30)
    }

    /// Starts `fdprof top ARGS` in a `width`×`height` tmux session, in the screen's own
    /// directory (where `w` writes).
    fn start_sized(name: &str, args: &str, width: u16, height: u16) -> Self {
        let dir = tmp(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = format!("fdprof-test-{name}-{}", std::process::id());
        let fdprof = env!("CARGO_BIN_EXE_fdprof");
        let d = dir.display();
        // The inner shell execs top, so top is the pane's foreground process and its pid is
        // the one written; the outer shell then records how it ended and the settings after.
        // Each file is written whole under another name and renamed: the shell creates a file
        // before the command writes it, and a reader polling for it must not see it empty.
        let script = format!(
            "stty -a > {d}/before.part && mv {d}/before.part {d}/before; \
             sh -c 'echo $$ > {d}/pid.part && mv {d}/pid.part {d}/pid && exec {fdprof} top {args}'; \
             echo $? > {d}/status.part; stty -a > {d}/after.part; \
             mv {d}/after.part {d}/after; mv {d}/status.part {d}/status; sleep 600"
        );
        let started = run(Command::new("tmux").args([
            "-L",
            &socket,
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            "-c",
            &d.to_string(),
            "sh",
            "-c",
            &script,
        ]));
        assert!(started.status.success(), "tmux: {started:?}");
        Screen { socket, dir }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let out = run(Command::new("tmux").args(["-L", &self.socket]).args(args));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p"])
    }

    fn keys(&self, keys: &str) {
        self.tmux(&["send-keys", keys]);
    }

    /// Waits up to `limit` for the screen to satisfy `cond`; the last screen either way.
    fn wait_for(&self, limit: Duration, cond: impl Fn(&str) -> bool) -> (bool, String) {
        let start = Instant::now();
        loop {
            let screen = self.screen();
            if cond(&screen) || start.elapsed() > limit {
                return (cond(&screen), screen);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn file(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.dir.join(name)).ok()
    }

    /// Waits for top to have exited; its exit status.
    fn exit_status(&self, limit: Duration) -> Option<i32> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let (Some(status), Some(_)) = (self.file("status"), self.file("after")) {
                return status.trim().parse().ok();
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// top exited 0 and left the terminal's settings as they were.
    fn assert_clean_exit(&self) {
        let status = self.exit_status(Duration::from_secs(20));
        assert_eq!(
            status,
            Some(0),
            "top's exit status; screen:\n{}",
            self.screen()
        );
        assert_eq!(
            self.file("before").unwrap(),
            self.file("after").unwrap(),
            "stty -a differs after top"
        );
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn workload(args: &str) -> String {
    format!("-- {} workload {args}", env!("CARGO_BIN_EXE_fdprof"))
}

/// A `file_lock` row of `operation` whose contentions/s (the first figure) is not zero.
fn busy_row(screen: &str, operation: &str) -> bool {
    screen.lines().any(|l| {
        // Pane borders (`│`) touch the first word.
        let mut words = l
            .split(|c: char| c.is_whitespace() || c == '│')
            .filter(|w| !w.is_empty())
            .skip_while(|w| *w != "file_lock");
        words.next() == Some("file_lock")
            && words.next() == Some(operation)
            && words
                .next()
                .and_then(|rate| rate.parse::<f64>().ok())
                .is_some_and(|rate| rate > 0.0)
    })
}

#[test]
fn the_screen_shows_contention_answers_keys_and_quits_cleanly() {
    require_root();
    let _guard = kernel_lock();
    let screen = Screen::start(
        "keys",
        &format!(
            "--interval 500ms {}",
            workload("opensock -t 2 -n 2000 -d 20s")
        ),
    );
    let (found, text) = screen.wait_for(Duration::from_secs(15), |s| {
        busy_row(s, "alloc") && busy_row(s, "close")
    });
    assert!(found, "no busy file_lock alloc and close rows:\n{text}");

    screen.keys("s");
    let (sorted, text) = screen.wait_for(Duration::from_secs(3), |s| s.contains("stacks by count"));
    assert!(sorted, "s did not sort the stacks by count:\n{text}");

    screen.keys("p");
    let (paused, text) = screen.wait_for(Duration::from_secs(3), |s| s.contains("PAUSED"));
    assert!(paused, "p did not pause:\n{text}");
    screen.keys("p");
    let (resumed, text) = screen.wait_for(Duration::from_secs(3), |s| !s.contains("PAUSED"));
    assert!(resumed, "p did not resume:\n{text}");

    screen.keys("?");
    let (help, text) = screen.wait_for(Duration::from_secs(3), |s| {
        s.contains("reset the cumulative totals")
    });
    assert!(help, "? did not open the help:\n{text}");
    screen.keys("?");
    let (closed, text) = screen.wait_for(Duration::from_secs(3), |s| {
        !s.contains("reset the cumulative totals")
    });
    assert!(closed, "? did not close the help:\n{text}");

    screen.keys("q");
    screen.assert_clean_exit();
    assert_no_programs_left();
}

#[test]
fn the_target_exiting_ends_top_cleanly() {
    require_root();
    let _guard = kernel_lock();
    let screen = Screen::start(
        "exits",
        &format!(
            "--interval 300ms {}",
            workload("opensock -t 2 -n 500 -d 2s")
        ),
    );
    screen.assert_clean_exit();
    assert_no_programs_left();
}

#[test]
fn sigterm_ends_top_cleanly() {
    require_root();
    let _guard = kernel_lock();
    let screen = Screen::start(
        "term",
        &format!(
            "--interval 300ms {}",
            workload("opensock -t 2 -n 500 -d 30s")
        ),
    );
    let (up, text) = screen.wait_for(Duration::from_secs(15), |s| s.contains("file_lock"));
    assert!(up, "top did not draw:\n{text}");
    let pid: i32 = screen.file("pid").unwrap().trim().parse().unwrap();
    // SAFETY: signalling the top this test started.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    screen.assert_clean_exit();
    assert_no_programs_left();
}

#[test]
fn a_launched_commands_output_waits_until_the_screen_is_gone() {
    require_root();
    let _guard = kernel_lock();
    // The command prints to both streams and reads its standard input before the workload
    // starts: on the screen's terminal the lines would scroll it and the read would take keys.
    let dir = tmp("top-launched-output");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("noisy.sh");
    std::fs::write(
        &script,
        format!(
            "echo OUT-MARK\necho ERR-MARK >&2\nread line || echo STDIN-EOF\nexec {} workload \
             opensock -t 2 -n 500 -d 10s\n",
            env!("CARGO_BIN_EXE_fdprof")
        ),
    )
    .unwrap();
    let screen = Screen::start(
        "output",
        &format!("--interval 300ms -- /bin/sh {}", script.display()),
    );
    let (up, text) = screen.wait_for(Duration::from_secs(15), |s| busy_row(s, "close"));
    assert!(up, "top did not draw:\n{text}");
    assert!(
        !text.contains("MARK"),
        "the command's output reached the screen:\n{text}"
    );
    screen.assert_clean_exit();
    let after = screen.screen();
    for line in [
        "the command's output while the screen was up",
        "OUT-MARK",
        "ERR-MARK",
        "STDIN-EOF",
    ] {
        assert!(
            after.contains(line),
            "no {line:?} after the screen:\n{after}"
        );
    }
    assert_no_programs_left();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `top --from`: a recorded series on the screen, without privileges; q ends it cleanly.
#[test]
fn a_played_back_series_shows_its_contention_and_quits_cleanly() {
    use fdprof_common::{contention::LockKind, fnops::Operation};
    use fdprof_recording::series::{Sample, SampleWaits, Series};
    let mut rec = fdprof_recording::testdata::recording();
    rec.series = Some(Series {
        interval_ns: 200_000_000,
        samples: (0..3u64)
            .map(|i| Sample {
                start_ns: i * 200_000_000,
                duration_ns: 200_000_000,
                waits: vec![SampleWaits {
                    lock: LockKind::FileLock,
                    lock_name: None,
                    operation: Operation::Close,
                    count: 1000,
                    total_wait_ns: 2_000_000,
                    max_wait_ns: 9_000,
                }],
                ..Default::default()
            })
            .collect(),
    });
    let path = tmp("played-back.data");
    std::fs::write(&path, serde_json::to_vec(&rec).unwrap()).unwrap();
    let screen = Screen::start("from", &format!("--from {}", path.display()));
    // 1000 waits of 2 µs in each 200 ms: 5000 a second.
    let row = |s: &str| {
        s.lines()
            .any(|l| l.contains("file_lock close         5000"))
    };
    let (busy, text) = screen.wait_for(Duration::from_secs(15), row);
    assert!(busy, "no close row at 5000/s:\n{text}");
    // Its intervals are in a file already: w says so and writes nothing.
    screen.keys("w");
    let (said, text) = screen.wait_for(Duration::from_secs(5), |s| {
        s.contains("this is a recording already")
    });
    assert!(said, "w did not say this is a recording:\n{text}");
    screen.keys("q");
    screen.assert_clean_exit();
    let written = std::fs::read_dir(&screen.dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with("fdprof-top-")
        })
        .count();
    assert_eq!(written, 0, "a playback's w wrote a file");
}

/// The duration of the screen's cumulative view, in seconds (`cumulative 1.20 s`), once it
/// is a whole second or more.
fn cumulative_seconds(screen: &str) -> Option<f64> {
    let mut words = screen.split_once("cumulative ")?.1.split_whitespace();
    let value = words.next()?.parse().ok()?;
    (words.next()? == "s").then_some(value)
}

/// `w` writes the intervals the screen holds into top's current directory as a recording of
/// `record --interval`'s kind: `report` reads it, `top --from` plays each interval back.
#[test]
fn w_writes_a_recording_that_report_reads() {
    require_root();
    let _guard = kernel_lock();
    let load = Load::start();
    let screen = Screen::start("save", &format!("-p {} --interval 200ms", load.pid()));
    let (up, text) = screen.wait_for(Duration::from_secs(15), |s| s.contains("file_lock"));
    assert!(up, "top did not draw:\n{text}");
    // The totals cover a second or more: at least 5 intervals of 200 ms have been shown.
    screen.keys("z");
    let (enough, text) = screen.wait_for(Duration::from_secs(15), |s| {
        cumulative_seconds(s).is_some_and(|secs| secs >= 1.0)
    });
    assert!(enough, "the totals did not reach a second:\n{text}");

    screen.keys("w");
    let (said, text) =
        screen.wait_for(Duration::from_secs(10), |s| s.contains("wrote fdprof-top-"));
    assert!(said, "w did not say where it wrote:\n{text}");
    let name = text
        .split_whitespace()
        .find(|w| w.starts_with("fdprof-top-") && w.ends_with(".data"))
        .unwrap_or_else(|| panic!("no file name on the screen:\n{text}"))
        .to_string();
    screen.keys("q");
    screen.assert_clean_exit();
    assert_no_programs_left();

    let path = screen.dir.join(&name);
    let meta = std::fs::symlink_metadata(&path)
        .unwrap_or_else(|e| panic!("{} is not there: {e}", path.display()));
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o7777, 0o600, "mode of {name}");
    let rec = read_json(&path);
    assert_eq!(rec["series"]["interval_ns"], 200_000_000);
    let samples = rec["series"]["samples"].as_array().expect("a series").len();
    assert!(samples >= 3, "{samples} samples");
    let report = report_json(&[&path]);
    assert_eq!(report["rates"]["rows"].as_array().unwrap().len(), samples);
    let played = run(fdprof().args(["top", "--jsonl", "--from"]).arg(&path));
    assert!(
        played.status.success(),
        "top --from: {}",
        String::from_utf8_lossy(&played.stderr)
    );
    assert_eq!(
        String::from_utf8(played.stdout).unwrap().lines().count(),
        samples
    );
}

/// `top -a` with two workloads of comms of their own: the processes pane names both pids with
/// their comms (both have exited by then: the cumulative view keeps them), and the header
/// states the steal time.
#[test]
fn the_processes_pane_names_each_workload_system_wide() {
    require_root();
    let _guard = kernel_lock();
    let comms = ["fdpt-left", "fdpt-right"];
    let workloads: Vec<Waiting> = comms
        .iter()
        .zip([3000, 5000])
        .map(|(comm, ops)| {
            start_workload_with(
                common::daemon::fdprof_as(comm),
                &["socket-close", "-t", "1", "--ops", &ops.to_string()],
            )
        })
        .collect();
    let pids: Vec<u32> = workloads.iter().map(|w| w.pid).collect();
    let screen = Screen::start_sized("processes", "-a --interval 300ms", 140, 60);
    let (up, text) = screen.wait_for(Duration::from_secs(20), |s| {
        s.contains("processes by file_lock wait")
    });
    assert!(up, "no processes pane under -a:\n{text}");
    assert!(text.contains("steal "), "no steal in the header:\n{text}");
    for w in workloads {
        w.go();
        w.finish();
    }
    // Both exited; the next intervals bring their last counts into the cumulative totals.
    std::thread::sleep(Duration::from_secs(2));
    screen.keys("z");
    let (cumulative, text) = screen.wait_for(Duration::from_secs(5), |s| s.contains("cumulative"));
    assert!(
        cumulative,
        "z did not switch to the cumulative view:\n{text}"
    );
    // Frozen, then scrolled through the focused pane (Tab: stacks, fd table, processes) until
    // both rows have been on screen: how many other processes rank above them is the
    // machine's business.
    screen.keys("p");
    let (paused, text) = screen.wait_for(Duration::from_secs(3), |s| s.contains("PAUSED"));
    assert!(paused, "p did not pause:\n{text}");
    for _ in 0..3 {
        screen.keys("Tab");
    }
    let wanted: Vec<String> = pids
        .iter()
        .zip(comms)
        .map(|(pid, comm)| format!("{pid} {comm} "))
        .collect();
    let mut seen = vec![false; wanted.len()];
    let mut now = screen.screen();
    loop {
        for (seen, row) in seen.iter_mut().zip(&wanted) {
            *seen |= now.contains(row.as_str());
        }
        if seen.iter().all(|&s| s) {
            break;
        }
        // A screen that no longer changes is the pane's last line.
        screen.keys("Down");
        let (moved, next) = screen.wait_for(Duration::from_secs(2), |s| s != now);
        if !moved {
            break;
        }
        now = next;
    }
    assert_eq!(
        seen,
        [true, true],
        "rows {wanted:?} not in the pane; last screen:\n{now}"
    );
    screen.keys("q");
    screen.assert_clean_exit();
    assert_no_programs_left();
}

/// Where each column of the contention pane ends (character positions on the line): the
/// `operation` column's start, then the end of each right-aligned figure.
fn column_ends(line: &str) -> Vec<usize> {
    let chars: Vec<char> = line.chars().collect();
    let mut ends = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_whitespace() || chars[i] == '│' {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && !chars[i].is_whitespace() && chars[i] != '│' {
            i += 1;
        }
        ends.push((start, i));
    }
    // The lock, then the operation (its start), then each figure (its end).
    ends.iter()
        .skip(1)
        .enumerate()
        .map(|(n, &(start, end))| if n == 0 { start } else { end })
        .collect()
}

#[test]
fn a_long_lock_name_keeps_every_figure_in_its_column() {
    require_root();
    let _guard = kernel_lock();
    // Loopback UDP: its waits are on the socket queue's lock, named after its 26-character
    // caller `__udp_enqueue_schedule_skb`, cut to the lock column's 24.
    let screen = Screen::start_sized(
        "longlock",
        &format!("--interval 500ms {}", workload("udp-loopback -t 2 -d 20s")),
        140,
        40,
    );
    let cut = "__udp_enqueue_schedule_…";
    assert_eq!(cut.chars().count(), 24);
    let (found, text) = screen.wait_for(Duration::from_secs(20), |s| s.contains(cut));
    assert!(found, "no row of {cut}:\n{text}");
    let header = text
        .lines()
        .find(|l| l.contains("operation") && l.contains("of lock"))
        .unwrap_or_else(|| panic!("no contention header:\n{text}"));
    // "of lock" is one column: its end is the share's.
    let mut want = column_ends(&header.replace("of lock", "of_lock"));
    want.truncate(8);
    let rows: Vec<&str> = text.lines().filter(|l| l.contains(cut)).collect();
    assert!(!rows.is_empty());
    for row in rows {
        // Each column of the row starts (the operation) or ends (each figure, right-aligned;
        // a figure may hold a space: `296 ns`) where the header's does.
        let chars: Vec<char> = row.chars().collect();
        let blank = |i: usize| chars.get(i).is_none_or(|c| c.is_whitespace() || *c == '│');
        let (operation, figures) = want.split_first().unwrap();
        let aligned = !blank(*operation)
            && blank(operation - 1)
            && figures.iter().all(|&end| !blank(end - 1) && blank(end));
        assert!(aligned, "columns moved: {want:?}\n{header}\n{row}");
    }
    screen.keys("q");
    screen.assert_clean_exit();
    assert_no_programs_left();
}
