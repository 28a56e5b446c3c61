//! Where fdprof writes what it produces: standard output (`-o -`) or a file it replaces
//! atomically. Every writer parses its `-o` into an [`Output`], calls `Output::check` before any
//! long work and `Output::write` at the end.
//!
//! fdprof runs as root, often in directories others can write to (`/tmp`), so a file is never
//! written through a path it did not create: the directory is opened once and every later step is
//! an `*at()` call on that fd; the target is only ever `lstat`ed (never opened, so a FIFO cannot
//! block us) and must be absent or a regular file; the data goes to an unnamed `O_TMPFILE` that is
//! linked under a random name and renamed over the target, or, where the filesystem has no
//! `O_TMPFILE`, to a randomly named file created with `O_EXCL|O_NOFOLLOW`.

use std::ffi::{CStr, CString, OsString};
use std::fmt;
use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Result, anyhow};

use crate::error::{EXIT_USAGE, fatal};

/// Mode of every file fdprof writes, whatever the umask. Recordings hold other processes' stacks
/// and paths (kernel addresses with `--raw-addrs`); one mode for everything keeps it simple.
pub(crate) const MODE: u32 = 0o600;

/// Where a command writes its result, parsed from its `-o` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// `-o -`
    Stdout,
    File(PathBuf),
}

impl From<OsString> for Output {
    fn from(arg: OsString) -> Self {
        if arg == "-" {
            Output::Stdout
        } else {
            Output::File(arg.into())
        }
    }
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Output::Stdout => f.write_str("standard output"),
            Output::File(path) => write!(f, "{}", path.display()),
        }
    }
}

impl Output {
    /// Fails at once, with exit code 2, if the file could not be written: its directory is not a
    /// writable directory, or something other than a regular file is at the path. `Output::write`
    /// checks again on its own; this saves a long run that would fail at its end.
    pub fn check(&self) -> Result<()> {
        match self {
            Output::Stdout => Ok(()),
            Output::File(path) => {
                let target = Target::open(path)?;
                target.check_writable()?;
                target.check_kind()
            }
        }
    }

    /// Writes `data`. A file gets mode [`MODE`] and appears complete or not at all; on failure an
    /// existing file is left as it was.
    pub fn write(&self, data: &[u8]) -> Result<()> {
        self.write_with(|out| out.write_all(data))
    }

    /// Writes what `fill` writes, as it writes it (buffered), so that output larger than what
    /// makes it need not be held whole; a file as with `Output::write`.
    pub fn write_with(&self, fill: impl FnOnce(&mut dyn Write) -> io::Result<()>) -> Result<()> {
        match self {
            Output::Stdout => {
                let mut out = io::BufWriter::new(io::stdout().lock());
                fill(&mut out)
                    .and_then(|()| out.flush())
                    .map_err(|e| anyhow!("cannot write to standard output: {e}"))
            }
            Output::File(path) => Target::open(path)?.replace(fill, TempKind::Unnamed),
        }
    }
}

/// `DIR/STEM.EXT`, or the first of `DIR/STEM-2.EXT`, `DIR/STEM-3.EXT`… (up to 99) that names
/// nothing yet, for a new file that must not replace one (a symlink counts: it is not followed).
pub fn unused_path(dir: &Path, stem: &str, ext: &str) -> Result<PathBuf> {
    for n in 1..100 {
        let path = match n {
            1 => dir.join(format!("{stem}.{ext}")),
            n => dir.join(format!("{stem}-{n}.{ext}")),
        };
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(path),
            Err(e) => return Err(anyhow!("cannot write {}: {e}", path.display())),
            Ok(_) => {}
        }
    }
    Err(anyhow!(
        "cannot write {}: every name for {stem}.{ext} is taken",
        dir.display()
    ))
}

/// The target file, named relative to its opened directory.
struct Target<'a> {
    path: &'a Path,
    dir: OwnedFd,
    name: CString,
}

/// How the temporary file starts: unnamed (`O_TMPFILE`, nothing left behind if we die while
/// writing), or named (the fallback).
#[derive(Clone, Copy)]
enum TempKind {
    Unnamed,
    /// Chosen by the code only where `Unnamed` is refused; tests force it.
    #[cfg_attr(not(test), expect(dead_code))]
    Named,
}

/// A complete temporary file: its name in the directory once it has one.
struct Temp {
    file: File,
    name: Option<CString>,
}

impl<'a> Target<'a> {
    fn open(path: &'a Path) -> Result<Self> {
        let refuse = |why: String| {
            fatal(
                EXIT_USAGE,
                format!("cannot write {}: {why}", path.display()),
            )
        };
        let bytes = path.as_os_str().as_bytes();
        let name = bytes.rsplit(|&b| b == b'/').next().unwrap_or_default();
        if matches!(name, b"" | b"." | b"..") {
            return Err(refuse("it names a directory, not a file".into()));
        }
        let dir = match &bytes[..bytes.len() - name.len()] {
            b"" => b".".as_slice(),
            d => match d.iter().rposition(|&b| b != b'/') {
                Some(last) => &d[..=last],
                None => b"/",
            },
        };
        let c =
            |b: &[u8]| CString::new(b).map_err(|_| refuse("the path contains a NUL byte".into()));
        let (dir_c, name) = (c(dir)?, c(name)?);
        // SAFETY: valid C string; the fd returned is ours.
        let fd = unsafe {
            libc::open(
                dir_c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = io::Error::last_os_error();
            let shown = Path::new(std::ffi::OsStr::from_bytes(dir)).display();
            return Err(refuse(format!("cannot open directory {shown}: {e}")));
        }
        Ok(Target {
            path,
            // SAFETY: fd was just opened and is owned by nobody else.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            name,
        })
    }

    fn error(&self, why: impl fmt::Display) -> anyhow::Error {
        anyhow!("cannot write {}: {why}", self.path.display())
    }

    fn refuse(&self, why: impl fmt::Display) -> anyhow::Error {
        fatal(
            EXIT_USAGE,
            format!("cannot write {}: {why}", self.path.display()),
        )
    }

    fn check_writable(&self) -> Result<()> {
        // SAFETY: valid fd and C string.
        let r = unsafe {
            libc::faccessat(
                self.dir.as_raw_fd(),
                c".".as_ptr(),
                libc::W_OK,
                libc::AT_EACCESS,
            )
        };
        if r != 0 {
            let e = io::Error::last_os_error();
            return Err(self.refuse(format!("its directory is not writable: {e}")));
        }
        Ok(())
    }

    /// Absent or a regular file: anything else (a device, FIFO, socket, directory or symlink) is
    /// refused, since replacing it would break it and writing through it is what an attacker wants.
    fn check_kind(&self) -> Result<()> {
        match lstat_at(self.dir.as_raw_fd(), &self.name) {
            Ok(st) => match file_kind(st.st_mode) {
                None => Ok(()),
                Some(kind) => {
                    Err(self.refuse(format!("it is {kind}; fdprof only replaces regular files")))
                }
            },
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
            Err(e) => Err(self.refuse(e)),
        }
    }

    fn replace(
        &self,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
        kind: TempKind,
    ) -> Result<()> {
        self.remove_dead_leftovers();
        let mut temp = self.create_temp(kind).map_err(|e| self.error(e))?;
        let result = self.fill_and_rename(&mut temp, fill);
        if result.is_err()
            && let Some(name) = &temp.name
        {
            // SAFETY: valid fd and C string; the name is one we created.
            unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) };
        }
        result
    }

    fn create_temp(&self, kind: TempKind) -> io::Result<Temp> {
        if let TempKind::Unnamed = kind {
            // SAFETY: valid fd and C string; the fd returned is ours.
            let fd = unsafe {
                libc::openat(
                    self.dir.as_raw_fd(),
                    c".".as_ptr(),
                    libc::O_TMPFILE | libc::O_WRONLY | libc::O_CLOEXEC,
                    MODE as libc::c_uint,
                )
            };
            if fd >= 0 {
                return Ok(Temp {
                    // SAFETY: fd was just opened and is owned by nobody else.
                    file: unsafe { File::from_raw_fd(fd) },
                    name: None,
                });
            }
            let e = io::Error::last_os_error();
            // This filesystem (or kernel) has no O_TMPFILE: fall back to a named file.
            if !matches!(
                e.raw_os_error(),
                Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
            ) {
                return Err(e);
            }
        }
        let name = self.temp_name()?;
        // SAFETY: valid fd and C string; the fd returned is ours.
        let fd = unsafe {
            libc::openat(
                self.dir.as_raw_fd(),
                name.as_ptr(),
                libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                MODE as libc::c_uint,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Temp {
            // SAFETY: fd was just opened and is owned by nobody else.
            file: unsafe { File::from_raw_fd(fd) },
            name: Some(name),
        })
    }

    fn fill_and_rename(
        &self,
        temp: &mut Temp,
        fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
    ) -> Result<()> {
        let io = |e: io::Error| self.error(e);
        let mut out = io::BufWriter::new(&mut temp.file);
        fill(&mut out).and_then(|()| out.flush()).map_err(io)?;
        drop(out);
        // fchmod: the mode given at creation was cut by the umask.
        temp.file
            .set_permissions(Permissions::from_mode(MODE))
            .map_err(io)?;
        temp.file.sync_all().map_err(io)?;
        let dir = self.dir.as_raw_fd();
        if temp.name.is_none() {
            let name = self.temp_name().map_err(io)?;
            let proc_path = crate::procfs::own::fd_path(temp.file.as_raw_fd());
            let proc_path = CString::new(proc_path.as_os_str().as_bytes()).expect("no NUL");
            // SAFETY: valid fds and C strings.
            let r = unsafe {
                libc::linkat(
                    libc::AT_FDCWD,
                    proc_path.as_ptr(),
                    dir,
                    name.as_ptr(),
                    libc::AT_SYMLINK_FOLLOW,
                )
            };
            if r != 0 {
                return Err(io(io::Error::last_os_error()));
            }
            temp.name = Some(name);
        }
        // Something may have appeared at the path since the early check.
        self.check_kind()?;
        let temp_name = temp.name.as_ref().expect("named above");
        // SAFETY: valid fd and C strings.
        if unsafe { libc::renameat(dir, temp_name.as_ptr(), dir, self.name.as_ptr()) } != 0 {
            return Err(io(io::Error::last_os_error()));
        }
        // Make the rename durable too; the file is in place whatever this returns.
        // SAFETY: valid fd.
        unsafe { libc::fsync(dir) };
        Ok(())
    }

    /// `.NAME.fdprof-`: the start of every temporary name for this target. NAME is cut so that
    /// the whole temporary name stays within NAME_MAX.
    fn temp_prefix(&self) -> Vec<u8> {
        let name = self.name.as_bytes();
        let mut prefix = b".".to_vec();
        prefix.extend_from_slice(&name[..name.len().min(128)]);
        prefix.extend_from_slice(b".fdprof-");
        prefix
    }

    /// `.NAME.fdprof-PID-RANDHEX.tmp`: unguessable, and the PID tells a later run whether the
    /// writer is gone.
    fn temp_name(&self) -> io::Result<CString> {
        let mut name = self.temp_prefix();
        name.extend_from_slice(format!("{}-{}.tmp", std::process::id(), random_hex()?).as_bytes());
        Ok(CString::new(name).expect("no NUL in a C string's bytes and our suffix"))
    }

    /// The PID in `entry` if it is one of our temporary names for this target.
    fn leftover_pid(&self, entry: &[u8]) -> Option<u32> {
        let rest = entry.strip_prefix(self.temp_prefix().as_slice())?;
        let rest = std::str::from_utf8(rest.strip_suffix(b".tmp")?).ok()?;
        let (pid, hex) = rest.split_once('-')?;
        let hex_ok = !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
        let pid_ok = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
        if hex_ok && pid_ok {
            pid.parse().ok()
        } else {
            None
        }
    }

    /// Removes the named temporary files of earlier runs for this target that died before their
    /// rename: only regular files owned by us whose PID is gone, never opened, never followed.
    fn remove_dead_leftovers(&self) {
        let dir = self.dir.as_raw_fd();
        let dead: Vec<CString> = dir_entries(dir)
            .into_iter()
            .filter(|e| {
                self.leftover_pid(e.as_bytes())
                    .is_some_and(|pid| !process_alive(pid))
            })
            .collect();
        // SAFETY: no preconditions.
        let euid = unsafe { libc::geteuid() };
        for entry in dead {
            let ours = lstat_at(dir, &entry)
                .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG && st.st_uid == euid);
            if ours {
                // SAFETY: valid fd and C string.
                unsafe { libc::unlinkat(dir, entry.as_ptr(), 0) };
            }
        }
    }
}

/// What a non-regular file is, for the message refusing it; `None` for a regular file.
fn file_kind(mode: libc::mode_t) -> Option<&'static str> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFLNK => Some("a symbolic link"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFIFO => Some("a FIFO"),
        libc::S_IFSOCK => Some("a socket"),
        _ => Some("not a regular file"),
    }
}

fn lstat_at(dir: RawFd, name: &CStr) -> io::Result<libc::stat> {
    // SAFETY: valid out-pointer, fd and C string.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// The names in the directory `dir` (read through a fresh fd, so `dir`'s offset is untouched);
/// none if it cannot be read.
fn dir_entries(dir: RawFd) -> Vec<CString> {
    // SAFETY: valid fd and C string; the fd returned is ours and passes to fdopendir.
    let fd = unsafe {
        libc::openat(
            dir,
            c".".as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Vec::new();
    }
    // SAFETY: fd is an open directory we own; closedir closes it.
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        // SAFETY: fdopendir failed, so fd is still ours.
        unsafe { libc::close(fd) };
        return Vec::new();
    }
    let mut names = Vec::new();
    loop {
        // SAFETY: stream is open; the entry is valid until the next readdir.
        let entry = unsafe { libc::readdir(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: d_name is NUL-terminated.
        names.push(unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) }.to_owned());
    }
    // SAFETY: stream is open and not used after this.
    unsafe { libc::closedir(stream) };
    names
}

fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    if pid <= 0 {
        return false;
    }
    // SAFETY: signal 0 only checks that the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// 8 bytes from getrandom(2), in hex.
fn random_hex() -> io::Result<String> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the pointer and length stay inside buf.
        let n = unsafe { libc::getrandom(buf[got..].as_mut_ptr().cast(), buf.len() - got, 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        got += n as usize;
    }
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::testdata::TempDir;

    /// A fresh directory, removed when dropped.
    fn dir(test: &str) -> TempDir {
        TempDir::new(&format!("output-unit-{test}"))
    }

    #[test]
    fn dash_is_stdout() {
        assert_eq!(Output::from(OsString::from("-")), Output::Stdout);
        assert_eq!(
            Output::from(OsString::from("./-")),
            Output::File("./-".into())
        );
    }

    #[test]
    fn paths_that_name_a_directory_are_refused() {
        for path in ["/", "x/", ".", "..", "a/..", "a/."] {
            let err = Output::File(path.into()).check().unwrap_err();
            assert!(
                format!("{err}").contains("names a directory"),
                "{path}: {err}"
            );
        }
    }

    #[test]
    fn a_missing_directory_is_named() {
        let err = Output::File("/nonexistent-dir//x".into())
            .check()
            .unwrap_err();
        let msg = format!("{err}");
        let want =
            "cannot write /nonexistent-dir//x: cannot open directory /nonexistent-dir: No such";
        assert!(msg.starts_with(want), "{msg}");
    }

    #[test]
    fn the_named_fallback_writes_0600_and_leaves_nothing_else() {
        let dir = dir("named");
        let path = dir.0.join("out");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o644)).unwrap();
        Target::open(&path)
            .unwrap()
            .replace(|out| out.write_all(b"new"), TempKind::Named)
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, MODE);
        assert_eq!(dir.names(), ["out"]);
    }

    #[test]
    fn the_named_fallback_removes_its_temporary_on_failure() {
        let dir = dir("named-fail");
        let path = dir.0.join("out");
        let target = Target::open(&path).unwrap();
        // Something that is not a regular file appears after the early check.
        std::fs::create_dir(&path).unwrap();
        let err = target
            .replace(|out| out.write_all(b"new"), TempKind::Named)
            .unwrap_err();
        assert!(format!("{err}").contains("is a directory"), "{err}");
        assert_eq!(dir.names(), ["out"]);
        assert!(path.is_dir());
    }

    #[test]
    fn temporary_names_are_random_and_recognized() {
        let dir = dir("names");
        let path = dir.0.join("out.svg");
        let target = Target::open(&path).unwrap();
        let a = target.temp_name().unwrap().into_bytes();
        let b = target.temp_name().unwrap().into_bytes();
        assert_ne!(a, b);
        let pid = std::process::id();
        assert!(a.starts_with(format!(".out.svg.fdprof-{pid}-").as_bytes()));
        assert_eq!(target.leftover_pid(&a), Some(pid));
        for not_ours in [
            "out.svg",
            ".out.svg.tmp.12",
            ".out.svgx.fdprof-12-ab.tmp",
            ".out.svg.fdprof-12-.tmp",
            ".out.svg.fdprof-1a-ab.tmp",
            ".out.svg.fdprof-12-xy.tmp",
            ".out.svg.fdprof-12-ab.tmpx",
        ] {
            assert_eq!(target.leftover_pid(not_ours.as_bytes()), None, "{not_ours}");
        }
    }
}
