//! Adding recordings together: a target's running total (intervals added in time), the last N
//! seconds (the last N interval recordings), and a daemon-wide total (targets added across
//! processes) are all [`add`]. Stack ids are per profiler, so sites are matched by their
//! symbolized frames.
//!
//! Every field is combined by an exhaustive destructuring: a field added to the model fails to
//! compile here until its merge is decided.

use std::cmp::Reverse;
use std::hash::{DefaultHasher, Hash, Hasher};

use fdprof_common::syscalls::FD_SYSCALLS;
use fdprof_recording::bounded;

use super::rows::{Row, Rows, frames_hash, same_frames, sorted_sites};
use fdprof_recording::recording::{
    ContentionSite, DropCount, FoldedProcesses, FunctionStats, OwnCost, ProcessRecord, ProgramCost,
    Recording, ScanStats, StackWalks, StealTime, SyscallStats, TableStats,
};

/// The drop counter [`bound_sites`] adds to: waits whose stacks were folded away.
pub const STACK_BOUND_PROBE: &str = "daemon";
pub const STACK_BOUND_REASON: &str = "stack_bound";

/// Adds `other`'s measurements to `into`: counts, sums and histograms add, maxima take the
/// larger, `table.max_fds_first` the smaller non-zero; sites, syscalls, functions, drops and
/// programs are matched by key (sites by lock, operation and frames; a frame by function,
/// offset and module, not its raw address, which differs between processes).
///
/// Left to the caller, who knows whether `other` follows `into` in time or ran beside it in
/// another process: `target`, `started_unix_ms`, `duration_ns`, `end_reason` (unchanged),
/// `series`, `steal` and `full_tracing` (unchanged: the machine's, over the caller's span).
/// `own_cost.stats_window_ns` adds, which is right in time; across
/// processes (whose windows overlap) the caller sets it, as it sets `duration_ns`.
pub fn add(into: &mut Recording, other: &Recording) {
    add_but_rows(into, other);
    add_sites(&mut into.contention, other.contention.iter());
    super::cpu::add(&mut into.cpu, other.cpu.as_ref());
    add_processes(&mut into.processes, &other.processes);
}

/// [`add`] but for the rows that a [`super::sum::Sum`] keeps indexed: sites, on-CPU samples and
/// process rows.
pub(crate) fn add_but_rows(into: &mut Recording, other: &Recording) {
    let Recording {
        format: _,
        version: _,
        fdprof_version,
        kernel_release,
        target: _,
        started_unix_ms: _,
        duration_ns: _,
        end_reason: _,
        mode,
        probes,
        modes,
        raw_addrs,
        syscall_latency,
        contention: _,
        stack_walks,
        functions,
        syscalls,
        scan,
        table,
        drops,
        own_cost,
        notes,
        series: _,
        cpu: _,
        trace: _,
        counters,
        processes: _,
        processes_folded,
        steal: _,
        full_tracing: _,
    } = into;
    // `format` and `version` are this fdprof's; the rest of the facts are kept unless unknown.
    keep_unless_empty(fdprof_version, &other.fdprof_version);
    keep_unless_empty(kernel_release, &other.kernel_release);
    // The daemon's profilers share one mode: a recording without probes takes the other's.
    // The sum is timed only if both were; a recording without probes measured nothing.
    if probes.is_empty() {
        *syscall_latency = other.syscall_latency;
    } else if !other.probes.is_empty() {
        *syscall_latency &= other.syscall_latency;
    }
    if probes.is_empty() {
        probes.clone_from(&other.probes);
        *mode = other.mode;
    }
    if modes.is_empty() {
        modes.clone_from(&other.modes);
    }
    *raw_addrs |= other.raw_addrs;
    add_stack_walks(stack_walks, &other.stack_walks);
    add_functions(functions, &other.functions);
    add_syscalls(syscalls, &other.syscalls);
    add_scan(scan, &other.scan);
    add_table(table, &other.table);
    for d in &other.drops {
        add_drop(drops, &d.probe, &d.reason, d.count);
    }
    add_own_cost(own_cost, &other.own_cost);
    add_notes(notes, &other.notes);
    match (counters.as_mut(), &other.counters) {
        (Some(c), Some(o)) => fdprof_recording::counters::add(c, o),
        (None, Some(o)) => *counters = Some(o.clone()),
        (_, None) => {}
    }
    if let Some(o) = &other.processes_folded {
        add_folded(processes_folded.get_or_insert_with(Default::default), o);
    }
}

/// Adds process rows by pid.
pub(crate) fn add_processes(processes: &mut Vec<ProcessRecord>, other: &[ProcessRecord]) {
    let mut rows = Rows::new(std::mem::take(processes));
    for p in other {
        rows.add(p);
    }
    *processes = rows.into_vec();
}

/// Adds a row of the same process.
pub(crate) fn add_process(into: &mut ProcessRecord, p: &ProcessRecord) {
    keep_unless_empty(&mut into.comm, &p.comm);
    if into.identity.is_empty() {
        into.identity = p.identity.clone();
    }
    add_syscalls(&mut into.syscalls, &p.syscalls);
    add_process_figures(into, p);
}

/// Adds folded processes' figures: the rows folded, syscalls, scans, table sizes and waits.
fn add_folded(into: &mut FoldedProcesses, other: &FoldedProcesses) {
    let FoldedProcesses {
        processes,
        syscalls: _,
        scan: _,
        table: _,
        file_lock_count,
        file_lock_wait_ns,
        wait_count,
        wait_ns,
    } = other;
    into.processes = into.processes.saturating_add(*processes);
    into.file_lock_count = into.file_lock_count.saturating_add(*file_lock_count);
    into.file_lock_wait_ns = into.file_lock_wait_ns.saturating_add(*file_lock_wait_ns);
    into.wait_count = into.wait_count.saturating_add(*wait_count);
    into.wait_ns = into.wait_ns.saturating_add(*wait_ns);
    add_syscalls(&mut into.syscalls, &other.syscalls);
    if let Some(s) = &other.scan {
        add_scan(into.scan.get_or_insert_with(Default::default), s);
    }
    if let Some(t) = &other.table {
        add_table(into.table.get_or_insert_with(Default::default), t);
    }
}

/// A process's fd syscalls, scan and table added to the folded processes'.
pub(crate) fn add_folded_figures(into: &mut FoldedProcesses, p: &ProcessRecord) {
    add_syscalls(&mut into.syscalls, &p.syscalls);
    if let Some(s) = &p.scan {
        add_scan(into.scan.get_or_insert_with(Default::default), s);
    }
    if let Some(t) = &p.table {
        add_table(into.table.get_or_insert_with(Default::default), t);
    }
}

/// Merges the sites that became the same (their pids taken away), ordered by total wait.
pub(crate) fn merge_sites(sites: &mut Vec<ContentionSite>) {
    let all = std::mem::take(sites);
    add_sites(sites, all.iter());
}

/// Keeps the `max` sites with stacks that have the most total wait; the others lose their
/// stacks and, with the sites that had none, are folded into one stack-less site per (lock,
/// operation). Every count, sum and maximum stays whole (a running total never goes down);
/// only stacks are lost. Leaves at most `max` + [`FOLDED_SITES`] sites. The waits whose stacks
/// were folded away are added to the drop counter ([`STACK_BOUND_PROBE`],
/// [`STACK_BOUND_REASON`]), which every report lists. Returns how many sites lost their stacks.
pub fn bound_sites(r: &mut Recording, max: usize) -> u64 {
    // On-CPU samples keep their `max` most sampled stacks the same way (no drop: a sample's
    // count stays, only its stacks go).
    super::cpu::bound(&mut r.cpu, max);
    if r.contention.len() <= max {
        return 0;
    }
    let (mut kept, mut rest): (Vec<ContentionSite>, Vec<ContentionSite>) =
        std::mem::take(&mut r.contention)
            .into_iter()
            .partition(|s| !s.kernel_stack.is_empty() || !s.user_stack.is_empty());
    kept.sort_by_key(|s| Reverse(s.total_wait_ns));
    let folded = kept.split_off(kept.len().min(max));
    let sites = folded.len() as u64;
    let waits = folded.iter().fold(0, |n, s| s.count.saturating_add(n));
    for mut site in folded {
        site.kernel_stack.clear();
        site.user_stack.clear();
        rest.push(site);
    }
    // `kept` has stacks, so the stack-less sites only merge with each other.
    add_sites(&mut kept, rest.iter());
    r.contention = kept;
    if waits > 0 {
        add_drop(&mut r.drops, STACK_BOUND_PROBE, STACK_BOUND_REASON, waits);
    }
    sites
}

/// The waits whose stacks [`bound_sites`] folded away, as `rec`'s drops count them.
pub fn stack_bound_waits(rec: &Recording) -> u64 {
    rec.drops
        .iter()
        .filter(|d| d.probe == STACK_BOUND_PROBE && d.reason == STACK_BOUND_REASON)
        .map(|d| d.count)
        .sum()
}

fn keep_unless_empty(into: &mut String, other: &str) {
    if into.is_empty() {
        other.clone_into(into);
    }
}

/// Adds sites into `into` matched by (lock, operation, process, kernel frames, user frames),
/// then orders them by total wait, as the model builds them.
fn add_sites<'a>(into: &mut Vec<ContentionSite>, other: impl Iterator<Item = &'a ContentionSite>) {
    let mut rows = Rows::new(std::mem::take(into));
    for site in other {
        rows.add(site);
    }
    *into = sorted_sites(rows);
}

pub(crate) fn add_site(into: &mut ContentionSite, other: &ContentionSite) {
    let ContentionSite {
        lock: _,
        lock_name: _,
        operation: _,
        kernel_stack: _,
        user_stack: _,
        count,
        total_wait_ns,
        max_wait_ns,
        wait,
        pid: _,
    } = other;
    into.count = into.count.saturating_add(*count);
    into.total_wait_ns = into.total_wait_ns.saturating_add(*total_wait_ns);
    into.max_wait_ns = into.max_wait_ns.max(*max_wait_ns);
    into.wait.merge(wait);
}

/// Sites match by lock, operation, process and frames.
impl Row for ContentionSite {
    fn key_hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        (self.lock, &self.lock_name, self.operation, self.pid).hash(&mut h);
        frames_hash(&self.kernel_stack, &mut h);
        frames_hash(&self.user_stack, &mut h);
        h.finish()
    }

    fn same_key(&self, b: &Self) -> bool {
        self.lock == b.lock
            && self.pid == b.pid
            && self.lock_name == b.lock_name
            && self.operation == b.operation
            && same_frames(&self.kernel_stack, &b.kernel_stack)
            && same_frames(&self.user_stack, &b.user_stack)
    }

    fn add(&mut self, other: &Self) {
        add_site(self, other);
    }
}

/// Process rows match by pid.
impl Row for ProcessRecord {
    fn key_hash(&self) -> u64 {
        u64::from(self.pid)
    }

    fn same_key(&self, b: &Self) -> bool {
        self.pid == b.pid
    }

    fn add(&mut self, other: &Self) {
        add_process(self, other);
    }
}

fn add_stack_walks(into: &mut StackWalks, other: &StackWalks) {
    let StackWalks {
        walked,
        reused,
        refresh_every,
        user,
    } = other;
    into.user.add(user);
    into.walked = into.walked.saturating_add(*walked);
    into.reused = into.reused.saturating_add(*reused);
    // A setting of the programs, not a count: 0 means unknown (older recordings).
    if into.refresh_every == 0 {
        into.refresh_every = *refresh_every;
    }
}

/// By operation, in report order (as `build::functions` writes them).
fn add_functions(into: &mut Vec<FunctionStats>, other: &[FunctionStats]) {
    for o in other {
        let FunctionStats {
            operation,
            calls,
            expanded,
            duration,
            hold,
            slowpath_wait,
            unpaired,
        } = o;
        let Some(f) = into.iter_mut().find(|f| f.operation == *operation) else {
            into.push(o.clone());
            continue;
        };
        f.calls = f.calls.saturating_add(*calls);
        f.expanded = f.expanded.saturating_add(*expanded);
        f.duration.merge(duration);
        f.hold.merge(hold);
        f.slowpath_wait.merge(slowpath_wait);
        // Entries and exits are paired in the kernel, per profiler and thread, and a snapshot
        // does not reset that state: an unpaired count is final and the counts add.
        f.unpaired = f.unpaired.saturating_add(*unpaired);
    }
    into.sort_by_key(|f| f.operation);
}

/// By name, in the order of fdprof's syscall table (as `build::syscalls` writes them).
pub(crate) fn add_syscalls(into: &mut Vec<SyscallStats>, other: &[SyscallStats]) {
    for o in other {
        let SyscallStats {
            name,
            calls,
            errors,
            fds_created,
            fds_closed,
            allocs,
            latency,
        } = o;
        let Some(s) = into.iter_mut().find(|s| s.name == *name) else {
            into.push(o.clone());
            continue;
        };
        s.calls = s.calls.saturating_add(*calls);
        s.errors = s.errors.saturating_add(*errors);
        s.fds_created = s.fds_created.saturating_add(*fds_created);
        s.fds_closed = s.fds_closed.saturating_add(*fds_closed);
        s.allocs = s.allocs.saturating_add(*allocs);
        s.latency.merge(latency);
    }
    into.sort_by_key(|s| {
        FD_SYSCALLS
            .iter()
            .position(|d| d.name == s.name)
            .unwrap_or(usize::MAX)
    });
}

/// A process's scan and table, added as the recording's are.
pub(crate) fn add_process_figures(into: &mut ProcessRecord, other: &ProcessRecord) {
    if let Some(s) = &other.scan {
        add_scan(into.scan.get_or_insert_with(Default::default), s);
    }
    if let Some(t) = &other.table {
        add_table(into.table.get_or_insert_with(Default::default), t);
    }
}

fn add_scan(into: &mut ScanStats, other: &ScanStats) {
    let ScanStats {
        allocations,
        next_fd_hits,
        below_origin,
        origin,
        bits,
        open_fds_words,
        full_fds_words,
    } = other;
    into.allocations = into.allocations.saturating_add(*allocations);
    into.next_fd_hits = into.next_fd_hits.saturating_add(*next_fd_hits);
    into.below_origin = into.below_origin.saturating_add(*below_origin);
    keep_unless_empty(&mut into.origin, origin);
    into.bits.merge(bits);
    into.open_fds_words.merge(open_fds_words);
    into.full_fds_words.merge(full_fds_words);
}

fn add_table(into: &mut TableStats, other: &TableStats) {
    let TableStats {
        max_fds_first,
        max_fds_max,
        expansions,
    } = other;
    // 0: no syscall traced yet, so no first size.
    into.max_fds_first = match (into.max_fds_first, *max_fds_first) {
        (0, b) => b,
        (a, 0) => a,
        (a, b) => a.min(b),
    };
    into.max_fds_max = into.max_fds_max.max(*max_fds_max);
    into.expansions = into.expansions.saturating_add(*expansions);
}

/// Adds `count` to the drop counter `probe`/`reason`, a new one if there is none yet.
pub fn add_drop(into: &mut Vec<DropCount>, probe: &str, reason: &str, count: u64) {
    match into
        .iter_mut()
        .find(|d| d.probe == probe && d.reason == reason)
    {
        Some(d) => d.count = d.count.saturating_add(count),
        None => into.push(DropCount {
            probe: probe.into(),
            reason: reason.into(),
            count,
        }),
    }
}

/// Adds the steal of a span that follows `into`'s in time: times add; the most-stolen CPU is
/// that of whichever span lost more on one CPU (a lower bound of the joined span's, which
/// would need each CPU's times at its ends). Unknown in either span: unknown.
pub fn add_steal_in_time(into: &mut Option<StealTime>, later: Option<&StealTime>) {
    *into = match (*into, later.copied()) {
        (Some(a), Some(b)) => {
            let most = if b.max_cpu_steal_ns > a.max_cpu_steal_ns {
                b
            } else {
                a
            };
            Some(StealTime {
                steal_ns: a.steal_ns.saturating_add(b.steal_ns),
                total_ns: a.total_ns.saturating_add(b.total_ns),
                cpus: a.cpus.max(b.cpus),
                max_cpu_steal_ns: most.max_cpu_steal_ns,
                max_cpu_total_ns: most.max_cpu_total_ns,
            })
        }
        _ => None,
    };
}

fn add_own_cost(into: &mut OwnCost, other: &OwnCost) {
    let OwnCost {
        programs,
        collector_cpu_ns,
        stats_window_ns,
        walk_ns_sampled,
    } = other;
    for o in programs {
        let ProgramCost {
            name,
            run_time_ns,
            run_count,
            recursion_misses,
        } = o;
        let Some(p) = into.programs.iter_mut().find(|p| p.name == *name) else {
            into.programs.push(o.clone());
            continue;
        };
        p.run_time_ns = p.run_time_ns.saturating_add(*run_time_ns);
        p.run_count = p.run_count.saturating_add(*run_count);
        p.recursion_misses = p.recursion_misses.saturating_add(*recursion_misses);
    }
    into.collector_cpu_ns = into.collector_cpu_ns.saturating_add(*collector_cpu_ns);
    into.stats_window_ns = into.stats_window_ns.saturating_add(*stats_window_ns);
    into.walk_ns_sampled = into.walk_ns_sampled.saturating_add(*walk_ns_sampled);
}

/// Union in order, without duplicates, and no more than a recording may hold
/// ([`bounded::NOTES`]), so that the sum can still be written and read back.
fn add_notes(into: &mut Vec<String>, other: &[String]) {
    for note in other {
        if into.len() < bounded::NOTES && !into.contains(note) {
            into.push(note.clone());
        }
    }
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
