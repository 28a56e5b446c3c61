//! Cgroups followed as targets (`--cgroup PATH`): each path checked to be a cgroup directory
//! on a cgroup filesystem, named as the kernel names it (hierarchy id, cgroup id), and read:
//! its descendants and the processes in them. The programs add a process moved into one of them
//! at the move (tp_btf); [`CgroupSet::pass`] reads them again each second, which finds the
//! processes of cgroups made since and, where tp_btf is refused, the moves.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use fdprof_common::targets::{CGROUP_BOUND, CgroupKey, MAX_CGROUPS, TargetEntry, flag};

use super::Profiler;
use crate::error::{EXIT_USAGE, fatal};

/// `statfs` magic numbers of the two cgroup filesystems.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;

/// A cgroup given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    /// The directory, resolved (no symlink left).
    pub dir: PathBuf,
    /// Its path inside its hierarchy, as `/proc/PID/cgroup` shows it.
    pub path: String,
    /// Its hierarchy's id: 0 for v2, else the v1 hierarchy's number.
    pub hierarchy: u32,
}

impl Cgroup {
    /// Checks `arg` is a cgroup directory: it exists, and resolved it lies on a cgroup
    /// filesystem (a symlink out of one is refused). A one-line usage error otherwise.
    pub fn resolve(arg: &Path) -> Result<Cgroup> {
        let shown = crate::escape::name(&arg.display().to_string()).into_owned();
        let dir = std::fs::canonicalize(arg)
            .map_err(|e| fatal(EXIT_USAGE, format!("--cgroup {shown}: {e}")))?;
        if !dir.is_dir() || !on_cgroup_fs(&dir) {
            return Err(fatal(
                EXIT_USAGE,
                format!(
                    "--cgroup {shown}: not a cgroup (a directory under /sys/fs/cgroup, on a \
                     cgroup or cgroup2 filesystem)"
                ),
            ));
        }
        let (mount, hierarchy) = mount_of(&dir).ok_or_else(|| {
            fatal(
                EXIT_USAGE,
                format!("--cgroup {shown}: its cgroup hierarchy is not in /proc/self/mountinfo"),
            )
        })?;
        let inside = dir.strip_prefix(&mount).unwrap_or(Path::new(""));
        Ok(Cgroup {
            path: format!("/{}", inside.display()),
            hierarchy,
            dir,
        })
    }

    /// The key the kernel names this directory by.
    fn key(&self, dir: &Path) -> Option<CgroupKey> {
        Some(CgroupKey {
            hierarchy: self.hierarchy,
            _pad: 0,
            id: std::fs::metadata(dir).ok()?.ino(),
        })
    }
}

fn on_cgroup_fs(dir: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path and a zeroed statfs the call fills.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut fs) } != 0 {
        return false;
    }
    let magic = fs.f_type as i64;
    magic == CGROUP2_SUPER_MAGIC || magic == CGROUP_SUPER_MAGIC
}

/// The cgroup mount `dir` lies under (the deepest) and its hierarchy's id: 0 for cgroup2;
/// for a v1 mount, the line of `/proc/self/cgroup` whose controllers its options name.
fn mount_of(dir: &Path) -> Option<(PathBuf, u32)> {
    let mountinfo = crate::procfs::own::mountinfo()?;
    let own = crate::procfs::own::cgroup()?;
    let mut best: Option<(PathBuf, u32)> = None;
    for line in mountinfo.lines() {
        // `ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let Some(point) = left.split(' ').nth(4) else {
            continue;
        };
        let mut right = right.split(' ');
        let (Some(fstype), _, Some(options)) = (right.next(), right.next(), right.next()) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if !dir.starts_with(&point) || best.as_ref().is_some_and(|(b, _)| b.starts_with(&point)) {
            continue;
        }
        let hierarchy = match fstype {
            "cgroup2" => 0,
            "cgroup" => {
                let options: BTreeSet<&str> = options.split(',').collect();
                let Some(id) = own.lines().find_map(|l| {
                    let mut f = l.splitn(3, ':');
                    let (id, controllers) = (f.next()?, f.next()?);
                    (!controllers.is_empty() && controllers.split(',').all(|c| options.contains(c)))
                        .then(|| id.parse().ok())
                        .flatten()
                }) else {
                    continue;
                };
                id
            }
            _ => continue,
        };
        best = Some((point, hierarchy));
    }
    best
}

/// A mountinfo path: spaces, tabs, newlines and backslashes are octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let n = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |n, d| n * 8 + u32::from(d - b'0'));
            out.push(n as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The cgroups followed, each a slot of the target set, and what was read of them.
#[derive(Debug, Clone, Default)]
pub struct CgroupSet {
    /// Each cgroup and its slot in the target set.
    pub cgroups: Vec<(Cgroup, u32)>,
    /// The processes the last pass added (their maps to read).
    pub joined: Vec<u32>,
    /// Processes that could not be added, the set being full, over every pass.
    pub refused: u64,
}

/// What one read of the cgroups found.
#[derive(Debug, Default)]
pub(crate) struct Read {
    /// The keys of every followed cgroup and descendant, with their slot, and each hierarchy's
    /// mark (id 0).
    pub keys: BTreeMap<CgroupKey, u32>,
    /// The processes in them now, with their slot.
    pub processes: BTreeMap<u32, u32>,
    /// The descendants past [`CGROUP_BOUND`]: not followed.
    pub past_bound: BTreeSet<CgroupKey>,
}

impl CgroupSet {
    /// `cgroups`, each its own slot: its index.
    pub fn new(cgroups: Vec<Cgroup>) -> Self {
        Self::with_slots(cgroups.into_iter().zip(0..).collect())
    }

    /// `cgroups`, each with the slot given.
    pub fn with_slots(cgroups: Vec<(Cgroup, u32)>) -> Self {
        Self {
            cgroups,
            joined: Vec::new(),
            refused: 0,
        }
    }

    /// Every followed cgroup and descendant, and the processes in them, within the bounds: at
    /// most [`CGROUP_BOUND`] descendants in all (and [`MAX_CGROUPS`] keys); those past it are
    /// only listed.
    pub(crate) fn read(&mut self) -> Read {
        let mut read = Read::default();
        let mut descendants = 0;
        for &(ref cgroup, slot) in &self.cgroups {
            read.keys.insert(
                CgroupKey {
                    hierarchy: cgroup.hierarchy,
                    _pad: 0,
                    id: 0,
                },
                u32::MAX,
            );
            let mut stack = vec![(cgroup.dir.clone(), false)];
            while let Some((dir, below)) = stack.pop() {
                let Some(key) = cgroup.key(&dir) else {
                    continue; // removed meanwhile
                };
                let within = !below
                    || (descendants < CGROUP_BOUND as usize
                        && read.keys.len() < MAX_CGROUPS as usize);
                if !within {
                    if !read.keys.contains_key(&key) {
                        read.past_bound.insert(key);
                    }
                } else if read.keys.insert(key, slot).is_none() {
                    descendants += usize::from(below);
                    read_procs(&dir, slot, &mut read.processes);
                } else {
                    // Read already, below another followed cgroup.
                    continue;
                }
                stack.extend(subdirs(&dir).map(|d| (d, true)));
            }
        }
        read.past_bound.retain(|k| !read.keys.contains_key(k));
        read
    }
}

/// The processes of cgroup `dir`, with `slot`, into `processes` (a process already there keeps
/// its own).
fn read_procs(dir: &Path, slot: u32, processes: &mut BTreeMap<u32, u32>) {
    if let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            processes.entry(pid).or_insert(slot);
        }
    }
}

/// The cgroups directly below `dir`.
fn subdirs(dir: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
}

impl CgroupSet {
    /// Reads the cgroups and brings the programs' set up to date: the cgroups to watch for
    /// moves, their processes not yet in the set added, and those that joined by their cgroup
    /// but are no longer in one removed (moves out where tp_btf is refused). Returns the
    /// processes added now ([`CgroupSet::joined`]).
    pub fn pass(&mut self, profiler: &mut Profiler) -> Result<&[u32]> {
        // Members first: one the programs add after this read is kept whatever follows.
        let members = profiler.targets()?;
        let read = self.read();
        profiler.follow_cgroups(&read.keys, read.past_bound)?;
        let own = std::process::id();
        self.joined.clear();
        for (&pid, &slot) in &read.processes {
            if pid == own || members.contains_key(&pid) {
                continue;
            }
            let entry = TargetEntry {
                slot,
                flags: flag::CHILDREN | flag::BY_CGROUP,
            };
            match profiler.add_target(pid, entry)? {
                Ok(()) => self.joined.push(pid),
                Err(_) => self.refused += 1,
            }
        }
        for (&pid, entry) in &members {
            if entry.flags & flag::BY_CGROUP != 0 && !read.processes.contains_key(&pid) {
                profiler.remove_target(pid)?;
            }
        }
        Ok(&self.joined)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape(r"/a\040b"), "/a b");
        assert_eq!(unescape("/sys/fs/cgroup"), "/sys/fs/cgroup");
    }

    #[test]
    fn this_process_cgroup_resolves() {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let Some(v2) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
            return; // no v2 hierarchy on this host
        };
        let unified = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.join("cgroup.procs").exists() && on_cgroup_fs(p))
            .unwrap();
        let c = Cgroup::resolve(&unified.join(v2.trim_start_matches('/'))).unwrap();
        assert_eq!((c.path.as_str(), c.hierarchy), (v2, 0));
        assert!(Cgroup::resolve(Path::new("/proc")).is_err());
        assert!(Cgroup::resolve(Path::new("/no/such/cgroup")).is_err());
    }
}
