//! The files the daemon reads on someone's say-so (its config, its token, its TLS key): only a
//! regular file on a real file system, opened without blocking, owned by root or by the
//! daemon's own (effective) uid and writable by its owner alone, within a size, so that no path
//! (a FIFO, `/proc/kmsg`, a device, another user's file) can stall the daemon, feed it what it
//! did not ask for, or hand its secrets to others. One rule, whether the daemon runs as root or
//! as a user of its own (the DaemonSet's 65532): a secret may be readable by its owner and by
//! the file's group only where that group is one of the daemon's (a Kubernetes Secret mounted
//! 0440 with the pod's `fsGroup`), never by others.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Who may see the file besides its owner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// A config: anyone may read it, only its owner may change it. It holds no secret (a token
    /// has a file of its own), so one that group or others may not read is refused: it may be
    /// another program's secret (`/etc/shadow`, 0640; an ssh key, 0600), which a daemon run by
    /// `sudo` must not parse and quote back.
    ReadableByAll,
    /// A secret (the token, a TLS key): only its owner writes it; it is readable by its owner
    /// and, at most, by the file's group where that group is one of the daemon's; never by
    /// others.
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
    permitted(&Owner::of(&meta), access, &Daemon::current())?;
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

/// A file's owner, group and mode, as the checks read them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub mode: u32,
}

impl Owner {
    fn of(meta: &std::fs::Metadata) -> Owner {
        Owner {
            uid: meta.uid(),
            gid: meta.gid(),
            mode: meta.mode() & 0o7777,
        }
    }
}

/// The daemon's effective uid, and its groups (effective and supplementary).
#[derive(Debug, Clone)]
pub(crate) struct Daemon {
    pub uid: u32,
    pub groups: Vec<u32>,
}

impl Daemon {
    fn current() -> Daemon {
        // SAFETY: geteuid and getegid cannot fail; getgroups writes at most `n` entries into a
        // buffer of that many.
        unsafe {
            let mut groups = vec![libc::getegid()];
            let n = libc::getgroups(0, std::ptr::null_mut());
            if n > 0 {
                let mut more = vec![0 as libc::gid_t; n as usize];
                let got = libc::getgroups(n, more.as_mut_ptr());
                more.truncate(got.max(0) as usize);
                groups.extend(more);
            }
            Daemon {
                uid: libc::geteuid(),
                groups,
            }
        }
    }
}

/// The one rule, for a root daemon and a daemon of its own uid alike: the file is owned by root
/// or by the daemon's uid, writable by its owner alone, and (a secret) readable by others never
/// and by its group only where that group is one of the daemon's. One line, without the path.
pub(crate) fn permitted(file: &Owner, access: Access, daemon: &Daemon) -> Result<(), String> {
    let mode = file.mode;
    if file.uid != 0 && file.uid != daemon.uid {
        return Err(if daemon.uid == 0 {
            format!("owned by uid {}, not root", file.uid)
        } else {
            format!(
                "owned by uid {}, neither root nor the daemon's uid {}",
                file.uid, daemon.uid
            )
        });
    }
    if mode & 0o022 != 0 {
        let keep = match access {
            Access::ReadableByAll => !0o022,
            Access::OwnerOnly => !0o027,
        };
        return Err(format!(
            "writable by group or others (mode {mode:04o}): chmod {:o} it",
            mode & keep
        ));
    }
    match access {
        Access::ReadableByAll if mode & 0o044 != 0o044 => Err(format!(
            "not readable by group and others (mode {mode:04o}): a config holds no secret, and a \
             file kept from others may be another program's (chmod 644 it if it is a config)"
        )),
        Access::ReadableByAll => Ok(()),
        Access::OwnerOnly if mode & 0o007 != 0 => Err(format!(
            "readable by others (mode {mode:04o}): chmod {:o} it",
            mode & !0o007
        )),
        Access::OwnerOnly if mode & 0o070 != 0 && !daemon.groups.contains(&file.gid) => {
            Err(format!(
                "readable by its group {}, not one of the daemon's (mode {mode:04o}): chmod {:o} \
                 it, or give it the daemon's group",
                file.gid,
                mode & !0o077
            ))
        }
        Access::OwnerOnly => Ok(()),
    }
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
                .contains("readable by others (mode 0644): chmod 640 it")
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

    /// The one rule, root or not: owner root or the daemon; no write but the owner's; a
    /// secret's group bits only for one of the daemon's groups; no bits for others.
    #[test]
    fn one_rule_for_a_root_daemon_and_a_daemon_of_its_own() {
        let file = |uid, gid, mode| Owner { uid, gid, mode };
        let pod = Daemon {
            uid: 65532,
            groups: vec![65532, 65533],
        };
        let root = Daemon {
            uid: 0,
            groups: vec![0],
        };
        let secret = |f: Owner, d: &Daemon| permitted(&f, Access::OwnerOnly, d);
        // A Secret mounted with fsGroup, 0440: root's, the pod's group, read by that group.
        assert_eq!(secret(file(0, 65532, 0o440), &pod), Ok(()));
        assert_eq!(secret(file(0, 65533, 0o440), &pod), Ok(()));
        // The daemon's own file, and root's 0400/0600 for a root daemon.
        assert_eq!(secret(file(65532, 65532, 0o600), &pod), Ok(()));
        assert_eq!(secret(file(0, 0, 0o400), &root), Ok(()));
        assert_eq!(secret(file(0, 0, 0o440), &root), Ok(()));
        // Readable by others: refused, whoever the daemon is.
        for d in [&pod, &root] {
            let e = secret(file(0, d.groups[0], 0o444), d).unwrap_err();
            assert_eq!(e, "readable by others (mode 0444): chmod 440 it");
        }
        // Writable by group (or others): refused.
        let e = secret(file(0, 65532, 0o460), &pod).unwrap_err();
        assert_eq!(e, "writable by group or others (mode 0460): chmod 440 it");
        assert!(secret(file(0, 0, 0o602), &root).is_err());
        // Readable by a group not the daemon's: refused (root:shadow 0640 for a root daemon).
        let e = secret(file(0, 42, 0o640), &root).unwrap_err();
        assert!(
            e.starts_with("readable by its group 42, not one of the daemon's"),
            "{e}"
        );
        assert!(secret(file(0, 0, 0o440), &pod).is_err());
        // Owned by a third uid: refused.
        assert_eq!(
            secret(file(1000, 65532, 0o400), &pod).unwrap_err(),
            "owned by uid 1000, neither root nor the daemon's uid 65532"
        );
        assert_eq!(
            secret(file(65534, 0, 0o400), &root).unwrap_err(),
            "owned by uid 65534, not root"
        );
        // A config: readable by all, written by its owner alone, owned by root or the daemon.
        let config = |f: Owner, d: &Daemon| permitted(&f, Access::ReadableByAll, d);
        assert_eq!(config(file(0, 0, 0o644), &pod), Ok(()));
        assert_eq!(config(file(65532, 65532, 0o444), &pod), Ok(()));
        assert!(config(file(0, 0, 0o664), &pod).is_err());
        assert!(config(file(0, 0, 0o640), &root).is_err());
        assert!(config(file(1000, 1000, 0o644), &pod).is_err());
    }

    /// The same through real files: a 0440 file of the daemon's group is read, a third uid's is
    /// not (root only: chown).
    #[test]
    fn a_group_readable_secret_of_the_daemons_group_is_read() {
        if unsafe { libc::geteuid() } != 0 {
            return;
        }
        let egid = unsafe { libc::getegid() };
        let shared = tmp("shared", 0o440, "secret\n");
        std::os::unix::fs::chown(&shared, Some(0), Some(egid)).unwrap();
        assert_eq!(
            read_text(&shared, Access::OwnerOnly, 64).as_deref(),
            Ok("secret\n")
        );
        let theirs = tmp("theirs", 0o400, "secret\n");
        std::os::unix::fs::chown(&theirs, Some(4242), Some(egid)).unwrap();
        assert_eq!(
            read_text(&theirs, Access::OwnerOnly, 64).unwrap_err(),
            "owned by uid 4242, not root"
        );
    }
}
