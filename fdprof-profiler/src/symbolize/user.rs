//! User stacks of processes that may exit before the recording ends.
//!
//! At attach time and periodically the recorder calls [`UserSymbolizer::snapshot_maps`], which
//! remembers the executable mappings of `/proc/PID/maps` and opens each mapped file once (through
//! `/proc/PID/map_files/`, so a binary that is replaced or deleted later is still the one that was
//! mapped). [`UserSymbolizer::resolve`] turns an address into (file, file offset) through the
//! snapshot and asks blazesym to symbolize that file offset from the file's ELF symbol tables —
//! the process itself is not needed any more. Names come back demangled (Rust and C++).

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use fdprof_common::copies::WalkEnd;

use super::Frame;
pub(crate) use crate::procfs::{ExecMapping, parse_maps};

use super::kernel::UNKNOWN;

/// The kernel's name for the vDSO mapping.
const VDSO: &str = "[vdso]";

/// Mapped files kept open at most; past this, files are found again by path at resolve time.
const MAX_HELD_FILES: usize = 256;

/// A miss (address outside every known mapping) re-reads the maps of a live process at most this
/// often, to catch libraries loaded since the last snapshot.
const REFRESH_ON_MISS: Duration = Duration::from_secs(1);

/// Identity of a mapped file: device and inode (a rebuilt binary at the same path is another
/// file); pseudo mappings (`[vdso]`) by name.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum FileKey {
    Inode((u32, u32), u64),
    Pseudo(String),
}

#[derive(Debug)]
struct MappedFile {
    /// Kept open so the mapped file stays readable after it is replaced or unlinked.
    _held: Option<File>,
    /// What blazesym opens: `/proc/self/fd/N` of the held file, or the path. `None` for pseudo
    /// mappings and for files found unreadable.
    source: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy)]
struct Mapping {
    start: u64,
    end: u64,
    offset: u64,
    file: usize,
    /// The frame's module: the file name this process mapped it by (in `names`). A file has
    /// as many names as it has hard links, and each process's frames carry its own.
    module: u32,
}

#[derive(Debug)]
struct Snapshot {
    /// Sorted by `start`, non-overlapping.
    maps: Vec<Mapping>,
    taken: Instant,
    /// `starttime` of `/proc/PID/stat`: tells a reused pid from the process snapshotted before.
    start_time: Option<u64>,
}

impl Snapshot {
    fn find(&self, addr: u64) -> Option<&Mapping> {
        let idx = self
            .maps
            .partition_point(|m| m.start <= addr)
            .checked_sub(1)?;
        let m = &self.maps[idx];
        (addr < m.end).then_some(m)
    }
}

/// blazesym's [`Symbolizer`] is `!Send` only because its caches use `Rc`/`Cell` and it can hold
/// a caller-supplied process dispatcher.
struct OwnedSymbolizer(Symbolizer);

// SAFETY: the symbolizer is built in `UserSymbolizer::new` without a process dispatcher and
// without externally supplied resolvers, is never handed out, and every value it returns
// (borrowing it) is turned into owned data before `resolve` returns. All its `Rc`s are therefore
// reachable only through this one owner and move between threads together with it; blazesym
// keeps no thread-local state. It stays `!Sync`.
unsafe impl Send for OwnedSymbolizer {}

/// Symbolizes user stacks through snapshots of `/proc/PID/maps`. `Send` (it can move into a
/// task or thread) but not `Sync`.
pub struct UserSymbolizer {
    symbolizer: OwnedSymbolizer,
    procs: HashMap<u32, Snapshot>,
    files: Vec<MappedFile>,
    file_index: HashMap<FileKey, usize>,
    held: usize,
    /// The mapped files' names, each once.
    names: Vec<String>,
    name_index: HashMap<String, u32>,
}

impl Default for UserSymbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for UserSymbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSymbolizer")
            .field("processes", &self.procs.len())
            .field("files", &self.files.len())
            .field("held_files", &self.held)
            .finish()
    }
}

impl UserSymbolizer {
    pub fn new() -> Self {
        let symbolizer = Symbolizer::builder()
            .enable_code_info(false)
            .enable_inlined_fns(false)
            .enable_demangling(true)
            .build();
        Self {
            symbolizer: OwnedSymbolizer(symbolizer),
            procs: HashMap::new(),
            files: Vec::new(),
            file_index: HashMap::new(),
            held: 0,
            names: Vec::new(),
            name_index: HashMap::new(),
        }
    }

    /// Forgets the processes `keep` says are gone; once the files opened for all of them pass
    /// `max_files`, starts afresh (a live process is read again when next seen), so a live view
    /// that runs for hours while processes come and go keeps its memory bounded.
    pub(crate) fn trim(&mut self, keep: impl Fn(u32) -> bool, max_files: usize) {
        self.procs.retain(|pid, _| keep(*pid));
        if self.files.len() > max_files {
            *self = Self::new();
        }
    }

    /// Reads `/proc/PID/maps` and remembers its executable mappings, opening files not seen
    /// before. When the process is gone (or the maps cannot be read) the previous snapshot is kept
    /// and `false` is returned. Mappings of the previous snapshot that no new mapping overlaps
    /// are kept too, so addresses in a library unloaded since still resolve.
    pub(crate) fn snapshot_maps(&mut self, pid: u32) -> bool {
        let Some(text) = crate::procfs::maps(&pid.to_string()) else {
            return false;
        };
        let start_time = process_start_time(pid);
        let parsed = parse_maps(&text);
        if parsed.is_empty() {
            // A zombie or kernel thread shows no maps: nothing better than what we had.
            return false;
        }
        let mut maps: Vec<Mapping> = parsed
            .iter()
            .map(|m| Mapping {
                start: m.start,
                end: m.end,
                offset: m.offset,
                file: self.file_for(pid, m),
                module: self.name_of(&m.path),
            })
            .collect();
        maps.sort_by_key(|m| m.start);
        let old = self.procs.get(&pid).filter(|old| {
            // A different process under a reused pid shares nothing with the old snapshot.
            old.start_time.is_none() || start_time.is_none() || old.start_time == start_time
        });
        if let Some(old) = old {
            let fresh = maps.clone();
            let overlaps = |o: &Mapping| {
                let i = fresh.partition_point(|m| m.end <= o.start);
                fresh.get(i).is_some_and(|m| m.start < o.end)
            };
            maps.extend(old.maps.iter().filter(|o| !overlaps(o)).copied());
            maps.sort_by_key(|m| m.start);
        }
        self.procs.insert(
            pid,
            Snapshot {
                maps,
                taken: Instant::now(),
                start_time,
            },
        );
        true
    }

    #[cfg(test)]
    /// Whether a snapshot of `pid` exists.
    pub(crate) fn has_snapshot(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// Symbolizes the addresses of one user stack of process `pid` (thread-group id), in order.
    ///
    /// Each frame has the function name (demangled) and the offset into it, and the mapped file's
    /// name as module. An address inside a mapping whose file has no symbol for it gives function
    /// `[unknown]` with the module and, as offset, the file offset (enough to look it up later);
    /// an address outside every known mapping gives `[unknown]`, offset 0, no module. `address`
    /// is filled only when `raw` is set. A process never snapshotted is snapshotted now.
    pub(crate) fn resolve(&mut self, pid: u32, addrs: &[u64], raw: bool) -> Vec<Frame> {
        if !self.procs.contains_key(&pid) {
            self.snapshot_maps(pid);
        }
        let missing = |procs: &HashMap<u32, Snapshot>| {
            let snap = procs.get(&pid);
            addrs
                .iter()
                .filter(|&&a| WalkEnd::from_address(a).is_none())
                .any(|&a| snap.and_then(|s| s.find(a)).is_none())
        };
        let stale = self
            .procs
            .get(&pid)
            .is_none_or(|s| s.taken.elapsed() >= REFRESH_ON_MISS);
        if stale && missing(&self.procs) {
            self.snapshot_maps(pid);
        }

        let mut frames: Vec<Frame> = addrs
            .iter()
            .map(|&a| match WalkEnd::from_address(a) {
                // Where an unwound walk stopped short, and why: no address to give.
                Some(end) => Frame {
                    function: end.name().to_string(),
                    offset: 0,
                    module: None,
                    address: None,
                },
                None => Frame {
                    function: UNKNOWN.to_string(),
                    offset: 0,
                    module: None,
                    address: raw.then_some(a),
                },
            })
            .collect();
        let Some(snap) = self.procs.get(&pid) else {
            return frames;
        };

        // Group by file so each file is symbolized in one batch.
        let mut by_file: HashMap<usize, (Vec<usize>, Vec<u64>)> = HashMap::new();
        for (i, &addr) in addrs.iter().enumerate() {
            let Some(m) = snap.find(addr) else { continue };
            let file_offset = addr - m.start + m.offset;
            frames[i].module = Some(self.names[m.module as usize].clone());
            frames[i].offset = file_offset;
            let entry = by_file.entry(m.file).or_default();
            entry.0.push(i);
            entry.1.push(file_offset);
        }

        for (file, (indices, offsets)) in by_file {
            let Some(path) = self.files[file].source.clone() else {
                continue;
            };
            let mut elf = Elf::new(path);
            elf.debug_syms = false;
            let src = Source::Elf(elf);
            match self
                .symbolizer
                .0
                .symbolize(&src, Input::FileOffset(offsets.as_slice()))
            {
                Ok(results) => {
                    for (i, result) in indices.into_iter().zip(results) {
                        if let Symbolized::Sym(sym) = result {
                            frames[i].function = sym.name.into_owned();
                            frames[i].offset = sym.offset as u64;
                        }
                    }
                }
                // Not an ELF file, or unreadable: its frames stay `[unknown]`, and it is not
                // tried again until another process's snapshot maps it.
                Err(_) => self.files[file].source = None,
            }
        }
        frames
    }

    /// Index of the file behind `m`, opening it the first time it is seen. A file seen before
    /// and not held open is opened again through this process: the path it was first found by
    /// goes with the process that mapped it then (a short-lived one, an `ldd`, may be gone).
    fn file_for(&mut self, pid: u32, m: &ExecMapping) -> usize {
        let key = if m.is_file() && m.inode != 0 {
            FileKey::Inode(m.dev, m.inode)
        } else {
            // One `[vdso]` per image length: a process of another ABI maps another image.
            FileKey::Pseudo(format!("{} {}", m.path, m.end - m.start))
        };
        if let Some(&idx) = self.file_index.get(&key) {
            let file = &self.files[idx];
            if m.is_file() && file._held.is_none() && (file.source.is_none() || self.can_hold()) {
                let (held, source) = self.open_file(pid, m);
                if source.is_some() {
                    self.files[idx] = MappedFile {
                        _held: held,
                        source,
                    };
                }
            }
            return idx;
        }
        let (held, source) = if m.path == VDSO {
            // fdprof's own image, if this process maps one of the same length.
            match super::vdso::Vdso::own().filter(|v| v.len == m.end - m.start) {
                Some(vdso) => {
                    let path = vdso.path();
                    (Some(vdso.into_file()), Some(path))
                }
                None => (None, None),
            }
        } else {
            self.open_file(pid, m)
        };
        self.files.push(MappedFile {
            _held: held,
            source,
        });
        self.file_index.insert(key, self.files.len() - 1);
        self.files.len() - 1
    }

    fn can_hold(&self) -> bool {
        self.held < MAX_HELD_FILES
    }

    /// The file of mapping `m` of `pid`, held open where the bound allows, and what blazesym
    /// opens for it.
    fn open_file(&mut self, pid: u32, m: &ExecMapping) -> (Option<File>, Option<PathBuf>) {
        if !m.is_file() {
            return (None, None);
        }
        if !self.can_hold() {
            return (None, (!m.deleted).then(|| in_its_root(pid, &m.path)));
        }
        // The exact mapped file while the process lives (map_files: CAP_SYS_ADMIN, or
        // CAP_CHECKPOINT_RESTORE), else the path in the process's own root (another
        // container's files, where fdprof runs in a container of its own), never the path
        // in fdprof's.
        let opened = crate::procfs::map_file(pid, m.start, m.end)
            .ok()
            .or_else(|| {
                (!m.deleted)
                    .then(|| File::open(in_its_root(pid, &m.path)).ok())
                    .flatten()
            });
        match opened {
            Some(f) => {
                self.held += 1;
                let path = crate::procfs::own::fd_path(f.as_raw_fd());
                (Some(f), Some(path))
            }
            None => (None, (!m.deleted).then(|| in_its_root(pid, &m.path))),
        }
    }

    /// The index in `names` of the file name of `path` (the whole of a pseudo mapping's).
    fn name_of(&mut self, path: &str) -> u32 {
        let name = path.rsplit('/').next().unwrap_or(path);
        if let Some(&i) = self.name_index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        let i = (self.names.len() - 1) as u32;
        self.name_index.insert(name.to_string(), i);
        i
    }
}

/// `path` as process `pid` sees it: under its root directory (`/proc/PID/root`, which follows
/// its mount namespace and chroot).
fn in_its_root(pid: u32, path: &str) -> PathBuf {
    crate::procfs::in_root(pid, std::path::Path::new(path))
}

/// Field 22 (`starttime`, clock ticks since boot) of `/proc/PID/stat`.
fn process_start_time(pid: u32) -> Option<u64> {
    crate::procfs::stat_fields(&pid.to_string())?
        .get(19)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
5581a0a00000-5581a0a28000 r--p 00000000 fd:01 1311       /usr/bin/fdprof
5581a0a28000-5581a0b9d000 r-xp 00028000 fd:01 1311       /usr/bin/fdprof
5581a0b9d000-5581a0bf5000 r--p 0019d000 fd:01 1311       /usr/bin/fdprof
5581a2000000-5581a2021000 rw-p 00000000 00:00 0          [heap]
7f1c00000000-7f1c00021000 rwxp 00000000 00:00 0 
7f1c3d828000-7f1c3d9bd000 r-xp 00028000 103:02 917533    /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c3da00000-7f1c3da10000 r-xp 00001000 00:1f 42         /tmp/dir with spaces/lib x.so (deleted)
7ffd1a3f2000-7ffd1a3f4000 r-xp 00000000 00:00 0          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0  [vsyscall]
";

    /// A real `[vdso]` frame: this process's own `clock_gettime` in its vDSO, found through
    /// the dynamic linker, symbolized through the process's maps like a target's would be.
    #[test]
    fn vdso_frames_get_their_function_names() {
        // SAFETY: NUL-terminated names; RTLD_NOLOAD only looks up an object already loaded (the
        // dynamic linker registers the vDSO under this name).
        let addr = unsafe {
            let vdso = libc::dlopen(
                c"linux-vdso.so.1".as_ptr(),
                libc::RTLD_NOW | libc::RTLD_NOLOAD,
            );
            assert!(!vdso.is_null(), "no vDSO loaded in this process");
            libc::dlsym(vdso, c"__vdso_clock_gettime".as_ptr()) as u64
        };
        assert_ne!(addr, 0, "the vDSO has no __vdso_clock_gettime");
        let mut u = UserSymbolizer::new();
        let f = u.resolve(std::process::id(), &[addr + 4], false);
        assert_eq!(f[0].module.as_deref(), Some("[vdso]"));
        assert!(
            f[0].function.contains("clock_gettime"),
            "a vDSO address named {:?}",
            f[0].function
        );
        assert_eq!(f[0].offset, 4);
    }

    #[test]
    fn maps_parser_keeps_named_executable_mappings() {
        let m = parse_maps(MAPS);
        let paths: Vec<&str> = m.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/usr/bin/fdprof",
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                "/tmp/dir with spaces/lib x.so",
                "[vdso]",
                "[vsyscall]",
            ]
        );
        assert_eq!(
            m[0],
            ExecMapping {
                start: 0x5581a0a28000,
                end: 0x5581a0b9d000,
                offset: 0x28000,
                dev: (0xfd, 1),
                inode: 1311,
                path: "/usr/bin/fdprof".into(),
                deleted: false,
            }
        );
        assert_eq!(m[1].dev, (0x103, 2));
        assert!(m[2].deleted && !m[1].deleted);
        assert_eq!(m[4].start, 0xffffffffff600000);
        assert!(parse_maps("garbage\n\n12-34 r-xp zz 00:00 0 /x\n").is_empty());
    }

    #[test]
    fn a_file_first_seen_through_a_gone_process_is_opened_through_a_live_one() {
        let text = crate::procfs::maps("self").unwrap();
        let exe = parse_maps(&text).into_iter().find(|m| m.is_file()).unwrap();
        let mut u = UserSymbolizer::new();
        // As an `ldd` that mapped the file and exited before it was opened.
        let gone = u32::MAX - 7;
        let idx = u.file_for(gone, &exe);
        assert!(u.files[idx]._held.is_none());
        assert_eq!(u.files[idx].source, Some(in_its_root(gone, &exe.path)));
        let own = std::process::id();
        assert_eq!(u.file_for(own, &exe), idx, "one file, one entry");
        assert!(
            u.files[idx]._held.is_some(),
            "held through the live process"
        );
        // A hard link of it: the same file, named by the path its process mapped.
        let linked = ExecMapping {
            path: "/elsewhere/another-name".into(),
            ..exe.clone()
        };
        assert_eq!(u.file_for(own, &linked), idx);
        let (a, b) = (u.name_of(&exe.path), u.name_of(&linked.path));
        assert_ne!(a, b);
        assert_eq!(u.names[b as usize], "another-name");
        assert_eq!(u.name_of(&linked.path), b, "each name once");
    }

    #[test]
    fn translation_through_a_snapshot_of_an_exited_process() {
        let mut u = UserSymbolizer::new();
        // A pid that cannot exist: only the injected snapshot is there.
        let pid = u32::MAX - 7;
        let maps: Vec<Mapping> = parse_maps(MAPS)
            .iter()
            .map(|m| Mapping {
                start: m.start,
                end: m.end,
                offset: m.offset,
                file: {
                    let mut m = m.clone();
                    m.deleted = true; // nothing is opened by path
                    u.file_for(pid, &m)
                },
                module: u.name_of(&m.path),
            })
            .collect();
        u.procs.insert(
            pid,
            Snapshot {
                maps,
                taken: Instant::now(),
                start_time: None,
            },
        );
        assert!(!u.snapshot_maps(pid), "no such process");
        assert!(u.has_snapshot(pid), "last snapshot kept");
        let f = u.resolve(pid, &[0x7f1c3d828010, 0x7ffd1a3f2001, 0x1000], false);
        assert_eq!(f[0].function, UNKNOWN);
        assert_eq!(f[0].module.as_deref(), Some("libc.so.6"));
        assert_eq!(f[0].offset, 0x28010);
        assert_eq!(f[1].module.as_deref(), Some("[vdso]"));
        assert_eq!((f[2].module.as_deref(), f[2].offset), (None, 0));
        assert!(f.iter().all(|f| f.address.is_none()));
        let raw = u.resolve(pid, &[0x1000], true);
        assert_eq!(raw[0].address, Some(0x1000));
    }

    /// Gone processes are forgotten, and past the file budget everything is, so memory stays
    /// bounded however many processes come and go; a live one is read again when next seen.
    #[test]
    fn trim_forgets_the_gone_and_bounds_the_files() {
        let me = std::process::id();
        let mut u = UserSymbolizer::new();
        assert!(u.snapshot_maps(me));
        assert!(u.has_snapshot(me));
        u.trim(|pid| pid == me, usize::MAX);
        assert!(u.has_snapshot(me), "a live process stays");
        u.trim(|_| false, usize::MAX);
        assert!(!u.has_snapshot(me), "a gone process is forgotten");
        assert!(u.snapshot_maps(me));
        assert!(!u.files.is_empty());
        u.trim(|_| true, 0);
        assert!(
            u.files.is_empty() && !u.has_snapshot(me),
            "over the budget: afresh"
        );
        // Resolving reads the process again.
        let frames = u.resolve(me, &[start_time_of_this_process as *const () as u64], false);
        assert_eq!(frames.len(), 1);
        assert!(u.has_snapshot(me));
    }

    #[test]
    fn start_time_of_this_process() {
        let own = process_start_time(std::process::id()).unwrap();
        assert!(own > 0);
        assert_eq!(process_start_time(1).map(|t| t <= own), Some(true));
        assert_eq!(process_start_time(u32::MAX - 7), None);
    }

    #[test]
    fn is_send() {
        fn send<T: Send>() {}
        send::<UserSymbolizer>();
    }
}
