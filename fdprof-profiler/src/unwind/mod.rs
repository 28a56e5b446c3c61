//! Whole user stacks without frame pointers: the programs send a copy of the top of a user
//! stack with its registers (`fdprof_common::copies`) once per (process, ip, depth); a thread
//! of fdprof's unwinds each copy with the mapped files' call-frame information as it arrives
//! (the process may not outlive the recording) and keeps the addresses under the copy's id,
//! which the figures carry as they carried a stack-map id.
//!
//! Reading a new file's sections happens on that thread, never in a snapshot or a request.
//! What it holds is bounded by what is alive: a process's stacks and modules go when the
//! profiler forgets the process, a file's sections when no process maps it.

mod elf;
mod process;
mod walk;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use aya::maps::perf::{PerfEvent, PerfEventArrayBuffer};
use aya::maps::{MapData, PerfEventArray, RingBuf};
use fdprof_common::copies::{COPY_ID_BASE, COPY_ID_END, CopyHeader, READ_EVERY_MS, WalkEnd};

use process::{Files, Process};
use walk::{Cache, Copy};

/// What the unwinder did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnwindCounts {
    /// Copies received and unwound.
    pub copies: u64,
    /// Walks that reached the thread's start.
    pub whole: u64,
    /// Walks cut short, by [`WalkEnd`] (in `WalkEnd::ALL`'s order).
    pub truncated: [u64; WalkEnd::ALL.len()],
    /// Records that were not copies (none unless the object and fdprof disagree).
    pub undecoded: u64,
    /// The slow-path probe's copies lost to a full perf buffer.
    pub lost: u64,
    /// Call-frame information held now, and the files it is of.
    pub held_bytes: u64,
    pub held_files: usize,
}

impl UnwindCounts {
    /// The walks since `earlier` (the memory held is now's).
    pub(crate) fn since(&self, earlier: &UnwindCounts) -> UnwindCounts {
        let mut truncated = self.truncated;
        for (t, e) in truncated.iter_mut().zip(earlier.truncated) {
            *t = t.saturating_sub(e);
        }
        UnwindCounts {
            copies: self.copies.saturating_sub(earlier.copies),
            whole: self.whole.saturating_sub(earlier.whole),
            truncated,
            undecoded: self.undecoded.saturating_sub(earlier.undecoded),
            lost: self.lost.saturating_sub(earlier.lost),
            ..*self
        }
    }
}

/// Whether `id` is a copy's (not a stack-map id).
pub(crate) fn is_copy(id: i32) -> bool {
    (COPY_ID_BASE..COPY_ID_END).contains(&id)
}

/// Walks kept at most: twice the stacks the kernel remembers as copied (`COPY_IDS`, an LRU);
/// past it the oldest go, so a process profiled for months holds a bounded number.
const MAX_STACKS: usize = 2 * fdprof_common::copies::COPY_IDS as usize;

/// A copy's walk, and whose it is.
struct Walk {
    tgid: u32,
    /// Its `COPY_IDS` key.
    key: u64,
    frames: Vec<u64>,
}

#[derive(Default)]
struct Store {
    stacks: HashMap<i32, Walk>,
    /// Ids oldest first, to let the oldest go past [`MAX_STACKS`].
    order: VecDeque<i32>,
    by_tgid: HashMap<u32, HashSet<i32>>,
    counts: UnwindCounts,
    /// Processes to forget, for the thread.
    gone: Vec<u32>,
    /// Drain passes asked for and done (`flush`).
    asked: u64,
    done: u64,
}

impl Store {
    fn insert(&mut self, id: i32, walk: Walk) {
        self.by_tgid.entry(walk.tgid).or_default().insert(id);
        if let Some(old) = self.stacks.insert(id, walk) {
            // An id used again (its CPU's sequence wrapped): the old walk is gone.
            self.unlist(id, old.tgid);
        }
        self.order.push_back(id);
        while self.stacks.len() > MAX_STACKS {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if let Some(w) = self.stacks.remove(&oldest) {
                self.unlist(oldest, w.tgid);
            }
        }
        // Ids forgotten with their process stay in `order` until they come up: bound it too.
        if self.order.len() > 2 * MAX_STACKS {
            let stacks = &self.stacks;
            self.order.retain(|id| stacks.contains_key(id));
        }
    }

    fn unlist(&mut self, id: i32, tgid: u32) {
        if let Some(ids) = self.by_tgid.get_mut(&tgid) {
            ids.remove(&id);
            if ids.is_empty() {
                self.by_tgid.remove(&tgid);
            }
        }
    }
}

struct Shared {
    store: Mutex<Store>,
    drained: Condvar,
    /// Wakes the thread before its sleep ends: a flush asked for, or the end.
    wake: Condvar,
    stop: AtomicBool,
}

/// The unwinding thread and what it found. Dropping it stops the thread.
pub(crate) struct Unwinding {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Unwinding {
    /// Starts reading `ring` (`STACK_COPIES`) and, where the slow-path probe sends copies, its
    /// perf buffers (`SLOW_COPIES`, one per online CPU).
    pub(crate) fn start(
        ring: RingBuf<MapData>,
        slow: Option<PerfEventArray<MapData>>,
    ) -> std::io::Result<Self> {
        let slow = match slow {
            Some(mut array) => {
                let cpus = aya::util::online_cpus().map_err(|(_, e)| e)?;
                let mut buffers = Vec::new();
                for cpu in cpus {
                    buffers.push(
                        array
                            .open(cpu, Some(SLOW_PAGES))
                            .map_err(std::io::Error::other)?,
                    );
                }
                buffers
            }
            None => Vec::new(),
        };
        let shared = Arc::new(Shared {
            store: Mutex::new(Store::default()),
            drained: Condvar::new(),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("fdprof-unwind".into())
            .spawn(move || run(ring, slow, &s))?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// Waits (up to `within`) until every copy sent so far is unwound.
    pub(crate) fn flush(&self, within: Duration) {
        let mut store = self.shared.store.lock().unwrap_or_else(|e| e.into_inner());
        store.asked += 1;
        let want = store.asked;
        self.shared.wake.notify_one();
        let _ = self
            .shared
            .drained
            .wait_timeout_while(store, within, |s| s.done < want);
    }

    /// The addresses of the copies among `ids`, innermost first, a truncated walk's last
    /// address its [`WalkEnd::address`].
    pub(crate) fn stacks(&self, ids: impl IntoIterator<Item = i32>) -> HashMap<i32, Vec<u64>> {
        let store = self.shared.store.lock().unwrap_or_else(|e| e.into_inner());
        ids.into_iter()
            .filter(|&id| is_copy(id))
            .filter_map(|id| Some((id, store.stacks.get(&id)?.frames.clone())))
            .collect()
    }

    pub(crate) fn counts(&self) -> UnwindCounts {
        self.shared
            .store
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .counts
    }

    /// Forgets the stacks of processes `tgids`; returns their `COPY_IDS` keys, for the caller
    /// to delete from the kernel's map.
    pub(crate) fn forget(&self, tgids: &[u32]) -> Vec<u64> {
        let mut store = self.shared.store.lock().unwrap_or_else(|e| e.into_inner());
        let mut keys = Vec::new();
        for tgid in tgids {
            for id in store.by_tgid.remove(tgid).unwrap_or_default() {
                if let Some(w) = store.stacks.remove(&id) {
                    keys.push(w.key);
                }
            }
        }
        store.gone.extend_from_slice(tgids);
        keys
    }
}

impl Drop for Unwinding {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The thread's own state: the processes and files it read.
#[derive(Default)]
struct Unwinder {
    files: Files,
    /// By tgid, with the address space they were read for.
    processes: HashMap<u32, (u64, Option<Process>)>,
    cache: Option<Box<Cache>>,
}

/// Pages of each CPU's perf buffer for the slow-path probe's copies: a site's copy is sent
/// once, when the site is claimed, so a few in flight a CPU.
const SLOW_PAGES: usize = 32;

type Walked = Vec<(CopyHeader, (Vec<u64>, Option<WalkEnd>))>;

/// Files no process maps are looked for at least this often (besides when a process goes).
const PRUNE_EVERY: Duration = Duration::from_secs(10);

/// The longest an idle unwinder sleeps between reads. The ring (4 MiB) would hold far more, but
/// a copy must be walked while its process lives: a process that lives 0.1 s on a busy host
/// lost that race 2 times in 10 at 80 ms, never in 15 at 20 ms (50 empty reads a second).
const IDLE_READ_MS: u64 = 20;

fn run(mut ring: RingBuf<MapData>, mut slow: Vec<PerfEventArrayBuffer<MapData>>, shared: &Shared) {
    let mut u = Unwinder::default();
    let mut idle_reads = 0u32;
    let mut pruned = std::time::Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let asked = shared.store.lock().map(|s| s.asked).unwrap_or(0);
        let mut walked = Walked::new();
        let (mut undecoded, mut lost) = (0, 0);
        while walked.len() < 256 {
            let Some(record) = ring.next() else { break };
            match decode(&record) {
                Some((h, bytes)) => walked.push((h, u.walk(&h, bytes))),
                None => undecoded += 1,
            }
        }
        for buffer in &mut slow {
            buffer.for_each(|event| match event {
                PerfEvent::Sample { head, tail } => {
                    let record = [head, tail].concat();
                    match decode(&record) {
                        Some((h, bytes)) => walked.push((h, u.walk(&h, bytes))),
                        None => undecoded += 1,
                    }
                }
                PerfEvent::Lost { count } => lost += count,
            });
        }
        let idle = walked.is_empty();
        let Ok(mut store) = shared.store.lock() else {
            return;
        };
        store.counts.undecoded += undecoded;
        store.counts.lost += lost;
        for (h, (frames, end)) in walked {
            store.counts.copies += 1;
            match end {
                None => store.counts.whole += 1,
                Some(e) => store.counts.truncated[e as usize - 1] += 1,
            }
            let walk = Walk {
                tgid: h.tgid,
                key: h.key,
                frames,
            };
            store.insert(h.id, walk);
        }
        let gone = std::mem::take(&mut store.gone);
        if !gone.is_empty() || pruned.elapsed() >= PRUNE_EVERY {
            for tgid in gone {
                u.processes.remove(&tgid);
            }
            u.files.prune();
            pruned = std::time::Instant::now();
        }
        (store.counts.held_bytes, store.counts.held_files) = u.files.held();
        if idle {
            store.done = asked;
            shared.drained.notify_all();
            // Idle, it reads less often (a wakeup costs more than an empty read): from every
            // READ_EVERY_MS up to every IDLE_READ_MS, at which the ring still holds a burst.
            let nap = Duration::from_millis(READ_EVERY_MS << idle_reads.min(3))
                .min(Duration::from_millis(IDLE_READ_MS));
            idle_reads += 1;
            if store.asked == asked && !shared.stop.load(Ordering::Relaxed) {
                let _ = shared.wake.wait_timeout(store, nap);
            }
        } else {
            idle_reads = 0;
        }
    }
}

fn decode(record: &[u8]) -> Option<(CopyHeader, &[u8])> {
    let (head, bytes) = record.split_at_checked(size_of::<CopyHeader>())?;
    // SAFETY: the length is checked; CopyHeader is Pod, valid for any bytes.
    let h: CopyHeader = unsafe { std::ptr::read_unaligned(head.as_ptr().cast()) };
    (h.len as usize <= bytes.len() && is_copy(h.id)).then(|| (h, &bytes[..h.len as usize]))
}

impl Unwinder {
    fn walk(&mut self, h: &CopyHeader, bytes: &[u8]) -> (Vec<u64>, Option<WalkEnd>) {
        let copy = Copy {
            ip: h.ip,
            sp: h.sp,
            bp: h.bp,
            bytes,
        };
        let cache = self.cache.get_or_insert_with(|| Box::new(Cache::new()));
        let files = &mut self.files;
        let entry = self
            .processes
            .entry(h.tgid)
            .or_insert_with(|| (h.mm, Process::read(h.tgid, files)));
        if entry.0 != h.mm {
            // An exec since: another program's mappings.
            *entry = (h.mm, Process::read(h.tgid, files));
        }
        let Some(process) = &mut entry.1 else {
            return ended(vec![h.ip], WalkEnd::ProcessGone);
        };
        let (mut frames, mut end) = walk::walk(process, &copy, cache);
        if end == Some(WalkEnd::UnknownCode) && process.may_reread() {
            // A library loaded since the maps were read: read them again, walk again.
            if let Some(fresh) = Process::read(h.tgid, files) {
                *process = fresh;
                (frames, end) = walk::walk(process, &copy, cache);
            }
        }
        match end {
            Some(e) => ended(frames, e),
            None => (frames, None),
        }
    }
}

fn ended(mut frames: Vec<u64>, end: WalkEnd) -> (Vec<u64>, Option<WalkEnd>) {
    frames.push(end.address());
    (frames, Some(end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(h: &CopyHeader, bytes: &[u8]) -> Vec<u8> {
        // SAFETY: CopyHeader is plain data without padding.
        let head = unsafe {
            std::slice::from_raw_parts(
                (h as *const CopyHeader).cast::<u8>(),
                size_of::<CopyHeader>(),
            )
        };
        [head, bytes].concat()
    }

    #[test]
    fn a_record_decodes_only_whole_and_with_a_copy_id() {
        let h = CopyHeader {
            id: COPY_ID_BASE + 7,
            len: 16,
            ..CopyHeader::default()
        };
        let whole = record(&h, &[1; 24]);
        let (got, bytes) = decode(&whole).unwrap();
        assert_eq!((got, bytes.len()), (h, 16));
        assert!(
            decode(&record(&h, &[1; 8])).is_none(),
            "shorter than it claims"
        );
        let stack_map_id = CopyHeader { id: 5, ..h };
        assert!(decode(&record(&stack_map_id, &[1; 16])).is_none());
        assert!(decode(&[0; 10]).is_none());
        assert!(!is_copy(COPY_ID_END) && !is_copy(-1) && is_copy(COPY_ID_BASE));
    }

    #[test]
    fn the_store_keeps_the_newest_walks_and_forgets_a_process_whole() {
        let mut store = Store::default();
        let walk = |tgid, key| Walk {
            tgid,
            key,
            frames: vec![key],
        };
        for i in 0..MAX_STACKS + 10 {
            store.insert(COPY_ID_BASE + i as i32, walk(1 + (i % 2) as u32, i as u64));
        }
        assert_eq!(store.stacks.len(), MAX_STACKS);
        assert!(!store.stacks.contains_key(&COPY_ID_BASE), "the oldest went");
        let listed: usize = store.by_tgid.values().map(HashSet::len).sum();
        assert_eq!(listed, MAX_STACKS);
        // An id used again replaces its walk.
        store.insert(COPY_ID_BASE + 20, walk(3, 7));
        assert_eq!(store.stacks[&(COPY_ID_BASE + 20)].tgid, 3);
        assert!(!store.by_tgid[&1].contains(&(COPY_ID_BASE + 20)));
        assert_eq!(store.by_tgid[&3].len(), 1);
    }

    #[test]
    fn counts_since_an_earlier_snapshot_keep_what_is_held_now() {
        let now = UnwindCounts {
            copies: 10,
            whole: 8,
            truncated: [1, 1, 0, 0, 0],
            held_bytes: 500,
            held_files: 3,
            ..UnwindCounts::default()
        };
        let then = UnwindCounts {
            copies: 4,
            whole: 4,
            held_bytes: 100,
            ..UnwindCounts::default()
        };
        let d = now.since(&then);
        assert_eq!((d.copies, d.whole, d.truncated), (6, 4, [1, 1, 0, 0, 0]));
        assert_eq!((d.held_bytes, d.held_files), (500, 3));
    }
}
