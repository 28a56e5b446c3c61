//! What runs inside the guest, in one place: the scenarios and modes, the `/init` generated from
//! them (template `xtask/vm/init.sh`), and the parser for the marked blocks the guest prints on
//! its serial console.

use std::collections::BTreeMap;

/// Probe modes `fdprof record --mode` takes, in the order they are tried.
pub(super) const MODES: &[&str] = &["fentry", "kprobe", "tracepoint"];

/// A ground-truth scenario: `fdprof workload ARGS` run under `fdprof record`.
pub(super) struct Scenario {
    pub name: &'static str,
    /// Arguments after `fdprof workload` (`--json` is added).
    pub workload: &'static [&'static str],
    /// Syscalls whose recorded count must equal the generator's expected count. The recording
    /// is attached with `-p` before the measured phase (`--wait-signal`), so it sees exactly
    /// that phase; syscalls not listed here must be recorded at least as often.
    pub exact: &'static [&'static str],
    /// The largest scan a correct profiler reports (`scan.bits.max`), when the scenario fixes it.
    pub scan_max: Option<u64>,
    /// Threads contending on one table: judged on waits and hold times, not on counts.
    pub contention: bool,
}

/// `holes`: fill N fds, then each op closes K and opens twice: the second open scans from K+1
/// up to N, so the longest scan is N-K-1 bits.
const HOLES_N: u64 = 300;
const HOLES_K: u64 = 3;

pub(super) const SCENARIOS: &[Scenario] = &[
    Scenario {
        name: "socket-close",
        workload: &["socket-close", "--ops", "2000"],
        exact: &["socket", "close"],
        scan_max: None,
        contention: false,
    },
    Scenario {
        name: "holes",
        workload: &["holes", "--ops", "200", "-n", "300"],
        exact: &["openat", "close"],
        scan_max: Some(HOLES_N - HOLES_K - 1),
        contention: false,
    },
    Scenario {
        name: "opensock",
        workload: &["opensock", "-t", "2", "-n", "1000", "-d", "4s"],
        exact: &[],
        scan_max: None,
        contention: true,
    },
];

/// How a traced scenario starts: attached with `-p` before its measured phase, or launched
/// (its exec in the trace).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Start {
    Attached,
    Launched,
}

/// A scenario recorded with `--trace` and replayed under the guest kernel's allocator: every
/// allocation replayed, none mismatched or ambiguous (one thread, or a shared table in a direct
/// mode, whose in-lock probes order it).
pub(super) struct Traced {
    pub name: &'static str,
    pub workload: &'static [&'static str],
    pub start: Start,
    /// The tables the replay must find: the target's, and one per forked process.
    pub tables: u64,
    /// Threads share the table: in tracepoint mode, allocations that overlap another
    /// thread's operation are ambiguous (counted, not mismatched); the direct modes order them.
    pub shared: bool,
}

pub(super) const TRACED: &[Traced] = &[
    Traced {
        name: "trace-holes",
        workload: &["holes", "--ops", "200", "-n", "300"],
        start: Start::Attached,
        tables: 1,
        shared: false,
    },
    Traced {
        name: "trace-dup2-worst",
        workload: &["dup2-worst", "--ops", "200", "-n", "300"],
        start: Start::Attached,
        tables: 1,
        shared: false,
    },
    Traced {
        name: "trace-launched",
        workload: &["socket-close", "--ops", "300"],
        start: Start::Launched,
        tables: 1,
        shared: false,
    },
    Traced {
        name: "trace-processes",
        workload: &["socket-close", "-t", "2", "--processes", "--ops", "300"],
        start: Start::Launched,
        tables: 3,
        shared: false,
    },
    Traced {
        name: "trace-shared",
        workload: &["socket-close", "-t", "2", "--ops", "1500"],
        start: Start::Attached,
        tables: 1,
        shared: true,
    },
];

/// The workload `top` and the daemon watch in every mode: its `socket` count is exact in each.
pub(super) const LIVE_WORKLOAD: &[&str] = &["socket-close", "--ops", "2000", "--json"];

/// The process name the daemon follows (`--comm`): the workload runs under it.
pub(super) const DAEMON_COMM: &str = "fdpd-vm";

pub(super) const DOCTOR_STEP: &str = "doctor";

pub(super) fn top_step(mode: &str) -> String {
    format!("top:{mode}:socket-close")
}

pub(super) fn daemon_step(mode: &str) -> String {
    format!("daemon:{mode}:socket-close")
}

pub(super) fn unwound_step(mode: &str) -> String {
    format!("unwound:{mode}")
}

pub(super) fn record_step(mode: &str, scenario: &str) -> String {
    format!("record:{mode}:{scenario}")
}

pub(super) fn report_step(mode: &str, scenario: &str) -> String {
    format!("report:{mode}:{scenario}")
}

pub(super) fn replay_step(mode: &str, scenario: &str) -> String {
    format!("replay:{mode}:{scenario}")
}

const TEMPLATE: &str = include_str!("../../vm/init.sh");

/// Single-quotes a word for the guest's shell.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=+".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The overhead benchmark's `/init`: each workload (name, arguments) bare and under
/// `fdprof record` in each mode, interleaved round by round (steps `bench:WORKLOAD:MODE:ROUND`,
/// `MODE` = `bare` for none).
pub(super) fn bench_script(modes: &[&str], rounds: usize, workloads: &[(&str, &[&str])]) -> String {
    let mut steps = Vec::new();
    for round in 1..=rounds {
        for (name, args) in workloads {
            let args: Vec<String> = args.iter().map(|w| quote(w)).collect();
            let args = args.join(" ");
            steps.push(format!(
                "step {} fdprof workload {args} --json",
                bench_step(name, "bare", round)
            ));
            for mode in modes {
                let step = bench_step(name, mode, round);
                steps.push(format!(
                    "step {step} fdprof record --mode {mode} -o /tmp/bench.data -- \
                     fdprof workload {args} --json"
                ));
                // What the programs themselves cost, to tell the bodies from the hooks.
                steps.push(format!(
                    "step {} fdprof report --json /tmp/bench.data",
                    cost_step(&step)
                ));
            }
        }
    }
    TEMPLATE.replace("@STEPS@", &steps.join("\n"))
}

pub(super) fn bench_step(workload: &str, mode: &str, round: usize) -> String {
    format!("bench:{workload}:{mode}:{round}")
}

/// The report step after the bench step `step`.
pub(super) fn cost_step(step: &str) -> String {
    format!("{step}:cost")
}

/// The guest's `/init`: doctor once, then every scenario in every requested mode.
pub(super) fn init_script(modes: &[&str]) -> String {
    let mut steps = vec![format!("step {DOCTOR_STEP} fdprof doctor --json")];
    for mode in modes {
        for s in SCENARIOS {
            let mut words = vec!["scenario", mode, s.name];
            words.extend_from_slice(s.workload);
            words.push("--json");
            let line: Vec<String> = words.iter().map(|w| quote(w)).collect();
            steps.push(line.join(" "));
        }
        for t in TRACED {
            let function = match t.start {
                Start::Attached => "traced",
                Start::Launched => "launched",
            };
            let mut words = vec![function, mode, t.name];
            words.extend_from_slice(t.workload);
            words.push("--json");
            let line: Vec<String> = words.iter().map(|w| quote(w)).collect();
            steps.push(line.join(" "));
        }
        let workload: Vec<String> = LIVE_WORKLOAD.iter().map(|w| quote(w)).collect();
        let workload = workload.join(" ");
        steps.push(format!("step {} unwound {mode}", unwound_step(mode)));
        steps.push(format!("step {} watched {mode} {workload}", top_step(mode)));
        steps.push(format!(
            "step {} served {mode} {DAEMON_COMM} {workload}",
            daemon_step(mode)
        ));
    }
    TEMPLATE.replace("@STEPS@", &steps.join("\n"))
}

/// One step's results as the guest printed them.
#[derive(Debug, Default, Clone)]
pub(super) struct StepResult {
    pub stdout: String,
    pub stderr: String,
    pub rc: i32,
    /// Guest time the step took (from `/proc/uptime`).
    pub secs: f64,
}

/// Everything read back from one boot.
#[derive(Debug, Default)]
pub(super) struct GuestOutput {
    pub steps: BTreeMap<String, StepResult>,
    /// Guest uptime when `/init` started, and its kernel release.
    pub init_uptime: Option<f64>,
    pub release: Option<String>,
    /// Guest uptime when all steps were done.
    pub done_uptime: Option<f64>,
}

pub(super) const MARK: &str = "@@fdprof-vm ";

fn field<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    words
        .iter()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// A marker line, split into words after the mark.
pub(super) fn marker(line: &str) -> Option<Vec<&str>> {
    let at = line.find(MARK)?;
    Some(line[at + MARK.len()..].split_whitespace().collect())
}

/// Parses the serial console's lines (kernel lines outside blocks are skipped).
pub(super) fn parse(lines: &[String]) -> GuestOutput {
    let mut out = GuestOutput::default();
    // The step being read and which stream: (id, is_stderr, stdout, stderr).
    let mut current: Option<(String, bool, String, String)> = None;
    for line in lines {
        let Some(words) = marker(line) else {
            if let Some((_, is_err, stdout, stderr)) = current.as_mut() {
                let buf = if *is_err { stderr } else { stdout };
                buf.push_str(line);
                buf.push('\n');
            }
            continue;
        };
        match words.as_slice() {
            ["init", rest @ ..] => {
                out.init_uptime = field(rest, "uptime").and_then(|v| v.parse().ok());
                out.release = field(rest, "release").map(str::to_string);
            }
            ["done", rest @ ..] => {
                out.done_uptime = field(rest, "uptime").and_then(|v| v.parse().ok());
            }
            ["begin", id, stream] => match current.as_mut() {
                Some((cur, is_err, _, _)) if cur == id => *is_err = *stream == "stderr",
                _ => {
                    current = Some((
                        id.to_string(),
                        *stream == "stderr",
                        String::new(),
                        String::new(),
                    ))
                }
            },
            ["end", id, rest @ ..] => {
                let (stdout, stderr) = match current.take() {
                    Some((cur, _, stdout, stderr)) if cur == *id => (stdout, stderr),
                    _ => Default::default(),
                };
                let num = |k| field(rest, k).and_then(|v| v.parse::<f64>().ok());
                out.steps.insert(
                    id.to_string(),
                    StepResult {
                        stdout: stdout.trim().to_string(),
                        stderr: stderr.trim().to_string(),
                        rc: field(rest, "rc").and_then(|v| v.parse().ok()).unwrap_or(-1),
                        secs: num("end").zip(num("start")).map_or(0.0, |(e, s)| e - s),
                    },
                );
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_lists_every_scenario_per_mode() {
        let script = init_script(&["tracepoint"]);
        assert!(!script.contains("@STEPS@"));
        assert!(script.contains("step doctor fdprof doctor --json"));
        assert!(
            script.contains("scenario tracepoint socket-close socket-close --ops 2000 --json\n")
        );
        assert!(script.contains("scenario tracepoint holes holes --ops 200 -n 300 --json\n"));
        assert!(!script.contains("scenario fentry"));
        assert!(script.contains("traced tracepoint trace-holes holes --ops 200 -n 300 --json\n"));
        assert!(
            script.contains("launched tracepoint trace-launched socket-close --ops 300 --json\n")
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(quote("--ops"), "--ops");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn parses_blocks_between_kernel_noise() {
        let lines: Vec<String> = [
            "[    1.0] kernel noise",
            "@@fdprof-vm init uptime=4.20 release=6.1.0-57-amd64",
            "@@fdprof-vm begin doctor stdout",
            "{\"a\": 1}",
            "",
            "@@fdprof-vm begin doctor stderr",
            "",
            "@@fdprof-vm end doctor rc=0 start=4.50 end=7.00",
            "@@fdprof-vm begin record:fentry:holes stdout",
            "",
            "@@fdprof-vm begin record:fentry:holes stderr",
            "fdprof: error: not implemented yet",
            "",
            "@@fdprof-vm end record:fentry:holes rc=2 start=7.00 end=7.25",
            "@@fdprof-vm done uptime=9.00",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let out = parse(&lines);
        assert_eq!(out.init_uptime, Some(4.2));
        assert_eq!(out.release.as_deref(), Some("6.1.0-57-amd64"));
        assert_eq!(out.done_uptime, Some(9.0));
        let doctor = &out.steps["doctor"];
        assert_eq!((doctor.stdout.as_str(), doctor.rc), ("{\"a\": 1}", 0));
        assert!((doctor.secs - 2.5).abs() < 1e-9);
        let rec = &out.steps["record:fentry:holes"];
        assert_eq!(rec.rc, 2);
        assert_eq!(rec.stdout, "");
        assert_eq!(rec.stderr, "fdprof: error: not implemented yet");
    }
}
