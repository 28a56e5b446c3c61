//! User stacks of real processes resolved after they exited, even when their binary was
//! deleted: names come back from the snapshot of their maps and the files mapped. Root
//! (`/proc/PID/map_files`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{UserSymbolizer, kernel::UNKNOWN};
use crate::tests::require_root;

const CHILD_ENV: &str = "FDPROF_SYMBOLIZE_TEST_CHILD";

/// Deliberately not tiny, so that addresses a few bytes in still belong to it.
#[inline(never)]
fn marker_function(n: u64) -> u64 {
    let mut x = n;
    for i in 0..n {
        x = x.wrapping_mul(31).wrapping_add(std::hint::black_box(i));
    }
    x
}

/// Not a test of its own: the body of the child process the user-stack tests start (this test
/// binary re-executed with [`CHILD_ENV`]). Prints addresses, then waits to be killed.
#[test]
fn helper_child_process() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let marker = marker_function as *const () as usize;
    let nanosleep = libc::nanosleep as *const () as usize;
    println!("MARKER {marker:x}");
    println!("NANOSLEEP {nanosleep:x}");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        std::hint::black_box(marker_function(std::hint::black_box(3)));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The child we started; killed (by its own pid) if the test fails before it does.
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct Started {
    child: ChildGuard,
    marker: u64,
    nanosleep: u64,
}

fn start_child(exe: &Path) -> Started {
    let spawn = || {
        Command::new(exe)
            .args([
                "--exact",
                "symbolize::user_tests::helper_child_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
    };
    // A freshly written copy can be briefly "text file busy" while a concurrent test forks.
    let mut tries = 0;
    let child = loop {
        match spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            r => break r.unwrap_or_else(|e| panic!("cannot start {}: {e}", exe.display())),
        }
    };
    let mut child = ChildGuard(child);
    let stdout = child.0.stdout.take().unwrap();
    let (mut marker, mut nanosleep) = (None, None);
    for line in BufReader::new(stdout).lines() {
        // libtest prints "test helper_child_process ... " before the child's own output.
        let line = line.unwrap();
        if let Some((_, a)) = line.split_once("MARKER ") {
            marker = Some(u64::from_str_radix(a.trim(), 16).unwrap());
        } else if let Some((_, a)) = line.split_once("NANOSLEEP ") {
            nanosleep = Some(u64::from_str_radix(a.trim(), 16).unwrap());
            break; // printed last
        }
    }
    Started {
        child,
        marker: marker.expect("child printed no MARKER line"),
        nanosleep: nanosleep.expect("child printed no NANOSLEEP line"),
    }
}

/// Snapshot, kill the child, then resolve: names must still come back from the mapped files.
/// `before_snapshot` runs while the child lives, before its maps are read.
fn check_after_exit(exe: &Path, before_snapshot: impl FnOnce()) {
    require_root();
    let Started {
        mut child,
        marker,
        nanosleep,
    } = start_child(exe);
    let pid = child.0.id();

    before_snapshot();
    let mut sym = UserSymbolizer::new();
    assert!(sym.snapshot_maps(pid), "cannot read /proc/{pid}/maps");
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "child {pid} still there"
    );
    assert!(!sym.snapshot_maps(pid), "process is gone");
    assert!(sym.has_snapshot(pid), "last good snapshot kept");

    let frames = sym.resolve(pid, &[marker + 3, nanosleep, 0x10], false);
    eprintln!("{exe:?} after exit: {frames:?}");
    let exe_name = exe.file_name().unwrap().to_str().unwrap();

    // Rust symbol of the test binary, demangled, without the hash.
    assert_eq!(
        frames[0].function, "fdprof_profiler::symbolize::user_tests::marker_function",
        "{frames:?}"
    );
    assert_eq!(frames[0].offset, 3);
    assert_eq!(frames[0].module.as_deref(), Some(exe_name));

    // C symbol of the shared libc (glibc exports it as nanosleep / __nanosleep).
    assert!(frames[1].function.ends_with("nanosleep"), "{frames:?}");
    assert_eq!(frames[1].offset, 0);
    let libc_module = frames[1].module.as_deref().unwrap_or_default();
    assert!(libc_module.starts_with("libc"), "{frames:?}");

    assert_eq!(frames[2].function, UNKNOWN);
    assert_eq!(frames[2].module, None);
    assert!(frames.iter().all(|f| f.address.is_none()), "{frames:?}");

    let raw = sym.resolve(pid, &[marker], true);
    assert_eq!(raw[0].address, Some(marker));
    assert_eq!(
        raw[0].function,
        "fdprof_profiler::symbolize::user_tests::marker_function"
    );
    assert_eq!(raw[0].offset, 0);
}

#[test]
fn user_stacks_resolve_after_the_process_exited() {
    let exe = std::env::current_exe().unwrap();
    check_after_exit(&exe, || {});
}

/// The binary is unlinked while it runs, before the snapshot: only the mapping itself
/// (`/proc/PID/map_files`) still leads to it, and it is gone for good once the child is killed.
#[test]
fn user_stacks_resolve_after_the_binary_was_deleted() {
    let dir = std::env::temp_dir().join(format!("fdprof-symbolize-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let copy: PathBuf = dir.join("symbolize-child");
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    let remove = || {
        std::fs::remove_file(&copy).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    };
    check_after_exit(&copy, remove);
    assert!(!copy.exists());
}
