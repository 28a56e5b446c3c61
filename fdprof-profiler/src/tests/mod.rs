//! Helpers of the tests that need root: those that load fdprof's programs into the running
//! kernel (`collect/events_tests.rs`, `symbolize/kernel_tests.rs`) one at a time and leave none
//! loaded, and a load generator to profile ([`workload`]). fdprof's integration tests
//! (`fdprof/tests/it/common`) have their own of each, for the binary's tests.

pub(crate) mod workload;

use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

static KERNEL: Mutex<()> = Mutex::new(());

/// Held by a test that loads BPF programs throughout, so leak checks see only its own.
pub(crate) fn kernel_lock() -> MutexGuard<'static, ()> {
    KERNEL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Panics with a clear message unless running as root.
pub(crate) fn require_root() {
    // SAFETY: no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "this test loads BPF programs into the running kernel or reads its real addresses: run \
         the tests as root"
    );
}

/// `(tag, name)` of every loaded program called fdprof_*, as the kernel reports them
/// (`bpftool prog show`, not kallsyms).
pub(crate) fn loaded_fdprof_program_tags() -> Vec<(String, String)> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .expect("cannot run bpftool");
    assert!(out.status.success(), "bpftool prog show failed");
    let progs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    progs
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| Some((p["tag"].as_str()?.into(), p["name"].as_str()?.into())))
        .filter(|(_, n): &(String, String)| n.starts_with("fdprof"))
        .collect()
}

/// The kernel frees a program shortly after its last fd closes (deferred to RCU): allow a few
/// seconds.
pub(crate) fn assert_no_programs_left() {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = loaded_fdprof_program_tags();
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "fdprof programs still loaded: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
