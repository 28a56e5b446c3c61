//! Names for stripped binaries, as distributions and companies ship them: a program of the
//! tests' own with a known call chain, split and stripped, is named through its debug link,
//! a build-id tree under `--debug-dir`, its MiniDebugInfo and a real `debuginfod` (then its
//! cache, with the server gone); a server that never answers costs a recording at most the
//! wait and the daemon's `/healthz` nothing; frames left unnamed carry their build id and
//! file offset into the recording, `report --json`, speedscope and pprof. Run as root.

mod fixtures;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    assert_no_programs_left, fdprof, go_pprof, kernel_lock, read_json, require_root, run, tmp,
};
use fixtures::{Debuginfod, Silent, add_minidebuginfo, frames_in, named_share, split};

/// Waits named at least this often (the rest: waits the kernel caught before the process
/// mapped its binary, or whose copy was lost).
const NAMED: f64 = 0.9;

/// `fdprof record --lock-only -o OUT ARGS -- BIN 3`: the recording, fdprof's standard error
/// and how long it took.
fn record(bin: &Path, out: &Path, args: &[&str]) -> (Value, String, Duration) {
    let started = Instant::now();
    let rec = run(fdprof()
        .args(["record", "--lock-only", "-o"])
        .arg(out)
        .args(args)
        .arg("--")
        .arg(bin)
        .arg("3"));
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&rec.stderr).into_owned();
    assert!(rec.status.success(), "{stderr}");
    (read_json(out), stderr, took)
}

/// Asserts that at least [`NAMED`] of `rec`'s `file_lock` waits name the whole chain, saying
/// how many did (`how`: where the names came from); returns the names note.
fn assert_named(rec: &Value, how: &str) -> String {
    let (named, n) = named_share(rec);
    let note = names_note(rec);
    eprintln!("{how}: {named:.3} of {n} file_lock waits name the chain; {note}");
    assert!(named >= NAMED, "{named:.3} named");
    note
}

/// The recording's note on where names came from.
fn names_note(rec: &Value) -> String {
    rec["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|n| n.starts_with("user frames' names"))
        .unwrap_or_else(|| panic!("no names note in {}", rec["notes"]))
        .to_string()
}

/// Every frame of `module` is unnamed and carries the build id and a file offset.
fn unnamed_with_build_id(frames: &[&Value], build_id: &str) {
    assert!(!frames.is_empty(), "no frames of the binary");
    for f in frames {
        // speedscope's frames have a `name`.
        let name = f.get("function").unwrap_or(&f["name"]);
        assert_eq!(name, "[unknown]", "{f}");
        assert_eq!(f["build_id"], build_id, "{f}");
        assert!(f["file_offset"].as_u64().is_some(), "{f}");
    }
}

/// Named through its `.gnu_debuglink` in the binary's `.debug/` folder, once the file there
/// has the CRC the link records; before that (another build's debug file under the name)
/// its frames stay unnamed, with what names them later in every export.
#[test]
fn a_debug_link_names_a_stripped_binary_when_its_crc_matches() {
    require_root();
    let _k = kernel_lock();
    let dir = tmp("link");
    let bin = split(&dir.join("bin"), "chain-link", true);
    let other = split(&dir.join("other"), "chain-link", false);
    let dot_debug = dir.join("bin/.debug");
    std::fs::create_dir_all(&dot_debug).unwrap();
    let linked = dot_debug.join("chain-link.debug");
    std::fs::rename(&other.debug, &linked).unwrap();
    // Not beside the binary either, where the link is looked for first.
    let kept = dir.join("kept.debug");
    std::fs::rename(&bin.debug, &kept).unwrap();
    let out = tmp("link-wrong.data");
    let (rec, _, _) = record(&bin.stripped, &out, &[]);
    unnamed_with_build_id(&frames_in(&rec, "chain-link"), &bin.build_id);
    // The exports carry them too.
    let report = run(fdprof().args(["report", "--json"]).arg(&out));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let top: Vec<&Value> = report["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["user_stack"].as_array().unwrap())
        .filter(|f| f["module"] == "chain-link")
        .collect();
    unnamed_with_build_id(&top, &bin.build_id);
    let speedscope = tmp("link-wrong.speedscope.json");
    let exported = run(fdprof()
        .args(["export", "--format", "speedscope", "-o"])
        .arg(&speedscope)
        .arg(&out));
    assert!(exported.status.success());
    let doc = read_json(&speedscope);
    let shared: Vec<&Value> = doc["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["file"] == "chain-link")
        .collect();
    unnamed_with_build_id(&shared, &bin.build_id);

    std::fs::rename(&kept, &linked).unwrap();
    let (rec, _, _) = record(&bin.stripped, &tmp("link.data"), &[]);
    let note = assert_named(&rec, "debug link");
    assert!(note.contains("by debug link"), "{note}");
    assert_no_programs_left();
}

/// Named through `--debug-dir DIR`'s build-id tree (`DIR/.build-id/ab/cdef….debug`), with no
/// debug link to go by; and through MiniDebugInfo, with nothing but the binary.
#[test]
fn a_build_id_tree_and_minidebuginfo_name_a_stripped_binary() {
    require_root();
    let _k = kernel_lock();
    let bin = split(&tmp("bid"), "chain-bid", false);
    let store = tmp("store");
    let (head, rest) = bin.build_id.split_at(2);
    let tree = store.join(".build-id").join(head);
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::rename(&bin.debug, tree.join(format!("{rest}.debug"))).unwrap();
    let (rec, _, _) = record(
        &bin.stripped,
        &tmp("bid.data"),
        &["--debug-dir", store.to_str().unwrap()],
    );
    let note = assert_named(&rec, "build-id tree");
    assert!(note.contains("by build-id directory"), "{note}");

    let mini = split(&tmp("mini"), "chain-mini", false);
    add_minidebuginfo(&mini);
    std::fs::remove_file(&mini.debug).unwrap();
    let (rec, _, _) = record(&mini.stripped, &tmp("mini.data"), &[]);
    let note = assert_named(&rec, "MiniDebugInfo");
    assert!(note.contains("by MiniDebugInfo"), "{note}");
    assert_no_programs_left();
}

/// Fetched from elfutils' own debuginfod on loopback, then named from the cache with the
/// server gone; the pprof export names the stripped binary's build id on its mapping.
#[test]
fn debuginfod_names_a_stripped_binary_and_its_cache_does_once_it_is_gone() {
    require_root();
    let _k = kernel_lock();
    let bin = split(&tmp("fetched/bin"), "chain-dbgd", false);
    let served = tmp("served");
    std::fs::create_dir_all(&served).unwrap();
    std::fs::rename(&bin.debug, served.join("chain-dbgd.debug")).unwrap();
    let cache = tmp("cache");
    let cache_arg = ["--debuginfod-cache", cache.to_str().unwrap()];
    let server = Debuginfod::start(&served, &bin.build_id);
    let url = server.url();
    let args = [&["--debuginfod", url.as_str()][..], &cache_arg].concat();
    let out = tmp("fetched.data");
    let (rec, _, _) = record(&bin.stripped, &out, &args);
    let note = assert_named(&rec, "debuginfod");
    assert!(
        note.contains("1 by debuginfod") && note.contains("1 fetched"),
        "{note}"
    );
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&cache).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o700, "the cache is root's alone");

    let pprof = tmp("fetched.pb.gz");
    let exported = run(fdprof()
        .args(["export", "--format", "pprof", "-o"])
        .arg(&pprof)
        .arg(&out));
    assert!(exported.status.success());
    let raw = go_pprof(&["-raw"], &pprof);
    let mapping = raw
        .lines()
        .skip_while(|l| *l != "Mappings")
        .find(|l| l.contains("chain-dbgd"))
        .unwrap_or_else(|| panic!("no mapping of the binary:\n{raw}"));
    assert!(mapping.contains(&bin.build_id), "{mapping}");

    drop(server);
    let (rec, _, _) = record(&bin.stripped, &tmp("cached.data"), &args);
    let note = assert_named(&rec, "debuginfod's cache");
    assert!(
        note.contains("0 fetched") && note.contains("1 by debuginfod"),
        "{note}"
    );
    assert_no_programs_left();
}

/// A server that accepts and never answers: a recording waits the 10 s `--debuginfod-wait`
/// defaults to at most, then writes the frames unnamed with their build id; the daemon's
/// `/healthz` and intervals do not wait at all.
#[test]
fn a_silent_debuginfod_delays_a_recording_by_the_wait_at_most_and_the_daemon_not_at_all() {
    use crate::common::daemon::{Daemon, poll};
    require_root();
    let _k = kernel_lock();
    let silent = Silent::start();
    let bin = split(&tmp("silent"), "chain-silent", false);
    std::fs::remove_file(&bin.debug).unwrap();
    let url = silent.url();
    let cache = tmp("silent-cache");
    let args = [
        "--debuginfod",
        url.as_str(),
        "--debuginfod-cache",
        cache.to_str().unwrap(),
    ];
    let (rec, stderr, took) = record(&bin.stripped, &tmp("silent.data"), &args);
    eprintln!("a 3 s program recorded in {took:?} against a silent server");
    assert!(
        took < Duration::from_secs(3 + 10 + 10),
        "{took:?}:\n{stderr}"
    );
    unnamed_with_build_id(&frames_in(&rec, "chain-silent"), &bin.build_id);
    assert!(names_note(&rec).contains("still fetching when written"));

    let mut chain = Command::new(&bin.stripped).arg("20").spawn().unwrap();
    let pid = chain.id().to_string();
    let daemon_args = [&["--pid", pid.as_str(), "--interval", "250ms"][..], &args].concat();
    let daemon = Daemon::start(&daemon_args);
    daemon.wait_line("INFO", &format!("profiling pid {pid}"));
    let mut slowest = Duration::ZERO;
    for _ in 0..20 {
        let asked = Instant::now();
        let (code, body) = daemon.get("/healthz");
        slowest = slowest.max(asked.elapsed());
        assert_eq!(code, 200, "{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("/healthz: slowest answer {slowest:?} while debuginfod is silent");
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    let frames = poll(Duration::from_secs(15), || {
        let (code, body) = daemon.get("/report.json?seconds=30");
        if code == 503 {
            return Err(body);
        }
        let report: Value = serde_json::from_str(&body).unwrap();
        let frames: Vec<Value> = report["top_stacks"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|s| s["user_stack"].as_array().cloned().unwrap_or_default())
            .filter(|f| f["module"] == "chain-silent")
            .collect();
        match frames.is_empty() {
            true => Err("no frames of the binary yet".into()),
            false => Ok(frames),
        }
    })
    .unwrap_or_else(|e| panic!("/report.json: {e}"));
    unnamed_with_build_id(&frames.iter().collect::<Vec<_>>(), &bin.build_id);
    let _ = chain.kill();
    let _ = chain.wait();
    drop(daemon);
    drop(silent);
    assert_no_programs_left();
}

/// A bad source is one clear line before anything is attached or made: a missing
/// `--debug-dir`, a URL fdprof cannot fetch from, a cache path that is not a directory of
/// its own (nothing is written through it), a cache of no size.
#[test]
fn bad_debug_sources_are_one_line_errors() {
    require_root();
    let planted = tmp("planted-cache");
    let _ = std::fs::remove_file(&planted);
    std::os::unix::fs::symlink("/etc", &planted).unwrap();
    let cases: [&[&str]; 4] = [
        &["--debug-dir", "/nonexistent/debug"],
        &["--debuginfod", "ftp://127.0.0.1/"],
        &[
            "--debuginfod",
            "http://127.0.0.1:9",
            "--debuginfod-cache",
            planted.to_str().unwrap(),
        ],
        &[
            "--debuginfod",
            "http://127.0.0.1:9",
            "--debuginfod-cache-size",
            "0",
        ],
    ];
    for args in cases {
        let out = run(fdprof()
            .args(["record", "-o"])
            .arg(tmp("never.data"))
            .args(args)
            .args(["--", "true"]));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} taken");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!tmp("never.data").exists(), "{args:?} wrote a recording");
    }
    assert!(
        std::fs::symlink_metadata(&planted)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_no_programs_left();
}
