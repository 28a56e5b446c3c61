//! The files the daemon reads as root on someone's say-so (its config, its token, its TLS key):
//! only a regular file on a real file system, opened without blocking, owned by root, within a
//! size, so that no path (a FIFO, `/proc/kmsg`, a device, another user's file) can stall the
//! daemon, feed it what it did not ask for, or hand its secrets to others.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Who may see the file besides root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A config: anyone may read it, only root may change it. It holds no secret (a token has
    /// a file of its own), so one that group or others may not read is refused: it may be
    /// another program's secret (`/etc/shadow`, 0640; an ssh key, 0600), which a daemon run by
    /// `sudo` must not parse and quote back.
    ReadableByAll,
    /// A secret (the token, a TLS key): only its owner may read or write it.
    OwnerOnly,
}

/// File systems whose "regular files" are the kernel's: a read may block forever
/// (`/proc/kmsg`), consume what others wait for, or never end.
const PSEUDO_FILE_SYSTEMS: [(i64, &str); 8] = [
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x0027_e0eb, "cgroupfs"),
    (0x6367_7270, "cgroup2fs"),
    (0xcafe_4a11, "bpffs"),
];

/// Reads `path` as UTF-8 text, refusing what [`Access`] and the rules above forbid; the error is
/// one line (without the path: callers name the file their own way).
pub(crate) fn read_text(path: &Path, access: Access, max: u64) -> Result<String, String> {
    // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (and is refused below).
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| e.to_string())?;
    // The file opened, not whatever the path names by now.
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    if let Some(fs) = pseudo_file_system(&file) {
        return Err(format!("a file of {fs}, not a regular file on disk"));
    }
    if meta.uid() != 0 {
        return Err(format!("owned by uid {}, not root", meta.uid()));
    }
    let (forbidden, who) = match access {
        Access::ReadableByAll => (0o022, "writable by group or others"),
        Access::OwnerOnly => (0o077, "readable or writable by group or others"),
    };
    if meta.mode() & forbidden != 0 {
        return Err(format!(
            "{who} (mode {:04o}): chmod {:o} it",
            meta.mode() & 0o7777,
            meta.mode() & 0o7777 & !forbidden
        ));
    }
    if access == Access::ReadableByAll && meta.mode() & 0o044 != 0o044 {
        return Err(format!(
            "not readable by group and others (mode {:04o}): a config holds no secret, and a \
             file kept from others may be another program's (chmod 644 it if it is a config)",
            meta.mode() & 0o7777
        ));
    }
    if meta.len() > max {
        return Err(format!("larger than {max} bytes"));
    }
    let mut text = String::new();
    // Bounded again: a file may grow after the check.
    (&file)
        .take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > max {
        return Err(format!("larger than {max} bytes"));
    }
    Ok(text)
}

fn pseudo_file_system(file: &std::fs::File) -> Option<&'static str> {
    // SAFETY: a zeroed statfs filled by fstatfs on a descriptor we hold open.
    let magic = unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        if libc::fstatfs(file.as_raw_fd(), &mut fs) != 0 {
            return None;
        }
        fs.f_type as i64
    };
    PSEUDO_FILE_SYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn tmp(name: &str, mode: u32, text: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("fdprof-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn refuses_what_could_block_or_leak() {
        // /proc/kmsg blocks a reader and eats the kernel's log: refused before any read.
        let kmsg = read_text(Path::new("/proc/kmsg"), Access::ReadableByAll, 64);
        if std::fs::File::open("/proc/kmsg").is_ok() {
            assert!(kmsg.unwrap_err().contains("procfs"));
        }
        assert!(
            read_text(Path::new("/dev/null"), Access::ReadableByAll, 64)
                .unwrap_err()
                .contains("not a regular file")
        );
        let open = tmp("open", 0o644, "x");
        assert!(
            read_text(&open, Access::OwnerOnly, 64)
                .unwrap_err()
                .contains("readable or writable by group or others")
        );
        let writable = tmp("writable", 0o666, "x");
        assert!(
            read_text(&writable, Access::ReadableByAll, 64)
                .unwrap_err()
                .contains("writable by group or others")
        );
        let big = tmp("big", 0o600, "0123456789");
        assert!(
            read_text(&big, Access::OwnerOnly, 4)
                .unwrap_err()
                .contains("larger than 4 bytes")
        );
    }

    #[test]
    fn reads_a_root_owned_file() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let ok = tmp("ok", 0o600, "secret\n");
        assert_eq!(
            read_text(&ok, Access::OwnerOnly, 64).unwrap(),
            "secret\n".to_string()
        );
        // A root file kept from others is no config, whatever it holds.
        for hidden in [0o640, 0o600, 0o604] {
            let file = tmp(&format!("hidden{hidden:o}"), hidden, "x");
            assert!(
                read_text(&file, Access::ReadableByAll, 64)
                    .unwrap_err()
                    .contains("not readable by group and others"),
                "{hidden:o}"
            );
        }
        let config = tmp("config", 0o644, "all = true\n");
        assert!(read_text(&config, Access::ReadableByAll, 64).is_ok());
    }
}
