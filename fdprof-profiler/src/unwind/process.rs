//! One process's address space as the unwinder sees it: its executable mappings, each a
//! framehop module over its file's call-frame information (shared with every process that
//! maps the file).

use std::collections::HashMap;
use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use framehop::Unwinder as _;
use framehop::x86_64::UnwinderX86_64;

use super::elf::{Bytes, UnwindInfo};
use crate::procfs::{self, ExecMapping};

/// A file's identity: device and inode, or the vDSO (one image per kernel and ABI).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum FileKey {
    Inode((u32, u32), u64),
    Vdso,
}

/// A file read, or `None` where it could not be (not tried again while it is kept), and when a
/// process last needed it.
struct Kept {
    info: Option<Arc<UnwindInfo>>,
    used: Instant,
}

/// The files read so far. A file no process maps any more is kept a while
/// ([`KEEP_UNMAPPED`]), within a bound ([`UNMAPPED_BYTES`]): short-lived processes of one
/// program, started again and again, do not read it again each time.
#[derive(Default)]
pub(crate) struct Files {
    files: HashMap<FileKey, Kept>,
}

/// How long a file no process maps is kept.
const KEEP_UNMAPPED: Duration = Duration::from_secs(30);
/// Call-frame information of files no process maps kept at most; past it the least recently
/// needed go first.
const UNMAPPED_BYTES: u64 = 64 << 20;

impl Files {
    fn get(&mut self, pid: u32, m: &ExecMapping) -> Option<(FileKey, Arc<UnwindInfo>)> {
        let key = if m.path == "[vdso]" {
            FileKey::Vdso
        } else if m.is_file() && m.inode != 0 {
            FileKey::Inode(m.dev, m.inode)
        } else {
            return None;
        };
        let kept = self.files.entry(key.clone()).or_insert_with(|| Kept {
            info: load(pid, m).map(Arc::new),
            used: Instant::now(),
        });
        kept.used = Instant::now();
        Some((key, kept.info.clone()?))
    }

    /// Forgets the files no process maps that were last needed [`KEEP_UNMAPPED`] ago, and past
    /// [`UNMAPPED_BYTES`] of such files the least recently needed.
    pub(crate) fn prune(&mut self) {
        let mapped = |k: &Kept| k.info.as_ref().is_some_and(|f| Arc::strong_count(f) > 1);
        self.files
            .retain(|_, k| mapped(k) || k.used.elapsed() < KEEP_UNMAPPED);
        let mut unmapped: Vec<(Instant, u64, FileKey)> = self
            .files
            .iter()
            .filter(|(_, k)| !mapped(k))
            .map(|(key, k)| (k.used, k.info.as_ref().map_or(0, |f| f.bytes), key.clone()))
            .collect();
        unmapped.sort_by_key(|u| u.0);
        let mut bytes: u64 = unmapped.iter().map(|u| u.1).sum();
        for (_, size, key) in unmapped {
            if bytes <= UNMAPPED_BYTES {
                break;
            }
            self.files.remove(&key);
            bytes -= size;
        }
    }

    /// Bytes of call-frame information held, and the files they are of.
    pub(crate) fn held(&self) -> (u64, usize) {
        let held = self.files.values().filter_map(|k| k.info.as_ref());
        (held.clone().map(|f| f.bytes).sum(), held.count())
    }
}

/// The mapped file behind `m`: through the mapping itself (`map_files`), else its path in the
/// process's root.
fn load(pid: u32, m: &ExecMapping) -> Option<UnwindInfo> {
    if m.path == "[vdso]" {
        return UnwindInfo::from_image(procfs::own::vdso_image()?).ok();
    }
    let file = procfs::map_file(pid, m.start, m.end)
        .or_else(|_| std::fs::File::open(procfs::in_root(pid, std::path::Path::new(&m.path))))
        .ok()?;
    UnwindInfo::from_file(file).ok()
}

/// The maps of a live process are read again at most this often when a walk meets an address
/// outside them (a library loaded since).
const REREAD_AFTER: Duration = Duration::from_secs(1);

pub(crate) struct Process {
    pub(crate) unwinder: UnwinderX86_64<Bytes>,
    /// The executable mappings, sorted: a return address outside them ends a walk.
    exec: Vec<Range<u64>>,
    /// The files this process's modules hold (so `Files::prune` keeps them).
    _held: Vec<Arc<UnwindInfo>>,
    read_at: Instant,
}

impl Process {
    /// From `/proc/PID/maps` now; `None` when the process is gone.
    pub(crate) fn read(pid: u32, files: &mut Files) -> Option<Self> {
        let maps = procfs::parse_maps(&procfs::maps(&pid.to_string())?);
        if maps.is_empty() {
            return None;
        }
        let mut unwinder = UnwinderX86_64::new();
        let mut exec = Vec::new();
        let mut held = Vec::new();
        for m in &maps {
            exec.push(m.start..m.end);
            let Some((_, info)) = files.get(pid, m) else {
                continue;
            };
            let bias = match m.path.as_str() {
                "[vdso]" => info.bias(m.start, 0),
                _ => info.bias(m.start, m.offset),
            };
            if let Some(bias) = bias {
                unwinder.add_module(info.module(&m.path, m.start..m.end, bias));
                held.push(info);
            }
        }
        exec.sort_by_key(|r| r.start);
        Some(Self {
            unwinder,
            exec,
            _held: held,
            read_at: Instant::now(),
        })
    }

    /// Whether `addr` lies in an executable mapping.
    pub(crate) fn is_code(&self, addr: u64) -> bool {
        let i = self.exec.partition_point(|r| r.start <= addr);
        i > 0 && addr < self.exec[i - 1].end
    }

    /// Whether the maps may be read again (an address outside them was met).
    pub(crate) fn may_reread(&self) -> bool {
        self.read_at.elapsed() >= REREAD_AFTER
    }
}
