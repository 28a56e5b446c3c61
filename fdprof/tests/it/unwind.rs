//! Whole user stacks without frame pointers: a program of the tests' own, built as
//! distributions build (`-O2 -fomit-frame-pointer`), contends on `file_lock` through a known
//! chain of ten functions; its waits and its on-CPU samples must carry the whole chain, in
//! order, down to the C library's thread start. And Debian's haproxy, as Debian built it,
//! walks as whole as `perf record --call-graph dwarf` walks it on the same load; the daemon's
//! endpoints serve the same whole stacks. Run as root.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    assert_no_programs_left, cc, fdprof, kernel_lock, read_json, require_root, run, tmp,
};

/// The chain as a stack lists it, innermost first, from the C library's wrapper out.
const CHAIN: [&str; 12] = [
    "leaf", "chain_10", "chain_09", "chain_08", "chain_07", "chain_06", "chain_05", "chain_04",
    "chain_03", "chain_02", "chain_01", "worker",
];

/// Whether `user` (innermost first) carries the whole chain in order and then ends in the C
/// library (its thread start, `start_thread`/`clone3`: named once its debug file is read),
/// with no truncation marker.
fn whole(user: &[Value]) -> bool {
    let names: Vec<&str> = user
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    let Some(at) = names.iter().position(|&n| n == "leaf") else {
        return false;
    };
    let outward = &user[at + CHAIN.len()..];
    names[at..].starts_with(&CHAIN)
        && !outward.is_empty()
        && outward.iter().all(|f| {
            f["module"]
                .as_str()
                .is_some_and(|m| m.starts_with("libc.so"))
        })
}

/// Share of `items` (weighted by `count`) whose user stack is whole, and the mean user frames.
fn share_whole<'a>(items: impl Iterator<Item = &'a Value>) -> (f64, f64, u64) {
    let (mut all, mut good, mut frames) = (0u64, 0u64, 0u64);
    for s in items {
        let n = s["count"].as_u64().unwrap();
        let user = s["user_stack"].as_array().unwrap();
        all += n;
        frames += n * user.len() as u64;
        if whole(user) {
            good += n;
        }
    }
    assert!(all > 0, "nothing to judge");
    (good as f64 / all as f64, frames as f64 / all as f64, all)
}

#[test]
fn waits_and_samples_carry_the_whole_chain_without_frame_pointers() {
    require_root();
    let _k = kernel_lock();
    let bin = tmp("chain");
    cc("chain.c", &bin, &["-fomit-frame-pointer", "-pthread"]);
    let out = tmp("chain.data");
    let rec = run(fdprof()
        .args(["record", "--lock-only", "--cpu", "--freq", "999", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&bin)
        .arg("3"));
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    let rec = read_json(&out);
    let sites = rec["contention"].as_array().unwrap();
    let (waits, wait_frames, n) = share_whole(sites.iter().filter(|s| s["lock"] == "file_lock"));
    eprintln!("file_lock waits: {waits:.3} of {n} whole, {wait_frames:.1} user frames a wait");
    assert!(
        waits >= 0.95,
        "{waits:.3} of file_lock waits carry the whole chain"
    );
    let samples = rec["cpu"]["samples"].as_array().unwrap();
    let (cpu, cpu_frames, n) = share_whole(samples.iter());
    eprintln!("on-CPU samples: {cpu:.3} of {n} whole, {cpu_frames:.1} user frames a sample");
    assert!(
        cpu >= 0.90,
        "{cpu:.3} of on-CPU samples carry the whole chain"
    );
    // The walks are counted, and a whole one is counted as such.
    let walks = &rec["stack_walks"]["user"];
    assert!(walks["whole"].as_u64().unwrap() > 0, "{walks}");
    assert_no_programs_left();
}

/// Debian's haproxy (2 threads) on a free loopback port, answering every request itself; ended
/// (by its pid: our child) when dropped.
struct Haproxy {
    child: std::process::Child,
    addr: std::net::SocketAddr,
}

impl Haproxy {
    fn start(dir: &std::path::Path) -> Self {
        let addr = crate::common::prometheus::free_loopback_addr();
        let config = dir.with_extension("cfg");
        std::fs::write(
            &config,
            format!(
                "global\n  nbthread 2\n  maxconn 1000\ndefaults\n  mode http\n  timeout client 5s\n  \
                 timeout connect 5s\n  timeout server 5s\nfrontend f\n  bind {addr}\n  \
                 http-request return status 200 content-type text/plain string ok\n"
            ),
        )
        .unwrap();
        let child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .spawn()
            .expect("cannot run haproxy (`cargo xtask bootstrap` installs it)");
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(addr).is_err() {
            assert!(
                Instant::now() < deadline,
                "haproxy did not listen on {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, addr }
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a user stack (its frames' modules, innermost first) is whole: a frame of the C
/// library or the loader lies outward of one of the program's (the walk reached the thread's
/// start or main's caller).
fn whole_by_module<'a>(modules: impl IntoIterator<Item = Option<&'a str>>, program: &str) -> bool {
    let mut inside = false;
    for m in modules.into_iter().flatten() {
        if m == program {
            inside = true;
        } else if inside && (m.starts_with("libc.so") || m.starts_with("ld-linux")) {
            return true;
        }
    }
    false
}

/// (samples, share whole, mean named frames of `program`) of `perf script --no-inline`.
fn perf_stacks(data: &std::path::Path, program: &str) -> (u64, f64, f64) {
    let out = run(Command::new("perf")
        .args(["script", "--no-inline", "-F", "ip,sym,dso", "-i"])
        .arg(data));
    assert!(out.status.success(), "perf script failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let (mut n, mut whole, mut named) = (0u64, 0u64, 0u64);
    for sample in text.split("\n\n").filter(|s| !s.trim().is_empty()) {
        n += 1;
        // `ADDR SYMBOL (DSO)`, innermost first; the kernel's frames are left out.
        let frames: Vec<(&str, &str)> = sample
            .lines()
            .filter_map(|l| {
                let (rest, dso) = l.trim().strip_suffix(')')?.rsplit_once(" (")?;
                let sym = rest.split_once(' ').map_or("", |(_, s)| s);
                let dso = dso.rsplit('/').next()?;
                (!dso.contains("kernel.kallsyms")).then_some((sym, dso))
            })
            .collect();
        named += frames
            .iter()
            .filter(|(sym, dso)| *dso == program && !sym.starts_with("[unknown]"))
            .count() as u64;
        if whole_by_module(frames.iter().map(|f| Some(f.1)), program) {
            whole += 1;
        }
    }
    assert!(n >= 100, "too few perf samples to judge: {n}");
    (n, whole as f64 / n as f64, named as f64 / n as f64)
}

#[test]
fn haproxy_on_cpu_stacks_are_as_whole_as_perf_dwarf() {
    require_root();
    let _k = kernel_lock();
    let haproxy = Haproxy::start(&tmp("haproxy"));
    let pid = haproxy.child.id().to_string();
    let mut ab = Command::new("ab")
        .args(["-q", "-n", "10000000", "-c", "8", "-t", "12"])
        .arg(format!("http://{}/", haproxy.addr))
        .stdout(Stdio::null())
        .spawn()
        .expect("cannot run ab");
    std::thread::sleep(Duration::from_millis(500));
    // Both on the same load at once.
    let (ours, theirs) = (tmp("haproxy.data"), tmp("perf.data"));
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "--call-graph",
            "dwarf",
            "-F",
            "999",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&theirs)
        .args(["--", "sleep", "4"])
        .spawn()
        .expect("cannot run perf (`cargo xtask bootstrap` installs linux-perf)");
    let rec = run(fdprof()
        .args([
            "record",
            "--lock-only",
            "--cpu",
            "--freq",
            "999",
            "-d",
            "4s",
            "-p",
            &pid,
            "-o",
        ])
        .arg(&ours));
    assert!(
        rec.status.success(),
        "{}",
        String::from_utf8_lossy(&rec.stderr)
    );
    assert!(perf.wait().unwrap().success(), "perf record failed");
    let _ = ab.kill();
    let _ = ab.wait();
    drop(haproxy);

    let rec = read_json(&ours);
    let (mut n, mut whole, mut named) = (0u64, 0u64, 0u64);
    for s in rec["cpu"]["samples"].as_array().unwrap() {
        let count = s["count"].as_u64().unwrap();
        let user = s["user_stack"].as_array().unwrap();
        n += count;
        let modules = user.iter().map(|f| f["module"].as_str());
        if whole_by_module(modules, "haproxy") {
            whole += count;
        }
        let ours = |f: &&Value| f["module"] == "haproxy" && f["function"] != "[unknown]";
        named += count * user.iter().filter(ours).count() as u64;
    }
    assert!(n >= 100, "too few samples to judge: {n}");
    let (whole, named) = (whole as f64 / n as f64, named as f64 / n as f64);
    let (perf_n, perf_whole, perf_named) = perf_stacks(&theirs, "haproxy");
    eprintln!(
        "haproxy on CPU: fdprof {n} samples, {whole:.3} whole, {named:.2} named haproxy frames \
         a sample; perf --call-graph dwarf {perf_n} samples, {perf_whole:.3} whole, \
         {perf_named:.2}; walks {}",
        rec["stack_walks"]["user"]
    );
    assert!(
        whole >= 0.9 * perf_whole,
        "whole: fdprof {whole:.3}, perf {perf_whole:.3}"
    );
    assert!(
        named >= perf_named - 0.5,
        "named: fdprof {named:.2}, perf {perf_named:.2}"
    );
    assert_no_programs_left();
}

/// The daemon's endpoints carry the same whole stacks: `/report.json`'s `file_lock` stacks and
/// the on-CPU `/flamegraph.svg`.
#[test]
fn the_daemon_serves_the_whole_chain() {
    use crate::common::daemon::{Daemon, poll};
    require_root();
    let _k = kernel_lock();
    let bin = tmp("fdpd-chain");
    cc("chain.c", &bin, &["-fomit-frame-pointer", "-pthread"]);
    let mut chain = Command::new(&bin).arg("20").spawn().unwrap();
    let pid = chain.id().to_string();
    let daemon = Daemon::start(&[
        "--tier",
        "full",
        "--pid",
        &pid,
        "--cpu",
        "--freq",
        "199",
        "--interval",
        "250ms",
    ]);
    daemon.wait_line("INFO", &format!("profiling pid {pid}"));
    let path = "/report.json?seconds=30";
    let judged = poll(Duration::from_secs(15), || {
        let (code, body) = daemon.get(path);
        if code == 503 {
            return Err(body); // no interval has ended yet
        }
        assert_eq!(code, 200, "{path}: {body}");
        let report: Value = serde_json::from_str(&body).unwrap();
        let stacks = report["top_stacks"].as_array().cloned().unwrap_or_default();
        let file_lock: Vec<&Value> = stacks.iter().filter(|s| s["lock"] == "file_lock").collect();
        let count = |s: &&Value| s["count"].as_u64().unwrap_or(0);
        let all: u64 = file_lock.iter().map(count).sum();
        let good: u64 = file_lock
            .iter()
            .filter(|s| whole(s["user_stack"].as_array().unwrap()))
            .map(count)
            .sum();
        match all >= 100 {
            true => Ok(good as f64 / all as f64),
            false => Err(format!("{all} file_lock waits so far")),
        }
    });
    let share = judged.unwrap_or_else(|e| panic!("{path}: {e}"));
    eprintln!("daemon: {share:.3} of the file_lock waits carry the whole chain");
    assert!(share >= 0.95, "{share:.3}");
    let (code, svg) = daemon.get("/flamegraph.svg?seconds=30&cpu=1");
    assert_eq!(code, 200, "{svg}");
    for function in ["worker", "chain_01", "chain_10", "leaf"] {
        assert!(
            svg.contains(function),
            "no {function} in the on-CPU flamegraph"
        );
    }
    let _ = chain.kill();
    let _ = chain.wait();
    drop(daemon);
    assert_no_programs_left();
}
