//! Whole user stacks without frame pointers: a program of the tests' own, built as
//! distributions build (`-O2 -fomit-frame-pointer`), contends on `file_lock` through a known
//! chain of ten functions; its waits and its on-CPU samples must carry the whole chain, in
//! order, down to the C library's thread start. Run as root.

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
