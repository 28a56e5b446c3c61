//! `fdprof replay --synthetic`: every pattern replays under every POSIX model with no mismatch
//! (the generator's fds are the lowest free ones, as the kernel's), the seed figure of Linus'
//! loop holds (the linear scan reads tens of times more words than the full-words bitmap), and
//! bad arguments are one line.

use crate::common::{fdprof, load_lock};
use serde_json::Value;

fn replay(args: &[&str]) -> Value {
    let out = fdprof()
        .args(["replay", "--json"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn every_pattern_replays_without_mismatch() {
    let _load = load_lock();
    for pattern in ["linus-loop", "opensock", "holes", "dup2-worst"] {
        let r = replay(&[
            "--synthetic",
            pattern,
            "--fds",
            "3000",
            "--ops",
            "5000",
            "--kernel",
            "6.1.0-18-amd64",
        ]);
        let models = r["models"].as_array().unwrap();
        let names: Vec<&str> = models.iter().map(|m| m["name"].as_str().unwrap()).collect();
        assert_eq!(
            names,
            ["mainline (fb61)", "linear", "fb613", "viro", "fastalloc"],
            "{pattern}"
        );
        for m in models {
            assert!(m["allocations"].as_u64().unwrap() >= 5000, "{pattern}: {m}");
            assert_eq!(m["alloc_failures"], 0, "{pattern}: {m}");
            if m["name"] != "fastalloc" {
                assert_eq!(m["model_mismatch"], 0, "{pattern}: {}", m["name"]);
            }
        }
    }
}

#[test]
fn linus_loop_linear_reads_tens_of_times_more_words_than_fb61() {
    let _load = load_lock();
    let r = replay(&[
        "--synthetic",
        "linus-loop",
        "--ops",
        "100000",
        "--model",
        "fb61",
        "--kernel",
        "4.3",
    ]);
    let models = r["models"].as_array().unwrap();
    assert_eq!(models[0]["name"], "mainline (linear)");
    let ratio = models[1]["vs_mainline"]["words"].as_f64().unwrap();
    // fb61 reads 1/64 of linear's words on a dense table, plus one open word each time.
    assert!(ratio > 1.0 / 80.0 && ratio < 1.0 / 40.0, "{ratio}");
}

#[test]
fn bad_arguments_are_one_line() {
    let _load = load_lock();
    for args in [
        &["--synthetic", "holes", "--fds", "0"][..],
        &["--synthetic", "holes", "--ops", "1000000000"],
        &["--synthetic", "holes", "--kernel", "banana"],
        &["--synthetic", "nope"],
    ] {
        let out = fdprof().arg("replay").args(args).output().unwrap();
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        if !args.contains(&"nope") {
            assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        }
    }
}
