//! `-o` of `record` and `flamegraph`: only a regular file or nothing is replaced, never through a
//! symlink or a planted temporary file; files are 0600 whatever the umask; `-` is standard output;
//! leftovers of dead runs are removed without being trusted.

use std::ffi::CString;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fdprof, kernel_lock, parse_svg, require_root};
use fdprof_recording::testdata::TempDir;

/// A fresh directory for one test, removed when dropped.
fn temp_dir(test: &str) -> TempDir {
    TempDir::new(&format!("output-{test}"))
}

/// The fixture recording, written into `dir` by the test itself.
fn recording_in(dir: &TempDir) -> PathBuf {
    let path = dir.join("rec.data");
    let rec = fdprof_recording::testdata::recording();
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
    path
}

/// Runs `cmd`, killing it and failing the test if it takes longer than `limit` (a FIFO opened
/// for writing would block forever). Returns its output and how long it took.
fn run_timed(cmd: &mut Command, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            pipe.read_to_end(&mut buf).unwrap();
            buf
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            child.kill().unwrap();
            let _ = child.wait();
            panic!("{cmd:?} still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = start.elapsed();
    let out = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    (out, elapsed)
}

fn run_ok(cmd: &mut Command) -> Output {
    let (out, _) = run_timed(cmd, Duration::from_secs(120));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn flamegraph(rec: &Path, out: &Path) -> Command {
    let mut cmd = fdprof();
    cmd.arg("flamegraph").arg(rec).arg("-o").arg(out);
    cmd
}

fn record(out: &Path) -> Command {
    let mut cmd = fdprof();
    cmd.args(["record", "-a", "-d", "1s", "-o"]).arg(out);
    cmd
}

fn assert_svg(text: &[u8]) {
    parse_svg(std::str::from_utf8(text).unwrap());
}

fn assert_recording(json: &[u8]) {
    let value: serde_json::Value = serde_json::from_slice(json).unwrap();
    assert_eq!(value["format"], "fdprof-recording");
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

fn assert_regular_0600(path: &Path) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    assert!(
        meta.file_type().is_file(),
        "{} is not a regular file",
        path.display()
    );
    assert_eq!(mode_of(path), 0o600, "{}", path.display());
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

fn set_umask_000(cmd: &mut Command) {
    // SAFETY: umask is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        })
    };
}

/// Makes the child create, before exec, a symlink `PREFIX<its pid>` → `target`: the
/// predictable temporary name the old code used (`DIR/.NAME.tmp.PID`), as an attacker would.
fn plant_symlink_at_exec(cmd: &mut Command, prefix: &Path, target: &Path) {
    let prefix = prefix.as_os_str().as_bytes().to_vec();
    let target = c_path(target);
    assert!(prefix.len() < 400);
    // SAFETY: the closure only calls getpid and symlink and touches stack buffers; no
    // allocation between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut path = [0u8; 512];
            path[..prefix.len()].copy_from_slice(&prefix);
            let mut len = prefix.len();
            let mut digits = [0u8; 10];
            let (mut n, mut pid) = (0, libc::getpid() as u32);
            loop {
                digits[n] = b'0' + (pid % 10) as u8;
                n += 1;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            while n > 0 {
                n -= 1;
                path[len] = digits[n];
                len += 1;
            }
            if libc::symlink(target.as_ptr(), path.as_ptr().cast()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
}

/// What may sit at an output path and must be refused.
#[derive(Debug, Clone, Copy)]
enum Special {
    /// A char device like /dev/full (1, 7).
    CharDevice,
    Fifo,
    SymlinkToStdout,
    SymlinkToRegular,
    Directory,
    Socket,
}

const SPECIALS: [Special; 6] = [
    Special::CharDevice,
    Special::Fifo,
    Special::SymlinkToStdout,
    Special::SymlinkToRegular,
    Special::Directory,
    Special::Socket,
];

impl Special {
    /// The words the error must use.
    fn kind(self) -> &'static str {
        match self {
            Special::CharDevice => "character device",
            Special::Fifo => "FIFO",
            Special::SymlinkToStdout | Special::SymlinkToRegular => "symbolic link",
            Special::Directory => "directory",
            Special::Socket => "socket",
        }
    }

    /// Makes it at `dir/NAME`; the listener keeps a socket alive.
    fn make(self, dir: &TempDir) -> (PathBuf, Option<std::os::unix::net::UnixListener>) {
        let name = match self {
            Special::CharDevice => "full",
            Special::Fifo => "fifo",
            Special::SymlinkToStdout => "stdout-link",
            Special::SymlinkToRegular => "regular-link",
            Special::Directory => "subdir",
            Special::Socket => "sock",
        };
        let path = dir.join(name);
        let c = c_path(&path);
        let mut listener = None;
        match self {
            Special::CharDevice => {
                let dev = libc::makedev(1, 7);
                // SAFETY: valid C string.
                let r = unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR | 0o666, dev) };
                assert_eq!(r, 0, "mknod: {}", std::io::Error::last_os_error());
            }
            Special::Fifo => {
                // SAFETY: valid C string.
                let r = unsafe { libc::mkfifo(c.as_ptr(), 0o666) };
                assert_eq!(r, 0, "mkfifo: {}", std::io::Error::last_os_error());
            }
            Special::SymlinkToStdout => {
                std::os::unix::fs::symlink("/proc/self/fd/1", &path).unwrap();
            }
            Special::SymlinkToRegular => {
                std::fs::write(dir.join("precious"), "precious").unwrap();
                std::os::unix::fs::symlink(dir.join("precious"), &path).unwrap();
            }
            Special::Directory => std::fs::create_dir(&path).unwrap(),
            Special::Socket => {
                listener = Some(std::os::unix::net::UnixListener::bind(&path).unwrap());
            }
        }
        (path, listener)
    }

    fn assert_unchanged(self, path: &Path, dir: &TempDir) {
        let t = std::fs::symlink_metadata(path).unwrap().file_type();
        let same = match self {
            Special::CharDevice => {
                let meta = std::fs::symlink_metadata(path).unwrap();
                use std::os::unix::fs::MetadataExt;
                t.is_char_device() && meta.rdev() == libc::makedev(1, 7)
            }
            Special::Fifo => t.is_fifo(),
            Special::SymlinkToStdout => {
                t.is_symlink() && std::fs::read_link(path).unwrap() == Path::new("/proc/self/fd/1")
            }
            Special::SymlinkToRegular => {
                t.is_symlink()
                    && std::fs::read_to_string(dir.join("precious")).unwrap() == "precious"
            }
            Special::Directory => t.is_dir(),
            Special::Socket => t.is_socket(),
        };
        assert!(same, "{self:?} at {} was changed", path.display());
    }
}

/// Runs `cmd` (which writes to `path`, a `special`) and checks it is refused at once with one
/// line naming the path and what is there, leaving it as it was.
fn assert_refused(mut cmd: Command, special: Special, path: &Path, dir: &TempDir) -> Duration {
    let (out, elapsed) = run_timed(&mut cmd, Duration::from_secs(10));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{special:?}: {stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&*path.to_string_lossy()), "{stderr}");
    assert!(stderr.contains(special.kind()), "{stderr}");
    assert!(out.stdout.is_empty());
    special.assert_unchanged(path, dir);
    elapsed
}

#[test]
fn flamegraph_refuses_what_is_not_a_regular_file() {
    require_root(); // for mknod
    let dir = temp_dir("fg-refuse");
    let rec = recording_in(&dir);
    for special in SPECIALS {
        let (path, _listener) = special.make(&dir);
        assert_refused(flamegraph(&rec, &path), special, &path, &dir);
    }
}

#[test]
fn record_refuses_what_is_not_a_regular_file_before_attaching() {
    require_root();
    let _guard = kernel_lock();
    let dir = temp_dir("record-refuse");
    for special in SPECIALS {
        let (path, _listener) = special.make(&dir);
        let mut long = fdprof();
        long.args(["record", "-a", "-d", "8s", "-o"]).arg(&path);
        let elapsed = assert_refused(long, special, &path, &dir);
        // A record that attached would run its 8 s before failing.
        assert!(elapsed < Duration::from_secs(6), "{special:?}: {elapsed:?}");
    }
}

#[test]
fn a_planted_temporary_symlink_is_not_followed_by_flamegraph() {
    let dir = temp_dir("fg-plant");
    let rec = recording_in(&dir);
    let victim = dir.join("victim");
    std::fs::write(&victim, "victim").unwrap();
    let out = dir.join("out.svg");
    let mut cmd = flamegraph(&rec, &out);
    plant_symlink_at_exec(&mut cmd, &dir.join(".out.svg.tmp."), &victim);
    let child_pid = {
        let o = run_ok(&mut cmd);
        assert!(o.stdout.is_empty());
        // The plant happened: the symlink is still there, under the child's PID.
        let planted: Vec<String> = dir
            .names()
            .into_iter()
            .filter(|n| n.starts_with(".out.svg.tmp."))
            .collect();
        assert_eq!(planted.len(), 1, "{:?}", dir.names());
        planted[0].clone()
    };
    assert!(
        std::fs::symlink_metadata(dir.join(&child_pid))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
    assert_regular_0600(&out);
    assert_svg(&std::fs::read(&out).unwrap());
}

#[test]
fn a_planted_temporary_symlink_is_not_followed_by_record() {
    require_root();
    let _guard = kernel_lock();
    let dir = temp_dir("record-plant");
    let victim = dir.join("victim");
    std::fs::write(&victim, "victim").unwrap();
    let out = dir.join("out.data");
    let mut cmd = record(&out);
    plant_symlink_at_exec(&mut cmd, &dir.join(".out.data.tmp."), &victim);
    run_ok(&mut cmd);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "victim");
    assert_regular_0600(&out);
    assert_recording(&std::fs::read(&out).unwrap());
    assert!(
        dir.names().iter().any(|n| n.starts_with(".out.data.tmp.")),
        "the symlink was not planted: {:?}",
        dir.names()
    );
}

#[test]
fn flamegraph_files_are_0600_whatever_the_umask_and_the_old_mode() {
    let dir = temp_dir("fg-mode");
    let rec = recording_in(&dir);
    let svg = dir.join("out.svg");
    let folded = dir.join("out.folded");
    for existing in [None, Some(0o644), Some(0o600)] {
        if let Some(mode) = existing {
            std::fs::write(&svg, "old").unwrap();
            std::fs::set_permissions(&svg, std::fs::Permissions::from_mode(mode)).unwrap();
        }
        let mut cmd = flamegraph(&rec, &svg);
        set_umask_000(&mut cmd);
        run_ok(&mut cmd);
        assert_regular_0600(&svg);
        assert_svg(&std::fs::read(&svg).unwrap());
    }
    let mut cmd = flamegraph(&rec, &folded);
    cmd.arg("--folded");
    set_umask_000(&mut cmd);
    run_ok(&mut cmd);
    assert_regular_0600(&folded);
    assert!(
        std::fs::read_to_string(&folded)
            .unwrap()
            .contains("alloc_fd")
    );
    // Nothing else was left behind.
    assert_eq!(dir.names(), ["out.folded", "out.svg", "rec.data"]);
}

#[test]
fn a_recording_is_0600_whatever_the_umask_and_the_old_mode() {
    require_root();
    let _guard = kernel_lock();
    let dir = temp_dir("record-mode");
    let out = dir.join("out.data");
    std::fs::write(&out, "old").unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut cmd = record(&out);
    set_umask_000(&mut cmd);
    run_ok(&mut cmd);
    assert_regular_0600(&out);
    assert_recording(&std::fs::read(&out).unwrap());
    assert_eq!(dir.names(), ["out.data"]);
}

/// A PID no process has: a child that has been reaped.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    // SAFETY: signal 0 only checks existence.
    let r = unsafe { libc::kill(pid as i32, 0) };
    assert!(
        r != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH),
        "PID {pid} was reused at once"
    );
    pid
}

#[test]
fn leftovers_of_dead_runs_are_removed_and_never_followed() {
    let dir = temp_dir("leftovers");
    let rec = recording_in(&dir);
    let dead = dead_pid();
    let live = std::process::id();
    let dead_file = format!(".out.svg.fdprof-{dead}-0123456789abcdef.tmp");
    let live_file = format!(".out.svg.fdprof-{live}-0123456789abcdef.tmp");
    let dead_link = format!(".out.svg.fdprof-{dead}-fedcba9876543210.tmp");
    let other_name = format!(".other.svg.fdprof-{dead}-0123456789abcdef.tmp");
    for name in [&dead_file, &live_file, &other_name] {
        std::fs::write(dir.join(name), "leftover").unwrap();
    }
    std::fs::write(dir.join("victim"), "victim").unwrap();
    std::os::unix::fs::symlink(dir.join("victim"), dir.join(&dead_link)).unwrap();

    run_ok(&mut flamegraph(&rec, &dir.join("out.svg")));

    let mut expected = vec![
        dead_link.clone(),
        live_file.clone(),
        other_name.clone(),
        "out.svg".to_string(),
        "rec.data".to_string(),
        "victim".to_string(),
    ];
    expected.sort();
    assert_eq!(
        dir.names(),
        expected,
        "only the dead run's regular file goes"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join(&live_file)).unwrap(),
        "leftover"
    );
    assert!(
        std::fs::symlink_metadata(dir.join(&dead_link))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("victim")).unwrap(),
        "victim"
    );
    assert_svg(&std::fs::read(dir.join("out.svg")).unwrap());
}

#[test]
fn a_failed_write_leaves_the_old_file_and_no_temporary() {
    let dir = temp_dir("fail");
    let rec = recording_in(&dir);
    let out = dir.join("out.svg");
    std::fs::write(&out, "old").unwrap();
    let mut cmd = flamegraph(&rec, &out);
    // SAFETY: setrlimit and signal are async-signal-safe. A 100-byte file size limit makes the
    // write fail with EFBIG once SIGXFSZ is ignored (the disposition survives exec).
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 100,
                rlim_max: 100,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &limit);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        })
    };
    let (o, _) = run_timed(&mut cmd, Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.contains(&*out.to_string_lossy()), "{stderr}");
    assert!(stderr.contains("File too large"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "old");
    assert_eq!(dir.names(), ["out.svg", "rec.data"]);
}

#[test]
fn dash_writes_the_svg_to_stdout() {
    let dir = temp_dir("fg-stdout");
    let rec = recording_in(&dir);
    let out = run_ok(flamegraph(&rec, Path::new("-")).current_dir(&dir.0));
    assert_svg(&out.stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard output"));
    assert_eq!(dir.names(), ["rec.data"]);
}

#[test]
fn dash_writes_the_recording_to_stdout() {
    require_root();
    let _guard = kernel_lock();
    let dir = temp_dir("record-stdout");
    let out = run_ok(record(Path::new("-")).current_dir(&dir.0));
    assert_recording(&out.stdout);
    assert!(String::from_utf8_lossy(&out.stderr).contains("standard output"));
    assert!(dir.names().is_empty(), "{:?}", dir.names());
}
