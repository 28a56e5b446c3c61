//! The load generator the tests profile, with the ground truth of what it did. `fdprof
//! workload` is the binary's command (a crate above this one), so this test binary runs
//! `fdprof_workload` itself: started again as [`generator`], given the command's arguments in
//! [`ARGS_ENV`].

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdout, Command, Stdio};

use fdprof_workload::{Options, Plan, Scenario};
use serde_json::Value;

/// `fdprof workload`'s arguments for the generator, space-separated.
const ARGS_ENV: &str = "FDPROF_TEST_WORKLOAD";

/// The test that is the generator, by its path.
const GENERATOR: &str = "tests::workload::generator";

/// Not a test of its own: the generator's process (this binary run again with [`ARGS_ENV`]),
/// ignored unless the tests that profile it start it.
#[test]
#[ignore = "the load generator the profiling tests start"]
fn generator() {
    let args = std::env::var(ARGS_ENV).expect("started by the tests that profile it");
    let args: Vec<&str> = args.split(' ').collect();
    fdprof_workload::run(&options(&args)).unwrap();
}

/// What `fdprof workload ARGS --json` runs, for the flags these tests give.
fn options(args: &[&str]) -> Options {
    let scenario = Scenario::ALL
        .into_iter()
        .find(|s| s.name() == args[0])
        .unwrap_or_else(|| panic!("{}: no such scenario", args[0]));
    let mut opts = Options {
        scenario,
        json: true,
        ..Options::default()
    };
    let mut words = args[1..].iter();
    while let Some(&flag) = words.next() {
        let mut value = || {
            *words
                .next()
                .unwrap_or_else(|| panic!("{flag} without a value"))
        };
        match flag {
            "-t" => opts.threads = value().parse().unwrap(),
            "-n" => opts.fds = Some(value().parse().unwrap()),
            "--ops" => opts.plan = Plan::Ops(value().parse().unwrap()),
            "-d" => opts.plan = Plan::Timed(crate::duration::parse_run_length(value()).unwrap()),
            "--wait-signal" => opts.wait_signal = true,
            _ => panic!("{flag}: not a flag these tests give"),
        }
    }
    opts
}

/// The command line that runs the generator with `args`, for [`crate::collect::launch`]: it
/// passes on this process's environment, so `env` sets the arguments.
pub(crate) fn command(args: &[&str]) -> Vec<String> {
    let exe = std::env::current_exe().unwrap();
    let mut command = vec![
        "env".to_string(),
        format!("{ARGS_ENV}={}", args.join(" ")),
        exe.display().to_string(),
    ];
    command.extend(harness_args());
    command
}

/// Runs the test [`GENERATOR`] alone, its output (the generator's) uncaptured, the harness's
/// own a line before and after.
fn harness_args() -> Vec<String> {
    ["--exact", GENERATOR, "--ignored", "--nocapture", "-q"]
        .map(String::from)
        .to_vec()
}

fn generator_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(harness_args()).env(ARGS_ENV, args.join(" "));
    cmd
}

/// The generator's report (`--json`): its one JSON line among the harness's.
fn report(stdout: &str) -> Value {
    let line = stdout.lines().rfind(|l| l.starts_with('{'));
    serde_json::from_str(line.unwrap_or_else(|| panic!("no report in {stdout:?}"))).unwrap()
}

/// `fdprof workload ARGS --json` run to its end: its report.
pub(crate) fn run(args: &[&str]) -> Value {
    let out = generator_command(args).output().unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "workload {args:?} failed: {stdout}");
    report(&stdout)
}

/// A generator started with `--wait-signal`, set up and waiting: its pid.
pub(crate) struct Waiting {
    child: Child,
    stdout: BufReader<ChildStdout>,
    pub(crate) pid: u32,
}

/// Starts `fdprof workload ARGS --json --wait-signal` and waits for its ready line.
pub(crate) fn start(args: &[&str]) -> Waiting {
    let mut cmd = generator_command(&[args, &["--wait-signal"]].concat());
    cmd.stdout(Stdio::piped());
    // The generator blocks SIGUSR1 in its own thread and waits for it there; the harness's main
    // thread must block it too, or the signal would end the process. Masks pass on through
    // exec to the threads created after.
    // SAFETY: the closure only calls async-signal-safe functions.
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR1);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with('{') {
        line.clear();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "no ready line");
    }
    let ready: Value = serde_json::from_str(&line).expect("ready line");
    assert_eq!(ready["event"], "ready");
    let pid = ready["pid"].as_u64().unwrap() as u32;
    assert_eq!(pid, child.id());
    Waiting { child, stdout, pid }
}

impl Waiting {
    /// Starts the measured phase.
    pub(crate) fn go(&self) {
        // SAFETY: signalling the child this test started.
        unsafe { libc::kill(self.pid as i32, libc::SIGUSR1) };
    }

    /// Waits for the end: the generator's report.
    pub(crate) fn finish(mut self) -> Value {
        let mut out = String::new();
        self.stdout.read_to_string(&mut out).unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "workload failed: {out}");
        report(&out)
    }
}

impl Drop for Waiting {
    /// A test that failed before [`Waiting::finish`] leaves no generator waiting for its signal.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
