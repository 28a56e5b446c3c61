//! The command `record -- CMD` profiles: checked before anything is attached, forked and held
//! before `exec` until the probes are in, bound to fdprof's life, and reaped for its exit status.

use std::ffi::{CStr, CString};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use crate::error::{EXIT_CANNOT_EXECUTE, EXIT_NOT_FOUND, fatal};
use fdprof_common::session::ExitStatus;

/// How long a command gets to exit after a stop signal is passed on, before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// Why a command cannot run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unrunnable {
    /// A name without a slash that no `PATH` directory holds.
    NotInPath,
    /// What `execve` failed (or would fail) with.
    Errno(i32),
}

impl Unrunnable {
    /// The shells' exit codes: 127 when there is nothing to run, 126 when it cannot be run.
    fn exit_code(self) -> u8 {
        match self {
            Unrunnable::NotInPath | Unrunnable::Errno(libc::ENOENT) => EXIT_NOT_FOUND,
            Unrunnable::Errno(_) => EXIT_CANNOT_EXECUTE,
        }
    }

    fn reason(self) -> String {
        match self {
            Unrunnable::NotInPath => "command not found".into(),
            Unrunnable::Errno(e) => strerror(e),
        }
    }
}

fn strerror(errno: i32) -> String {
    let mut buf = [0 as libc::c_char; 128];
    // SAFETY: buf is writable for its length; the XSI strerror_r NUL-terminates on success.
    if unsafe { libc::strerror_r(errno, buf.as_mut_ptr(), buf.len()) } != 0 {
        return format!("error {errno}");
    }
    // SAFETY: NUL-terminated above.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// `s` with control characters escaped, fit to print in a one-line message.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_debug().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Whether `execve` could run `path`: it exists, is not a directory, and may be executed (root
/// passes `access(X_OK)` only when some execute bit is set).
fn runnable(path: &Path) -> Result<(), Unrunnable> {
    let meta = std::fs::metadata(path)
        .map_err(|e| Unrunnable::Errno(e.raw_os_error().unwrap_or(libc::ENOENT)))?;
    if meta.is_dir() {
        return Err(Unrunnable::Errno(libc::EISDIR));
    }
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| Unrunnable::NotInPath)?;
    // SAFETY: valid C string.
    if !meta.is_file() || unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return Err(Unrunnable::Errno(libc::EACCES));
    }
    Ok(())
}

/// The file `name` names, found as `execvp` and shells find it: a name with a slash as is, else
/// the first runnable file of that name in a `PATH` directory (directories are passed over).
fn find(name: &str, path_var: &[u8]) -> Result<PathBuf, Unrunnable> {
    if name.contains('/') {
        return runnable(Path::new(name)).map(|()| PathBuf::from(name));
    }
    if name.is_empty() {
        return Err(Unrunnable::NotInPath);
    }
    let mut denied = false;
    for dir in path_var.split(|&b| b == b':') {
        let dir = if dir.is_empty() { b".".as_slice() } else { dir };
        let candidate = Path::new(std::ffi::OsStr::from_bytes(dir)).join(name);
        match runnable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(Unrunnable::Errno(libc::EACCES)) => denied = true,
            Err(_) => {}
        }
    }
    Err(if denied {
        Unrunnable::Errno(libc::EACCES)
    } else {
        Unrunnable::NotInPath
    })
}

/// A command that was found and may be executed.
pub struct Program {
    /// What `execv` runs.
    path: CString,
    argv: Vec<CString>,
    /// argv[0], printable.
    name: String,
}

impl Program {
    /// Finds the command's file or fails the way a shell does: `NAME: REASON`, exit 127 when
    /// there is nothing to run and 126 when it cannot be run.
    pub fn resolve(command: &[String]) -> Result<Self> {
        let Some(first) = command.first() else {
            bail!("no command given");
        };
        let name = printable(first);
        let argv: Vec<CString> = command
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .with_context(|| format!("{name}: the command contains a NUL byte"))?;
        let path_var = std::env::var_os("PATH");
        // glibc's execvp searches this when PATH is unset.
        let path_var = path_var
            .as_ref()
            .map_or(b"/bin:/usr/bin".as_slice(), |p| p.as_bytes());
        let found = find(first, path_var)
            .map_err(|why| fatal(why.exit_code(), format!("{name}: {}", why.reason())))?;
        Ok(Program {
            path: CString::new(found.into_os_string().into_vec())
                .expect("no NUL: it came from argv and PATH"),
            argv,
            name,
        })
    }
}

fn cloexec_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe2: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Where a launched command's standard streams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Streams {
    /// fdprof's own.
    Inherit,
    /// Standard input from `/dev/null`, output and errors into one pipe
    /// (`Launched::take_output`): a full-screen view owns the terminal, and a command
    /// printing to it, or reading keys from it, would scroll the screen and steal its keys.
    Captured,
}

/// A command forked and held before `exec` until the probes are attached.
pub struct Launched {
    pub pid: u32,
    name: String,
    /// The read end of the command's output pipe, with [`Streams::Captured`].
    output: Option<OwnedFd>,
    /// Written to let the child exec; closed (without a byte) to make it give up.
    gate: Option<OwnedFd>,
    /// The child writes its `execve` errno here; end of file means the exec succeeded.
    exec_result: OwnedFd,
    status: Option<ExitStatus>,
    /// When a stop signal was passed on to the command.
    stopping_since: Option<Instant>,
}

/// Forks the child that will run `program` once [`Launched::go`] is called. It dies with
/// SIGKILL when fdprof does (the parent-death signal, which follows the forking thread: fork
/// from the main thread only).
pub fn launch(program: &Program, streams: Streams) -> Result<Launched> {
    let mut argv: Vec<*const libc::c_char> = program.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let (gate_r, gate_w) = cloexec_pipe()?;
    let (result_r, result_w) = cloexec_pipe()?;
    // (standard input, the output pipe's ends), opened before the fork.
    let captured = match streams {
        Streams::Inherit => None,
        Streams::Captured => {
            let null = std::fs::File::open("/dev/null").context("cannot open /dev/null")?;
            Some((OwnedFd::from(null), cloexec_pipe()?))
        }
    };
    // SAFETY: no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the child only calls async-signal-safe functions before exec.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        bail!("fork: {}", std::io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: async-signal-safe calls on fds and pointers prepared before the fork.
        unsafe {
            libc::close(gate_w.as_raw_fd());
            libc::close(result_r.as_raw_fd());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            // fdprof may have died before the parent-death signal was armed.
            if libc::getppid() != parent {
                libc::_exit(EXIT_NOT_FOUND.into());
            }
            let mut b = 0u8;
            if libc::read(gate_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1) != 1 {
                libc::_exit(EXIT_NOT_FOUND.into());
            }
            // dup2 clears close-on-exec on the copies; the originals close at exec.
            if let Some((null, (_, out_w))) = &captured {
                libc::dup2(null.as_raw_fd(), 0);
                libc::dup2(out_w.as_raw_fd(), 1);
                libc::dup2(out_w.as_raw_fd(), 2);
            }
            libc::execv(program.path.as_ptr(), argv.as_ptr());
            let errno = *libc::__errno_location();
            libc::write(
                result_w.as_raw_fd(),
                (&errno as *const i32).cast(),
                size_of::<i32>(),
            );
            libc::_exit(EXIT_NOT_FOUND.into());
        }
    }
    drop((gate_r, result_w));
    Ok(Launched {
        pid: pid as u32,
        name: program.name.clone(),
        output: captured.map(|(_, (out_r, _))| out_r),
        gate: Some(gate_w),
        exec_result: result_r,
        status: None,
        stopping_since: None,
    })
}

fn decode(status: libc::c_int) -> ExitStatus {
    if libc::WIFSIGNALED(status) {
        ExitStatus::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatus::Code(libc::WEXITSTATUS(status))
    }
}

impl Launched {
    /// The read end of the command's output, once, with [`Streams::Captured`].
    pub fn take_output(&mut self) -> Option<OwnedFd> {
        self.output.take()
    }

    /// Lets the command exec and waits for the outcome. A failed exec (a format the kernel cannot
    /// run, a file changed since it was checked) is reaped and reported like a shell would.
    pub fn go(&mut self) -> Result<()> {
        if let Some(gate) = self.gate.take() {
            // SAFETY: writing one byte to our own pipe.
            unsafe { libc::write(gate.as_raw_fd(), b"x".as_ptr().cast(), 1) };
        }
        let mut errno = [0u8; size_of::<i32>()];
        let n = loop {
            // SAFETY: reading into a local buffer of that size.
            let n = unsafe {
                libc::read(
                    self.exec_result.as_raw_fd(),
                    errno.as_mut_ptr().cast(),
                    errno.len(),
                )
            };
            if n >= 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
                break n;
            }
        };
        if n != errno.len() as isize {
            return Ok(());
        }
        self.reap(0);
        let why = Unrunnable::Errno(i32::from_ne_bytes(errno));
        Err(fatal(
            why.exit_code(),
            format!("{}: {}", self.name, why.reason()),
        ))
    }

    /// `waitpid` with `flags`; records and returns the exit status once the child has ended.
    fn reap(&mut self, flags: libc::c_int) -> Option<ExitStatus> {
        if self.status.is_none() {
            let mut status = 0;
            // SAFETY: our own child.
            if unsafe { libc::waitpid(self.pid as i32, &mut status, flags) } == self.pid as i32 {
                self.status = Some(decode(status));
            }
        }
        self.status
    }

    /// The exit status, once the command has ended (reaping it).
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.reap(libc::WNOHANG)
    }

    fn kill_and_wait(&mut self) -> ExitStatus {
        if self.status.is_none() {
            // SAFETY: our own child, not yet reaped, so its pid is still ours.
            unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        }
        self.reap(0).unwrap_or(ExitStatus::Signal(libc::SIGKILL))
    }

    /// fdprof was asked to stop (`signals` so far; `forward` is the signal to pass on, 0 when the
    /// terminal already sent it to the whole process group, command included). The first time,
    /// passes the signal on and gives the command [`GRACE`] to exit; a second signal or the end
    /// of the grace period kills it. Returns its exit status once it has ended.
    pub fn stop(&mut self, signals: u32, forward: libc::c_int) -> Option<ExitStatus> {
        if let Some(status) = self.try_wait() {
            return Some(status);
        }
        match self.stopping_since {
            None => {
                if forward != 0 {
                    // SAFETY: our own child, not yet reaped.
                    unsafe { libc::kill(self.pid as i32, forward) };
                }
                self.stopping_since = Some(Instant::now());
                None
            }
            Some(since) if signals >= 2 || since.elapsed() >= GRACE => Some(self.kill_and_wait()),
            Some(_) => None,
        }
    }

    /// Ends a command that outlived the recording: SIGTERM, then SIGKILL after [`GRACE`] or at
    /// once when `stop_signals` reports a signal to fdprof.
    pub fn terminate(&mut self, stop_signals: impl Fn() -> u32) -> ExitStatus {
        if let Some(status) = self.try_wait() {
            return status;
        }
        // SAFETY: our own child, not yet reaped.
        unsafe { libc::kill(self.pid as i32, libc::SIGTERM) };
        let since = Instant::now();
        while since.elapsed() < GRACE && stop_signals() == 0 {
            if let Some(status) = self.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill_and_wait()
    }

    /// Gives up on a command that never ran (closing the gate makes it exit) and reaps it.
    pub fn abandon(mut self) {
        self.gate = None;
        self.reap(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_follows_path_like_execvp() {
        let dir = std::env::temp_dir().join(format!("fdprof-find-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(b.join("tool")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let write = |p: &Path, mode: u32| {
            std::fs::write(p, b"#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(&a.join("tool"), 0o644);
        write(&a.join("run"), 0o755);
        let path_var = format!("{}:{}", b.display(), a.display());
        let path_var = path_var.as_bytes();
        // A directory in PATH is passed over; a file without execute bits is denied.
        assert_eq!(find("tool", path_var), Err(Unrunnable::Errno(libc::EACCES)));
        assert_eq!(find("run", path_var), Ok(a.join("run")));
        assert_eq!(find("none", path_var), Err(Unrunnable::NotInPath));
        assert_eq!(find("", path_var), Err(Unrunnable::NotInPath));
        let tool_dir = b.join("tool");
        assert_eq!(
            find(tool_dir.to_str().unwrap(), path_var),
            Err(Unrunnable::Errno(libc::EISDIR))
        );
        assert_eq!(
            find("/nonexistent/x", path_var),
            Err(Unrunnable::Errno(libc::ENOENT))
        );
        assert_eq!(Unrunnable::Errno(libc::ENOENT).exit_code(), 127);
        assert_eq!(Unrunnable::NotInPath.exit_code(), 127);
        assert_eq!(Unrunnable::Errno(libc::EACCES).exit_code(), 126);
        assert_eq!(Unrunnable::Errno(libc::EISDIR).reason(), "Is a directory");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn names_are_printed_escaped() {
        assert_eq!(printable("a\x1b[2Jb\n"), "a\\u{1b}[2Jb\\n");
        assert_eq!(printable("ünï"), "ünï");
    }
}
