//! Symbolization against the running kernel and real processes that exit before their stacks are
//! resolved. Needs root (real kallsyms addresses, `/proc/PID/map_files`).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fdprof_profiler::symbolize::Frame;
use fdprof_profiler::symbolize::{KernelSymbols, UNKNOWN, UserSymbolizer};

const CHILD_ENV: &str = "FDPROF_SYMBOLIZE_TEST_CHILD";

fn require_root() {
    // SAFETY: no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "symbolize tests read real kernel addresses: run them as root"
    );
}

/// Address of the core-kernel text symbol `name`, straight from /proc/kallsyms.
fn kallsyms_address(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    text.lines().find_map(|line| {
        let mut p = line.split_ascii_whitespace();
        let (addr, kind, sym) = (p.next()?, p.next()?, p.next()?);
        (sym == name && matches!(kind, "t" | "T") && p.next().is_none())
            .then(|| u64::from_str_radix(addr, 16).unwrap())
    })
}

#[test]
fn kernel_symbols_resolve_alloc_fd() {
    require_root();
    let started = Instant::now();
    let k = KernelSymbols::load().expect("load /proc/kallsyms");
    let elapsed = started.elapsed();
    eprintln!(
        "KernelSymbols::load: {} text symbols in {elapsed:?}",
        k.len()
    );
    assert!(k.len() > 10_000, "only {} text symbols", k.len());

    let alloc_fd = kallsyms_address("alloc_fd").expect("alloc_fd in /proc/kallsyms");
    assert_ne!(alloc_fd, 0);
    assert_eq!(
        k.resolve(alloc_fd + 0x10, false),
        Frame {
            function: "alloc_fd".into(),
            offset: 0x10,
            module: None,
            address: None,
        }
    );
    let raw = k.resolve(alloc_fd + 0x10, true);
    assert_eq!(raw.address, Some(alloc_fd + 0x10));
    assert_eq!((raw.function.as_str(), raw.offset), ("alloc_fd", 0x10));
    assert_eq!(k.resolve(alloc_fd, false).offset, 0);

    // Another function on the fd path, through the stack helper.
    if let Some(close) = kallsyms_address("file_close_fd") {
        let frames = k.resolve_stack(&[close + 1, alloc_fd + 2, 0x1000], false);
        assert_eq!(frames[0].function, "file_close_fd");
        assert_eq!(frames[1].function, "alloc_fd");
        assert_eq!(frames[2].function, UNKNOWN);
        assert!(frames.iter().all(|f| f.address.is_none()));
    }
}

/// A 200k-symbol kernel (distro kernels with many modules loaded) parses whole, built from the
/// real table with shifted copies. The time is printed; speed belongs to benchmarks.
#[test]
fn kernel_symbols_parse_200k() {
    require_root();
    let real = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut text = String::with_capacity(real.len() * 2);
    let mut lines = 0;
    'outer: for copy in 0u64..4 {
        for line in real.lines() {
            let Some((addr, rest)) = line.split_once(' ') else {
                continue;
            };
            let addr = u64::from_str_radix(addr, 16)
                .unwrap()
                .wrapping_add(copy << 32);
            text.push_str(&format!("{addr:016x} {rest}\n"));
            lines += 1;
            if lines == 200_000 {
                break 'outer;
            }
        }
    }
    let started = Instant::now();
    let k = KernelSymbols::parse(&text).unwrap();
    let elapsed = started.elapsed();
    eprintln!(
        "KernelSymbols::parse: {lines} lines, {} text symbols kept, {elapsed:?}",
        k.len()
    );
    assert!(k.len() > 100_000);
}

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
                "symbolize::helper_child_process",
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
        frames[0].function, "it::symbolize::marker_function",
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
    assert_eq!(raw[0].function, "it::symbolize::marker_function");
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
