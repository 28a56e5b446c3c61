//! User stacks of processes that may exit before the recording ends.
//!
//! At attach time and periodically the recorder calls [`UserSymbolizer::snapshot_maps`], which
//! remembers the executable mappings of `/proc/PID/maps` and opens each mapped file once (through
//! `/proc/PID/map_files/`, so a binary that is replaced or deleted later is still the one that was
//! mapped). [`UserSymbolizer::resolve`] turns an address into (file, file offset) through the
//! snapshot and asks blazesym to symbolize that file offset from the file's ELF symbol tables —
//! the process itself is not needed any more. Names come back demangled (Rust and C++).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer};

use fdprof_common::copies::WalkEnd;

use super::Frame;
use super::names::{DebugSources, How, Names};
pub(crate) use crate::procfs::{ExecMapping, parse_maps};

use super::kernel::UNKNOWN;

/// The kernel's name for the vDSO mapping.
const VDSO: &str = "[vdso]";

/// Mapped files kept open at most; past this, files are found again by path at resolve time.
const MAX_HELD_FILES: usize = 256;

/// How long files that no process maps are held before the symbolizer starts afresh.
const KEEP_UNMAPPED: Duration = Duration::from_secs(30);

/// Bytes of files that no process maps held at most past [`KEEP_UNMAPPED`].
const UNMAPPED_BYTES: u64 = 16 << 20;

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
    /// Its build id and where its names come from; `None` for pseudo mappings and files that
    /// are not ELF.
    names: Option<Names>,
    /// The held file's size, read once: what its symbol tables go with.
    size: u64,
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

fn size_of_held(held: &Option<File>) -> u64 {
    held.as_ref()
        .and_then(|f| f.metadata().ok())
        .map_or(0, |m| m.len())
}

fn new_symbolizer() -> OwnedSymbolizer {
    let symbolizer = Symbolizer::builder()
        .enable_code_info(false)
        .enable_inlined_fns(false)
        .enable_demangling(true)
        .build();
    OwnedSymbolizer(symbolizer)
}

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
    sources: DebugSources,
    /// Debug files that came from debuginfod so far: stacks symbolized before one came name
    /// differently after.
    names_came: u64,
    /// Since when [`UNMAPPED_BYTES`] (`unmapped_bytes`) of files opened are mapped by no
    /// process kept.
    unmapped_since: Option<Instant>,
    unmapped_bytes: u64,
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
        Self::with_sources(DebugSources::default())
    }

    /// A symbolizer that looks for stripped files' names in `sources` too.
    pub fn with_sources(sources: DebugSources) -> Self {
        Self {
            symbolizer: new_symbolizer(),
            procs: HashMap::new(),
            files: Vec::new(),
            file_index: HashMap::new(),
            held: 0,
            names: Vec::new(),
            name_index: HashMap::new(),
            sources,
            names_came: 0,
            unmapped_since: None,
            unmapped_bytes: UNMAPPED_BYTES,
        }
    }

    /// Forgets the processes `keep` says are gone; once the files opened for all of them pass
    /// `max_files`, starts afresh (a live process is read again when next seen), so a live view
    /// that runs for hours while processes come and go keeps its memory bounded. Files that no
    /// process kept maps go once [`UNMAPPED_BYTES`] of them have been held [`KEEP_UNMAPPED`]:
    /// a large program's symbol tables (megabytes) do not outlive its last process by much.
    pub(crate) fn trim(&mut self, keep: impl Fn(u32) -> bool, max_files: usize) {
        self.procs.retain(|pid, _| keep(*pid));
        if self.files.len() > max_files {
            let names_came = self.names_came;
            *self = Self::with_sources(std::mem::take(&mut self.sources));
            self.names_came = names_came;
            return;
        }
        let mut mapped = vec![false; self.files.len()];
        for m in self.procs.values().flat_map(|p| &p.maps) {
            mapped[m.file] = true;
        }
        // Starting blazesym afresh costs reading the live files' symbols again: worth it only
        // for large files (their symbol tables go with their size).
        let unmapped_bytes: u64 = (self.files.iter().zip(&mapped))
            .filter(|(_, mapped)| !**mapped)
            .map(|(f, _)| f.size)
            .sum();
        if unmapped_bytes < self.unmapped_bytes {
            self.unmapped_since = None;
        } else if self
            .unmapped_since
            .get_or_insert_with(Instant::now)
            .elapsed()
            >= KEEP_UNMAPPED
        {
            self.forget_unmapped(&mapped);
        }
    }

    /// Keeps only the files `mapped` says a process maps (and their names); blazesym's caches
    /// start afresh, as they hold every file they read.
    fn forget_unmapped(&mut self, mapped: &[bool]) {
        let mut moved = vec![usize::MAX; mapped.len()];
        for (i, file) in std::mem::take(&mut self.files).into_iter().enumerate() {
            if mapped[i] {
                moved[i] = self.files.len();
                self.files.push(file);
            }
        }
        self.file_index.retain(|_, i| {
            *i = moved[*i];
            *i != usize::MAX
        });
        self.held = self.files.iter().filter(|f| f._held.is_some()).count();
        let mut names = HashMap::new();
        for m in self.procs.values_mut().flat_map(|p| &mut p.maps) {
            m.file = moved[m.file];
            let next = names.len() as u32;
            m.module = *names.entry(m.module).or_insert(next);
        }
        let old = std::mem::take(&mut self.names);
        self.names = vec![String::new(); names.len()];
        for (from, to) in names {
            self.names[to as usize] = old[from as usize].clone();
        }
        self.name_index = (self.names.iter().cloned()).zip(0..).collect();
        self.symbolizer = new_symbolizer();
        self.unmapped_since = None;
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
                    ..Default::default()
                },
                None => Frame {
                    function: UNKNOWN.to_string(),
                    address: raw.then_some(a),
                    ..Default::default()
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
            if let Some(names) = &self.files[m.file].names {
                frames[i].build_id = names.build_id.clone();
                frames[i].file_offset = Some(file_offset);
            }
            let entry = by_file.entry(m.file).or_default();
            entry.0.push(i);
            entry.1.push(file_offset);
        }

        for (file, (indices, offsets)) in by_file {
            self.symbolize_file(file, &indices, &offsets, &mut frames);
        }
        frames
    }

    /// Names the frames `indices` of `frames`, at `offsets` in mapped file `file`: from its
    /// debug file by address where one was found, else from the file by offset.
    fn symbolize_file(
        &mut self,
        file: usize,
        indices: &[usize],
        offsets: &[u64],
        frames: &mut [Frame],
    ) {
        let mapped = &mut self.files[file];
        if let Some(names) = mapped.names.as_mut()
            && names.poll(&self.sources)
        {
            self.names_came += 1;
        }
        let (path, input, from_debug) = match mapped.names.as_ref() {
            Some(
                names @ Names {
                    how: How::Debug { path, .. },
                    ..
                },
            ) => {
                // An offset outside the loaded segments names nothing.
                let addrs = offsets
                    .iter()
                    .map(|&o| names.address_of(o).unwrap_or(u64::MAX))
                    .collect::<Vec<_>>();
                (path.clone(), addrs, true)
            }
            _ => match &mapped.source {
                Some(path) => (path.clone(), offsets.to_vec(), false),
                None => return,
            },
        };
        let mut elf = Elf::new(path);
        elf.debug_syms = false;
        let src = Source::Elf(elf);
        let input = match from_debug {
            true => Input::VirtOffset(input.as_slice()),
            false => Input::FileOffset(input.as_slice()),
        };
        match self.symbolizer.0.symbolize(&src, input) {
            Ok(results) => {
                for (&i, result) in indices.iter().zip(results) {
                    if let Symbolized::Sym(sym) = result {
                        frames[i].function = sym.name.into_owned();
                        frames[i].offset = sym.offset as u64;
                    }
                }
            }
            // A debug file blazesym cannot read: the file's own symbols from now on.
            Err(_) if from_debug => {
                if let Some(names) = self.files[file].names.as_mut() {
                    names.how = How::Own(super::NameSource::Dynsym);
                }
            }
            // Not an ELF file, or unreadable: its frames stay `[unknown]`, and it is not
            // tried again until another process's snapshot maps it.
            Err(_) => self.files[file].source = None,
        }
    }

    /// How many mapped files take their names from each source, and how many wait on a
    /// debuginfod server.
    pub(crate) fn name_sources(&self) -> (BTreeMap<super::NameSource, usize>, usize) {
        let mut by = BTreeMap::new();
        let mut waiting = 0;
        for names in self.files.iter().filter_map(|f| f.names.as_ref()) {
            *by.entry(names.source()).or_default() += 1;
            waiting += usize::from(matches!(names.how, How::Waiting { .. }));
        }
        (by, waiting)
    }

    /// What a recording says of its user frames' names (none before any file is seen).
    pub(crate) fn names_note(&self) -> Option<String> {
        let (by, waiting) = self.name_sources();
        super::names::note(&by, waiting, &self.sources)
    }

    /// The debuginfod failures not said yet, each kind once.
    pub(crate) fn take_name_failures(&self) -> Vec<String> {
        self.sources
            .debuginfod
            .as_ref()
            .map(|d| d.take_new_failures())
            .unwrap_or_default()
    }

    /// Looks in `sources` for the files seen from now on.
    pub(crate) fn set_sources(&mut self, sources: DebugSources) {
        self.sources = sources;
    }

    /// How many debug files came from debuginfod so far.
    pub(crate) fn names_came(&self) -> u64 {
        self.names_came
    }

    /// Waits, up to the sources' bound, for the debuginfod fetches of files still waiting;
    /// true when there were any (the stacks are worth symbolizing again: fetches may have
    /// ended before the wait, too).
    pub(crate) fn wait_for_names(&mut self) -> bool {
        let Some(d) = self.sources.debuginfod.clone() else {
            return false;
        };
        if self.sources.wait.is_zero() || self.name_sources().1 == 0 {
            return false;
        }
        d.wait_idle(Instant::now() + self.sources.wait);
        true
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
                if let Some(path) = &source {
                    let names = match self.files[idx].names.take() {
                        Some(names) => Some(names),
                        None => Names::settle(path, pid, &m.path, &self.sources),
                    };
                    self.files[idx] = MappedFile {
                        size: size_of_held(&held),
                        _held: held,
                        source,
                        names,
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
        // The vDSO names itself; a file's names are settled while its process lives.
        let names = match (m.is_file(), &source) {
            (true, Some(path)) => Names::settle(path, pid, &m.path, &self.sources),
            _ => None,
        };
        self.files.push(MappedFile {
            size: size_of_held(&held),
            _held: held,
            source,
            names,
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
#[path = "user_inner_tests.rs"]
mod tests;
