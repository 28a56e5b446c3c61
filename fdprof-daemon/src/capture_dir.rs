//! The directory the daemon's captures go to (`--capture-dir`): checked before it is used,
//! written only through [`fdprof_profiler::output`], kept to `--capture-max` files, listed and read back
//! for `/captures`. Root writes there on a rule's say-so, so the directory must be root's alone:
//! nobody else can put a link or a FIFO where a capture goes, or swap the directory itself.

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use fdprof_profiler::output::Output;

/// Suffix of every capture's name.
const SUFFIX: &str = ".data";
/// Bytes of a target's part of a name, at most.
const TARGET_BYTES: usize = 64;
/// The largest capture `/captures/NAME` serves (a capture is its window's totals, at most
/// [`super::config::bounds::SITES`] stacks, plus a small sample per interval: far less).
pub(super) const SERVE_MAX: u64 = 64 << 20;

/// Refuses a directory the daemon must not write into as root: missing, not a directory, a
/// symbolic link, not root's, or writable by group or others. One line, without the path.
pub(super) fn check(path: &Path) -> Result<(), String> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => {
            "it does not exist (create it: install -d -m 0700 DIR)".to_string()
        }
        _ => e.to_string(),
    })?;
    if meta.file_type().is_symlink() {
        return Err("a symbolic link: give the directory itself".into());
    }
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    if meta.uid() != 0 {
        return Err(format!("owned by uid {}, not root", meta.uid()));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Err(format!(
            "writable by group or others (mode {mode:04o}): chmod {:o} it",
            mode & !0o022 & 0o777
        ));
    }
    Ok(())
}

/// A capture's file name: `<UTC time>-<target>-<rule>.data`, the target's bytes outside
/// `[A-Za-z0-9._-]` (a cgroup path's `/`, control characters, spaces) made `_`, and at most
/// [`TARGET_BYTES`] of them, so that no name has a path part or a byte a terminal acts on.
pub(super) fn file_name(stamp: &str, target: &str, rule: &str) -> String {
    let mut safe: String = target
        .chars()
        .map(|c| match c {
            'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .take(TARGET_BYTES)
        .collect();
    // Never `.`, `..` or a name that reads as an option.
    if safe.is_empty() || safe.starts_with(['.', '-']) {
        safe.insert(0, '_');
    }
    format!("{stamp}-{safe}-{rule}{SUFFIX}")
}

/// Whether `name` is one of [`file_name`]'s: a stamp (`20261203T031200Z`), a dash, then only
/// safe bytes, ending in `.data`. Anything else in the directory is not the daemon's.
pub(super) fn is_capture(name: &str) -> bool {
    let b = name.as_bytes();
    b.len() > 17 + SUFFIX.len()
        && b.len() <= 255
        && b[..8].iter().all(u8::is_ascii_digit)
        && b[8] == b'T'
        && b[9..15].iter().all(u8::is_ascii_digit)
        && b[15] == b'Z'
        && b[16] == b'-'
        && name.ends_with(SUFFIX)
        && b[17..]
            .iter()
            .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
}

/// One capture in the directory, as `/captures` lists it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub(super) struct Listed {
    pub name: String,
    pub bytes: u64,
    pub modified_unix_ms: u64,
}

/// The captures in `dir` (regular files with a capture's name), oldest first.
pub(super) fn list(dir: &Path) -> std::io::Result<Vec<Listed>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        // The entry's own type: a link is never followed.
        let Ok(meta) = entry.metadata() else { continue };
        if !is_capture(&name) || !meta.file_type().is_file() {
            continue;
        }
        found.push(Listed {
            name,
            bytes: meta.len(),
            modified_unix_ms: meta
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis() as u64),
        });
    }
    // The stamp leads the name (to the second); within a second, by when it was written.
    found.sort_by(|a, b| {
        (&a.name[..16], a.modified_unix_ms, &a.name).cmp(&(
            &b.name[..16],
            b.modified_unix_ms,
            &b.name,
        ))
    });
    Ok(found)
}

/// Writes `data` as `name` in `dir` (mode 0600, whole or not at all), never over a file
/// that is there: a name taken gets `-2`, `-3`… before its suffix. The path written.
pub(super) fn write(dir: &Path, name: &str, data: &[u8]) -> anyhow::Result<PathBuf> {
    check(dir).map_err(|why| anyhow::anyhow!("{}: {why}", dir.display()))?;
    let stem = name.strip_suffix(SUFFIX).unwrap_or(name);
    let path = fdprof_profiler::output::unused_path(dir, stem, &SUFFIX[1..])?;
    Output::File(path.clone()).write(data)?;
    Ok(path)
}

/// Removes the oldest captures until at most `max` are left; the names removed.
pub(super) fn prune(dir: &Path, max: usize) -> std::io::Result<Vec<String>> {
    let listed = list(dir)?;
    let excess = listed.len().saturating_sub(max);
    let mut removed = Vec::new();
    for old in listed.into_iter().take(excess) {
        // Listed as a regular file with a capture's name in a directory only root can
        // change: still that file.
        match std::fs::remove_file(dir.join(&old.name)) {
            Ok(()) => removed.push(old.name),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(removed)
}

/// Reads the capture `name` from `dir` for `/captures/NAME`: a capture's name, a regular file
/// (a link is not followed), at most [`SERVE_MAX`] bytes. `Ok(None)`: no such capture.
pub(super) fn read(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, String> {
    if !is_capture(name) {
        return Ok(None);
    }
    let path = CString::new(dir.join(name).as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: a valid C string; the descriptor returned is ours to own.
    let fd = unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY,
        )
    };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOENT | libc::ELOOP) => Ok(None),
            _ => Err(e.to_string()),
        };
    }
    // SAFETY: `fd` was just opened and is owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Ok(None);
    }
    let mut data = Vec::new();
    (&file)
        .take(SERVE_MAX + 1)
        .read_to_end(&mut data)
        .map_err(|e| e.to_string())?;
    if data.len() as u64 > SERVE_MAX {
        return Err(format!("larger than {SERVE_MAX} bytes"));
    }
    Ok(Some(data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_no_path_part_and_read_back_as_captures() {
        let stamp = "20261203T031200Z";
        let plain = file_name(stamp, "nginx", "shared-table");
        assert_eq!(plain, "20261203T031200Z-nginx-shared-table.data");
        assert!(is_capture(&plain));
        let cgroup = file_name(stamp, "/sys/fs/cgroup/a b/\x1b[31m..", "slow-wait");
        assert_eq!(
            cgroup,
            "20261203T031200Z-_sys_fs_cgroup_a_b___31m..-slow-wait.data"
        );
        assert!(is_capture(&cgroup));
        assert_eq!(
            file_name(stamp, "..", "long-scans"),
            "20261203T031200Z-_..-long-scans.data"
        );
        assert!(file_name(stamp, &"x".repeat(500), "host-steal").len() < 120);
        for not in [
            "",
            "../20261203T031200Z-a-b.data",
            "20261203T031200Z-a/b.data",
            "20261203T031200Z-a-b.json",
            "2026120XT031200Z-a-b.data",
            "20261203T031200Z-\u{e9}-b.data",
        ] {
            assert!(!is_capture(not), "{not:?}");
        }
    }

    #[test]
    fn a_directory_others_can_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("fdprof-capture-dir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            check(&dir)
                .unwrap_err()
                .contains("writable by group or others (mode 0777)")
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        if unsafe { libc::geteuid() } == 0 {
            check(&dir).unwrap();
            let written = write(&dir, "20261203T031200Z-a-b.data", b"{}").unwrap();
            let again = write(&dir, "20261203T031200Z-a-b.data", b"{}").unwrap();
            assert_eq!(again, dir.join("20261203T031200Z-a-b-2.data"));
            let mode = std::fs::metadata(&written).unwrap().mode() & 0o777;
            assert_eq!(mode, 0o600);
            assert_eq!(
                read(&dir, "20261203T031200Z-a-b.data").unwrap().unwrap(),
                b"{}"
            );
            assert_eq!(read(&dir, "../etc/passwd").unwrap(), None);
            assert_eq!(prune(&dir, 1).unwrap().len(), 1);
            assert_eq!(list(&dir).unwrap().len(), 1);
        }
        let link = dir.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        assert!(check(&link).unwrap_err().contains("symbolic link"));
        assert!(
            check(&dir.join("missing"))
                .unwrap_err()
                .contains("does not exist")
        );
        let _ = std::fs::remove_file(&link);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
