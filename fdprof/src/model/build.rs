//! Turns the kernel's aggregates ([`Snapshot`]) into the model's figures, symbolizing stacks.

use std::collections::HashMap;

use fdprof_common::{
    HIST_SLOTS,
    contention::LockKind,
    counters::{drop, global, hist, per_syscall},
    fnops::{counter, kind, op},
    syscalls::{FD_SYSCALLS, N_SYSCALLS},
};

use super::{
    hist::Log2Hist,
    operation,
    recording::{
        ContentionSite, DropCount, Frame, FunctionStats, ScanStats, StackWalks, SyscallStats,
        TableStats,
    },
};
use crate::collect::snapshot::Snapshot;
use crate::symbolize::{KernelSymbols, UserSymbolizer};

fn hist_from_slots(slots: &[u64], max: u64, sum: u64) -> Log2Hist {
    let mut h = Log2Hist::default();
    for (k, &n) in slots.iter().enumerate() {
        h.add_slot(k, n);
    }
    h.max = max;
    h.sum = sum;
    h
}

/// Upper bound of the highest non-empty slot: the best max a bare log2 histogram gives.
fn slots_max(slots: &[u64]) -> u64 {
    slots
        .iter()
        .rposition(|&n| n > 0)
        .map_or(0, |k| super::hist::slot_range(k).1)
}

/// Drops the frames of fdprof's own program and the tracing plumbing that called it from the
/// top of a kernel stack, so the stack starts at the lock function.
fn trim_probe_frames(mut frames: Vec<Frame>) -> Vec<Frame> {
    let plumbing = |f: &Frame| {
        let n = f.function.as_str();
        n == "[unknown]"
            || n.starts_with("bpf_")
            || n.starts_with("__bpf_")
            || n.starts_with("__traceiter_")
            || n.starts_with("perf_trace")
            || n.starts_with("trace_call_bpf")
            || n.starts_with("perf_syscall")
    };
    let skip = frames.iter().take_while(|f| plumbing(f)).count();
    if skip < frames.len() {
        frames.drain(..skip);
    }
    frames
}

/// Where user stacks are symbolized: the target process, when there is a single one.
pub struct Symbolizers<'a> {
    pub kernel: &'a KernelSymbols,
    pub user: &'a mut UserSymbolizer,
    pub user_pid: Option<u32>,
    pub raw_addrs: bool,
}

pub fn contention_sites(snap: &Snapshot, sym: &mut Symbolizers) -> Vec<ContentionSite> {
    let mut kernel_frames: HashMap<i32, Vec<Frame>> = HashMap::new();
    let mut user_frames: HashMap<i32, Vec<Frame>> = HashMap::new();
    let mut sites: HashMap<(u32, i32, i32), ContentionSite> = HashMap::new();
    for (key, c) in &snap.contention {
        let kstack = kernel_frames
            .entry(key.kernel_stack)
            .or_insert_with(|| {
                snap.stacks
                    .get(&key.kernel_stack)
                    .map(|ips| {
                        trim_probe_frames(
                            ips.iter()
                                .map(|&ip| sym.kernel.resolve(ip, sym.raw_addrs))
                                .collect(),
                        )
                    })
                    .unwrap_or_default()
            })
            .clone();
        let ustack = user_frames
            .entry(key.user_stack)
            .or_insert_with(|| match (snap.stacks.get(&key.user_stack), sym.user_pid) {
                (Some(ips), Some(pid)) => sym.user.resolve(pid, ips, sym.raw_addrs),
                _ => Vec::new(),
            })
            .clone();
        let site = sites
            .entry((key.lock_class, key.kernel_stack, key.user_stack))
            .or_insert_with(|| ContentionSite {
                lock: LockKind::from_class(key.lock_class).name().to_string(),
                operation: operation::of_stack(kstack.iter().map(|f| f.function.as_str()))
                    .name()
                    .to_string(),
                kernel_stack: kstack,
                user_stack: ustack,
                count: 0,
                total_wait_ns: 0,
                max_wait_ns: 0,
                wait: Log2Hist::default(),
            });
        site.count += c.count;
        site.total_wait_ns += c.total_ns;
        site.max_wait_ns = site.max_wait_ns.max(c.max_ns);
        site.wait.add_slot(key.slot as usize, c.count);
        site.wait.sum += c.total_ns;
        site.wait.max = site.wait.max.max(c.max_ns);
    }
    let mut sites: Vec<ContentionSite> = sites.into_values().collect();
    sites.sort_by_key(|s| std::cmp::Reverse(s.total_wait_ns));
    sites
}

pub fn syscalls(snap: &Snapshot) -> Vec<SyscallStats> {
    (0..N_SYSCALLS)
        .map(|i| {
            let c =
                |counter: u32| snap.syscall_counters[(i * per_syscall::COUNT + counter) as usize];
            let slots = snap.hist_slots(i);
            SyscallStats {
                name: FD_SYSCALLS[i as usize].name.to_string(),
                calls: c(per_syscall::CALLS),
                errors: c(per_syscall::ERRORS),
                fds_created: c(per_syscall::FDS_CREATED),
                fds_closed: c(per_syscall::FDS_CLOSED),
                allocs: c(per_syscall::ALLOCS),
                // The kernel keeps only slots for latency: max is the slot's upper bound.
                latency: hist_from_slots(slots, slots_max(slots), 0),
            }
        })
        .filter(|s| s.calls > 0)
        .collect()
}

pub fn scan(snap: &Snapshot) -> ScanStats {
    let g = |i: u32| snap.globals[i as usize];
    let words = |id: u32| {
        let slots = snap.hist_slots(id);
        hist_from_slots(slots, slots_max(slots), 0)
    };
    let bits = hist_from_slots(snap.hist_slots(hist::SCAN_BITS), g(global::SCAN_MAX), 0);
    ScanStats {
        allocations: bits.count + g(global::BELOW_ORIGIN),
        next_fd_hits: g(global::NEXT_FD_HITS),
        below_origin: g(global::BELOW_ORIGIN),
        origin: "files->next_fd read at syscall entry: exact for single-threaded tables, \
                 an estimate when other threads allocate or close concurrently"
            .into(),
        bits,
        open_fds_words: words(hist::OPEN_FDS_WORDS),
        full_fds_words: words(hist::FULL_FDS_WORDS),
    }
}

pub fn stack_walks(snap: &Snapshot) -> StackWalks {
    StackWalks {
        walked: snap.globals[global::STACK_WALKS as usize],
        reused: snap.globals[global::STACK_REUSES as usize],
        refresh_every: fdprof_common::contention::STACK_REFRESH,
    }
}

pub fn table(snap: &Snapshot) -> TableStats {
    let g = |i: u32| snap.globals[i as usize];
    TableStats {
        max_fds_first: g(global::MAX_FDS_FIRST),
        max_fds_max: g(global::MAX_FDS_SEEN),
        expansions: g(global::EXPANSIONS),
    }
}

/// Every drop counter, zero or not, plus the programs' recursion misses.
pub fn drops(snap: &Snapshot) -> Vec<DropCount> {
    let mut out = Vec::new();
    for (p, probe) in drop::PROBE_NAMES.iter().enumerate() {
        for (r, reason) in drop::REASON_NAMES.iter().enumerate() {
            out.push(DropCount {
                probe: probe.to_string(),
                reason: reason.to_string(),
                count: snap.drops[p * drop::COUNT as usize + r],
            });
        }
    }
    for c in &snap.programs {
        out.push(DropCount {
            probe: c.name.clone(),
            reason: "recursion_miss".into(),
            count: c.recursion_misses,
        });
    }
    out
}

/// Direct-probe figures per operation, for the roles attached in fentry or kprobe mode.
pub fn functions(snap: &Snapshot, direct: bool) -> Vec<FunctionStats> {
    if !direct {
        return Vec::new();
    }
    let slots = HIST_SLOTS as usize;
    (0..=op::COUNT)
        .map(|o| {
            let c = |k: u32| snap.fn_counters[(o * counter::COUNT + k) as usize];
            let h = |k: u32| {
                let start = ((o * kind::COUNT + k) as usize) * slots;
                let s = &snap.fn_hists[start..start + slots];
                hist_from_slots(s, slots_max(s), 0)
            };
            let mut slowpath_wait = h(kind::SLOWPATH_WAIT);
            slowpath_wait.sum = c(counter::SLOWPATH_WAIT_NS);
            slowpath_wait.max = c(counter::SLOWPATH_WAIT_MAX);
            FunctionStats {
                operation: op::OPERATIONS[o as usize].name().to_string(),
                calls: c(counter::CALLS),
                expanded: c(counter::EXPANDED),
                duration: h(kind::DURATION),
                hold: h(kind::HOLD),
                slowpath_wait,
                unpaired: c(counter::UNPAIRED),
            }
        })
        .filter(|f| f.calls > 0 || f.slowpath_wait.count > 0 || f.unpaired > 0)
        .collect()
}
