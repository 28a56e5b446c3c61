//! Turns the kernel's aggregates ([`Snapshot`]) into the model's figures, symbolizing stacks.

use std::collections::{BTreeMap, HashMap};

use fdprof_common::{
    HIST_SLOTS,
    contention::LockKind,
    counters::{drop, global, hist, per_syscall},
    fnops::{counter, kind, op},
    syscalls::{FD_SYSCALLS, N_SYSCALLS},
};
use fdprof_recording::{
    hist::Log2Hist,
    recording::{
        ContentionSite, DropCount, Frame, FunctionStats, ProcessRecord, ProgramCost, ScanStats,
        StackWalks, SyscallStats, TableStats,
    },
};

use super::{lock_names, operation};
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
        .map_or(0, |k| fdprof_recording::hist::slot_range(k).1)
}

/// Drops the frames of fdprof's own program and the tracing plumbing that called it from the
/// top of a kernel stack, so the stack starts at the lock function.
pub(super) fn trim_probe_frames(mut frames: Vec<Frame>) -> Vec<Frame> {
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

/// Where user stacks are symbolized: the target process, when there is a single one; else
/// (`-a`) the process each contention site names.
pub struct Symbolizers<'a> {
    pub kernel: &'a KernelSymbols,
    pub user: &'a mut UserSymbolizer,
    pub user_pid: Option<u32>,
    pub raw_addrs: bool,
}

impl Symbolizers<'_> {
    /// A kernel stack's frames, innermost first.
    pub(crate) fn kernel_frames(&self, ips: &[u64]) -> Vec<Frame> {
        ips.iter()
            .map(|&ip| self.kernel.resolve(ip, self.raw_addrs).into())
            .collect()
    }

    /// A user stack's frames, innermost first, of the target process or (where the recording
    /// has no single target process, `-a`) of `pid`; none without the stack or the process.
    pub(crate) fn user_frames_of(
        &mut self,
        ips: Option<&Vec<u64>>,
        pid: Option<u32>,
    ) -> Vec<Frame> {
        match (ips, self.user_pid.or(pid)) {
            (Some(ips), Some(pid)) => self
                .user
                .resolve(pid, ips, self.raw_addrs)
                .into_iter()
                .map(Frame::from)
                .collect(),
            _ => Vec::new(),
        }
    }
}

pub(crate) fn contention_sites(snap: &Snapshot, sym: &mut Symbolizers) -> Vec<ContentionSite> {
    let mut kernel_frames: HashMap<i32, Vec<Frame>> = HashMap::new();
    // User stacks by (stack id, process): one id can be the same addresses in two processes.
    let mut user_frames: HashMap<(i32, u32), Vec<Frame>> = HashMap::new();
    let mut sites = Vec::with_capacity(snap.contention.len());
    for (key, c) in &snap.contention {
        let kstack = kernel_frames
            .entry(key.kernel_stack)
            .or_insert_with(|| {
                snap.stacks
                    .get(&key.kernel_stack)
                    .map(|ips| trim_probe_frames(sym.kernel_frames(ips)))
                    .unwrap_or_default()
            })
            .clone();
        let pid = (key.tgid != 0).then_some(key.tgid);
        let ustack = user_frames
            .entry((key.user_stack, key.tgid))
            .or_insert_with(|| sym.user_frames_of(snap.stacks.get(&key.user_stack), pid))
            .clone();
        let mut wait = Log2Hist::default();
        for (slot, &n) in c.slots.iter().enumerate() {
            wait.add_slot(slot, n);
        }
        wait.sum = c.total_ns;
        wait.max = c.max_ns;
        sites.push(ContentionSite {
            lock: LockKind::from_class(key.lock.class),
            lock_name: lock_names::name(&key.lock, &kstack, sym.kernel),
            operation: operation::of_stack(kstack.iter().map(|f| f.function.as_str())),
            kernel_stack: kstack,
            user_stack: ustack,
            count: c.count,
            total_wait_ns: c.total_ns,
            max_wait_ns: c.max_ns,
            wait,
            pid: (key.tgid != 0).then_some(key.tgid),
        });
    }
    sites.sort_by_key(|s| std::cmp::Reverse(s.total_wait_ns));
    sites
}

/// Each process of a system-wide recording that made an fd syscall or waited on a lock, with
/// its fd syscalls (rows as [`syscalls`]'s, without latencies: they are timed per syscall, not
/// per process); most calls first, ties by pid. A process that only waited has no name unless
/// it also made an fd syscall (the kernel names a process at its first fd syscall).
pub(crate) fn processes(snap: &Snapshot) -> Vec<ProcessRecord> {
    let mut by_pid: BTreeMap<u32, ProcessRecord> = BTreeMap::new();
    let mut entry = |tgid: u32| {
        by_pid.entry(tgid).or_insert_with(|| ProcessRecord {
            pid: tgid,
            comm: snap.processes.comms.get(&tgid).cloned().unwrap_or_default(),
            identity: Default::default(),
            syscalls: Vec::new(),
            scan: None,
            table: None,
        });
    };
    for (key, _) in snap.contention.iter().filter(|(k, _)| k.tgid != 0) {
        entry(key.tgid);
    }
    for key in snap.processes.syscalls.keys() {
        entry(key.tgid);
    }
    for (&tgid, s) in &snap.processes.scans {
        let Some(p) = by_pid.get_mut(&tgid) else {
            continue;
        };
        let bits = process_scan_bits(s);
        p.scan = Some(ScanStats {
            allocations: bits.count + s.below_origin,
            next_fd_hits: s.next_fd_hits,
            below_origin: s.below_origin,
            origin: String::new(),
            bits,
            open_fds_words: Log2Hist::default(),
            full_fds_words: Log2Hist::default(),
        });
        p.table = Some(TableStats {
            max_fds_first: 0,
            max_fds_max: s.max_fds,
            expansions: s.expansions,
        });
    }
    for (key, c) in &snap.processes.syscalls {
        let Some(def) = FD_SYSCALLS.get(key.index as usize) else {
            continue;
        };
        let Some(p) = by_pid.get_mut(&key.tgid) else {
            continue;
        };
        let c = |counter: u32| c[counter as usize];
        if c(per_syscall::CALLS) > 0 {
            p.syscalls.push(SyscallStats {
                name: def.name.to_string(),
                calls: c(per_syscall::CALLS),
                errors: c(per_syscall::ERRORS),
                fds_created: c(per_syscall::FDS_CREATED),
                fds_closed: c(per_syscall::FDS_CLOSED),
                allocs: c(per_syscall::ALLOCS),
                latency: Log2Hist::default(),
            });
        }
    }
    let calls = |p: &ProcessRecord| p.syscalls.iter().map(|s| s.calls).sum::<u64>();
    let waited = |pid: u32| snap.contention.iter().any(|(k, _)| k.tgid == pid);
    let mut processes: Vec<ProcessRecord> = by_pid
        .into_values()
        .filter(|p| !p.syscalls.is_empty() || waited(p.pid))
        .collect();
    processes.sort_by_key(|p| (std::cmp::Reverse(calls(p)), p.pid));
    processes
}

/// A process's scan distances (no exact sum or maximum is kept per process: the maximum is
/// its slot's upper bound).
fn process_scan_bits(s: &fdprof_common::process::ProcessScan) -> Log2Hist {
    let slots: Vec<u64> = s.bits.iter().map(|&n| u64::from(n)).collect();
    hist_from_slots(&slots, slots_max(&slots), 0)
}

pub(crate) fn syscalls(snap: &Snapshot) -> Vec<SyscallStats> {
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

pub(crate) fn scan(snap: &Snapshot) -> ScanStats {
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

pub(crate) fn stack_walks(snap: &Snapshot) -> StackWalks {
    StackWalks {
        walked: snap.globals[global::STACK_WALKS as usize],
        reused: snap.globals[global::STACK_REUSES as usize],
        refresh_every: fdprof_common::contention::STACK_REFRESH,
        user: user_walks(snap),
    }
}

fn user_walks(snap: &Snapshot) -> fdprof_recording::recording::UserWalks {
    let u = &snap.unwind;
    fdprof_recording::recording::UserWalks {
        copies: u.copies,
        whole: u.whole,
        truncated: fdprof_common::copies::WalkEnd::ALL
            .into_iter()
            .zip(u.truncated)
            .filter(|&(_, n)| n > 0)
            .collect(),
        held_bytes: u.held_bytes,
        held_files: u.held_files as u64,
    }
}

pub(crate) fn table(snap: &Snapshot) -> TableStats {
    let g = |i: u32| snap.globals[i as usize];
    TableStats {
        max_fds_first: g(global::MAX_FDS_FIRST),
        max_fds_max: g(global::MAX_FDS_SEEN),
        expansions: g(global::EXPANSIONS),
    }
}

/// The programs' run time, run count and recursion misses.
pub(crate) fn program_costs(snap: &Snapshot) -> Vec<ProgramCost> {
    snap.programs
        .iter()
        .map(|p| ProgramCost {
            name: p.name.clone(),
            run_time_ns: p.run_time_ns,
            run_count: p.run_count,
            recursion_misses: p.recursion_misses,
        })
        .collect()
}

/// Every drop counter, zero or not, plus the programs' recursion misses.
pub(crate) fn drops(snap: &Snapshot) -> Vec<DropCount> {
    let mut out = Vec::new();
    for (p, probe) in drop::PROBE_NAMES.iter().enumerate() {
        for (r, reason) in drop::REASON_NAMES.iter().enumerate() {
            if !drop::exists(p as u32, r as u32) {
                continue;
            }
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
pub(crate) fn functions(snap: &Snapshot, direct: bool) -> Vec<FunctionStats> {
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
                operation: op::OPERATIONS[o as usize],
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::snapshot::Contention;
    use fdprof_common::contention::{LockIdentity, SiteKey, lock_class};
    use fdprof_common::fnops::Operation;

    const KALLSYMS: &str = "\
ffffffff81000000 T _raw_spin_lock
ffffffff81000100 T alloc_fd
ffffffff81000200 T file_close_fd
ffffffff81000300 T bpf_trace_run2
ffffffff81000400 T tcp_v4_rcv
";

    /// A snapshot of zeroed maps, sized as the programs size them.
    fn empty() -> Snapshot {
        crate::collect::Snapshot::zeroed()
    }

    fn key(lock_class: u32, kernel_stack: i32) -> SiteKey {
        SiteKey {
            lock: LockIdentity {
                class: lock_class,
                ..LockIdentity::default()
            },
            kernel_stack,
            user_stack: -1,
            ..SiteKey::default()
        }
    }

    fn waits(slot: usize, count: u64, total_ns: u64, max_ns: u64) -> Contention {
        Contention::in_slot(slot, count, total_ns, max_ns)
    }

    #[test]
    fn contention_cells_merge_into_sites_with_symbolized_stacks() {
        let mut snap = empty();
        // An alloc site with waits in two slots, a close site, an other-lock site.
        snap.contention = vec![
            (
                key(lock_class::FILE_LOCK, 1),
                waits(9, 3, 1_200, 500).plus(waits(11, 1, 1_500, 1_500)),
            ),
            (key(lock_class::FILE_LOCK, 2), waits(9, 2, 600, 400)),
            (key(lock_class::SPINLOCK, 3), waits(20, 1, 900_000, 900_000)),
        ];
        // Innermost first; the probe's own frame on top is trimmed.
        snap.stacks.insert(
            1,
            vec![0xffffffff81000301, 0xffffffff81000004, 0xffffffff81000110],
        );
        snap.stacks
            .insert(2, vec![0xffffffff81000004, 0xffffffff81000208]);
        snap.stacks
            .insert(3, vec![0xffffffff81000004, 0xffffffff81000401]);
        let kernel = KernelSymbols::parse(KALLSYMS).unwrap();
        let mut user = UserSymbolizer::new();
        let mut sym = Symbolizers {
            kernel: &kernel,
            user: &mut user,
            user_pid: None,
            raw_addrs: false,
        };
        let sites = contention_sites(&snap, &mut sym);
        assert_eq!(sites.len(), 3);
        // Sorted by total wait: the spinlock first.
        assert_eq!(
            (sites[0].lock.name(), sites[0].operation.name()),
            ("spinlock", "other")
        );
        let alloc = &sites[1];
        assert_eq!(
            (alloc.lock.name(), alloc.operation.name()),
            ("file_lock", "alloc")
        );
        assert_eq!(
            (alloc.count, alloc.total_wait_ns, alloc.max_wait_ns),
            (4, 2_700, 1_500)
        );
        assert_eq!(alloc.wait.slots[9], 3);
        assert_eq!(alloc.wait.slots[11], 1);
        let names: Vec<&str> = alloc
            .kernel_stack
            .iter()
            .map(|f| f.function.as_str())
            .collect();
        assert_eq!(
            names,
            ["_raw_spin_lock", "alloc_fd"],
            "bpf_trace_run2 trimmed"
        );
        assert_eq!(alloc.kernel_stack[1].offset, 0x10);
        assert_eq!(
            alloc.kernel_stack[1].address, None,
            "no raw addresses unless asked"
        );
        assert!(alloc.user_stack.is_empty());
        assert_eq!(sites[2].operation, Operation::Close);
    }

    #[test]
    fn counters_become_syscall_scan_table_and_drop_figures() {
        let mut snap = empty();
        let socket = FD_SYSCALLS.iter().position(|s| s.name == "socket").unwrap() as u32;
        let c = |i: u32, counter: u32| (i * per_syscall::COUNT + counter) as usize;
        snap.syscall_counters[c(socket, per_syscall::CALLS)] = 10;
        snap.syscall_counters[c(socket, per_syscall::ERRORS)] = 1;
        snap.syscall_counters[c(socket, per_syscall::FDS_CREATED)] = 9;
        snap.hists[(socket * HIST_SLOTS + 12) as usize] = 10;
        snap.globals[global::NEXT_FD_HITS as usize] = 7;
        snap.globals[global::BELOW_ORIGIN as usize] = 1;
        snap.globals[global::SCAN_MAX as usize] = 40;
        snap.globals[global::MAX_FDS_FIRST as usize] = 64;
        snap.globals[global::MAX_FDS_SEEN as usize] = 256;
        snap.globals[global::EXPANSIONS as usize] = 2;
        snap.hists[(hist::SCAN_BITS * HIST_SLOTS) as usize] = 7;
        snap.hists[(hist::SCAN_BITS * HIST_SLOTS + 6) as usize] = 2;
        snap.drops[(drop::PROBE_SYSCALLS * drop::COUNT + drop::MAP_FULL) as usize] = 5;
        snap.programs = vec![crate::collect::stats::ProgramStats {
            name: "fdprof_sys_exit".into(),
            run_time_ns: 1,
            run_count: 1,
            recursion_misses: 3,
        }];

        let calls = syscalls(&snap);
        assert_eq!(calls.len(), 1, "syscalls never called are left out");
        assert_eq!((calls[0].name.as_str(), calls[0].calls), ("socket", 10));
        assert_eq!((calls[0].errors, calls[0].fds_created), (1, 9));
        assert_eq!(calls[0].latency.count, 10);
        assert_eq!(calls[0].latency.max, 4095, "the slot's upper bound");

        let s = scan(&snap);
        assert_eq!(s.allocations, 10, "9 measured + 1 below the origin");
        assert_eq!((s.next_fd_hits, s.below_origin, s.bits.max), (7, 1, 40));

        let t = table(&snap);
        assert_eq!((t.max_fds_first, t.max_fds_max, t.expansions), (64, 256, 2));

        let d = drops(&snap);
        let count = |probe: &str, reason: &str| {
            d.iter()
                .find(|x| x.probe == probe && x.reason == reason)
                .map(|x| x.count)
        };
        assert_eq!(count("syscalls", "map_full"), Some(5));
        assert_eq!(
            count("contention", "kernel_stack"),
            Some(0),
            "zeros are listed too"
        );
        assert_eq!(count("fdprof_sys_exit", "recursion_miss"), Some(3));

        assert!(
            functions(&snap, false).is_empty(),
            "no direct figures in tracepoint mode"
        );
    }

    #[test]
    fn direct_probe_counters_become_function_figures() {
        let mut snap = empty();
        let c = |o: u32, k: u32| (o * counter::COUNT + k) as usize;
        snap.fn_counters[c(op::ALLOC, counter::CALLS)] = 100;
        snap.fn_counters[c(op::EXPAND, counter::CALLS)] = 3;
        snap.fn_counters[c(op::EXPAND, counter::EXPANDED)] = 1;
        snap.fn_counters[c(op::NONE, counter::SLOWPATH_WAIT_NS)] = 50;
        snap.fn_counters[c(op::NONE, counter::SLOWPATH_WAIT_MAX)] = 50;
        let h = |o: u32, k: u32, slot: u32| ((o * kind::COUNT + k) * HIST_SLOTS + slot) as usize;
        snap.fn_hists[h(op::ALLOC, kind::DURATION, 10)] = 100;
        snap.fn_hists[h(op::NONE, kind::SLOWPATH_WAIT, 6)] = 1;
        let f = functions(&snap, true);
        let ops: Vec<&str> = f.iter().map(|x| x.operation.name()).collect();
        assert_eq!(ops, ["alloc", "expand", "other"]);
        assert_eq!((f[0].calls, f[0].duration.count), (100, 100));
        assert_eq!(f[1].expanded, 1);
        assert_eq!((f[2].slowpath_wait.count, f[2].slowpath_wait.sum), (1, 50));
    }

    #[test]
    fn an_interval_is_the_difference_of_two_snapshots() {
        let mut before = empty();
        before.contention = vec![(key(lock_class::FILE_LOCK, 1), waits(9, 3, 900, 500))];
        before.globals[global::NEXT_FD_HITS as usize] = 5;
        before.globals[global::SCAN_MAX as usize] = 30;
        before.elapsed = std::time::Duration::from_secs(1);
        let mut after = before.clone();
        after.contention = vec![
            (key(lock_class::FILE_LOCK, 1), waits(9, 5, 1_500, 700)),
            (key(lock_class::SPINLOCK, 2), waits(9, 1, 100, 100)),
        ];
        after.globals[global::NEXT_FD_HITS as usize] = 8;
        after.globals[global::SCAN_MAX as usize] = 31;
        after.elapsed = std::time::Duration::from_secs(3);
        let d = after.delta(&before);
        assert_eq!(d.elapsed, std::time::Duration::from_secs(2));
        assert_eq!(d.globals[global::NEXT_FD_HITS as usize], 3);
        assert_eq!(
            d.globals[global::SCAN_MAX as usize],
            31,
            "a maximum is the run's"
        );
        assert_eq!(d.contention.len(), 2);
        let (_, first) = d.contention[0];
        assert_eq!((first.count, first.total_ns, first.max_ns), (2, 600, 700));
        assert_eq!(first.slots[9], 2);
        // Unchanged cells drop out of the interval.
        assert!(after.delta(&after).contention.is_empty());
    }
}
