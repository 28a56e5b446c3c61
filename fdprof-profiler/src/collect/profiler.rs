//! The profiler: attach once, in the most direct mode the kernel allows per role; take a
//! snapshot of what the programs aggregated at any moment; finish, leaving nothing loaded.
//! `record` takes one snapshot at the end; a live view takes one per interval and shows the
//! difference between the last two.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Ebpf,
    maps::{Array, HashMap as BpfHashMap, PerfEventArray, RingBuf, StackTraceMap},
};
use fdprof_common::{
    counters::{drop, global},
    cpu::CpuEvent,
    fnops,
    probes::{Mode, Role, map},
    targets::CgroupKey,
};

use super::{
    attach::{self, Attachment},
    cpu, direct,
    events::EventStream,
    exited::Exited,
    kernel::Kernel,
    slow_sites,
    snapshot::{self, Snapshot},
    starts::StartStream,
    stats::{self, StatsSampler},
    steal::{CpuTimes, Span},
    targets::{self, CgroupTargets},
};
use crate::probe::tracefs;
use crate::unwind::{Unwinding, is_copy};

mod linked;
mod load;

/// What is profiled, as the programs' filter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Tgid(u32),
    Tid(u32),
    /// The processes of a target set, at most this many at once: filled through
    /// `Profiler::add_target` and `Profiler::match_comms`, and by the programs (see
    /// [`super::targets`]). Figures are kept per process, as under `All`.
    Set {
        max: u32,
    },
}

/// How user stacks are walked (`--call-graph`, as `perf record` names its ways).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CallGraph {
    /// A copy of the stack's top, unwound by fdprof from call-frame information: whole on
    /// code built without frame pointers.
    #[default]
    Dwarf,
    /// The kernel's frame-pointer walk: what fdprof did before it unwound copies; it stops
    /// early on code without frame pointers.
    Fp,
}

/// How to attach.
#[derive(Debug, Clone, Copy)]
pub struct ProfilerOptions {
    pub filter: Filter,
    /// One mode for every function role; `None` = the most direct that works.
    pub forced: Option<Mode>,
    /// Lock contention only: no fd syscall or fd function probes (the cheapest recording).
    pub lock_only: bool,
    /// Start at rest: the fd syscall programs loaded but not attached until
    /// [`Profiler::set_full_tracing`] (where they are tracepoints; probed directly, they stay).
    pub rest: bool,
    /// Lock waits at least this long are sent as slow-wait events.
    pub slow: Duration,
    /// Time every fd syscall entry to exit (two clock reads each); off, they are only counted.
    pub latency: bool,
    /// Sample the target on every online CPU this many times a second each (`--cpu`).
    pub cpu_hz: Option<u64>,
    /// How user stacks are walked.
    pub call_graph: CallGraph,
    /// Send every fd-table operation of the target to the trace ring buffer
    /// (`Profiler::take_trace`).
    pub trace: bool,
    /// A single process ([`Filter::Tgid`]): also follow the processes it starts (and theirs),
    /// from their fork until they end, their figures added to its own (a launched command).
    /// Forks are seen with tp_btf only: elsewhere a note says they are not followed. A set's
    /// processes say so in their entries instead.
    pub children: bool,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        Self {
            filter: Filter::All,
            forced: None,
            lock_only: false,
            rest: false,
            slow: Duration::from_micros(100),
            latency: false,
            cpu_hz: None,
            call_graph: CallGraph::Dwarf,
            trace: false,
            children: false,
        }
    }
}

/// Attached programs. Dropping a `Profiler` (or [`Profiler::finish`]) detaches and unloads
/// everything.
pub struct Profiler {
    ebpf: Ebpf,
    attachments: BTreeMap<Role, Attachment>,
    notes: Vec<String>,
    lock_only: bool,
    latency: bool,
    stats: StatsSampler,
    attached_at: Instant,
    attached_ns: u64,
    /// The machine's CPU times at attach, for each snapshot's steal time.
    attached_cpu_times: Option<CpuTimes>,
    /// On-CPU sampling, once started: the event and its frequency.
    cpu: Option<(CpuEvent, u64)>,
    /// Figures are kept per process (`-a`, a set): the rows of processes that end are freed.
    per_process: bool,
    exited: Exited,
    cgroups: CgroupTargets,
    full: FullTracing,
    linked: linked::Linked,
    /// The slow-path probe sees every spinlock's waits (`SLOW_SITES`): no lock tracepoints.
    slow_sites: bool,
    /// The user stacks' copies, unwound as they come.
    unwinding: Unwinding,
}

/// Whether the fd syscall programs run, and their links while they do.
#[derive(Debug)]
enum FullTracing {
    /// Not switched: probed directly (fentry, kprobes), or not loaded (`--lock-only`).
    Fixed,
    On(attach::Links),
    Off,
}

impl Profiler {
    /// Loads the programs and attaches them: the function roles one by one, then the tracepoint
    /// families.
    pub(crate) fn attach(kernel: &Kernel, opts: ProfilerOptions) -> Result<Self> {
        let trace = u32::from(opts.trace && !opts.lock_only);
        let children = u32::from(opts.children && matches!(opts.filter, Filter::Tgid(_)));
        let mut ebpf = load::load(kernel, &opts, trace, children)?;
        let mut attachments = BTreeMap::new();
        let mut notes = Vec::new();
        attach_roles(&mut ebpf, kernel, &opts, &mut attachments, &mut notes)?;
        let full = attach_families(
            &mut ebpf,
            kernel,
            &opts,
            children,
            &mut attachments,
            &mut notes,
        )?;
        // The trace's order on shared tables: a moment inside file_lock for each operation.
        if trace != 0
            && let Some(Attachment::Direct { .. }) = attachments.get(&Role::FdSyscalls)
        {
            let how = direct::attach_locked_sections(&mut ebpf, &kernel.functions, &mut notes);
            attachments.insert(Role::LockedSections, how);
        }
        let slow_sites = slow_path_sees_all(&mut ebpf, &attachments)?;
        let cpu = match opts.cpu_hz {
            Some(hz) => Some((cpu::attach(&mut ebpf, hz)?, hz)),
            None => None,
        };
        let copies = ebpf
            .take_map(fdprof_common::copies::COPIES_MAP)
            .context("no map STACK_COPIES")?;
        // The slow-path probe sends its copies through perf buffers where it is attached.
        let slow_copies = match attachments.get(&Role::LockSlowpath) {
            Some(a) if a.is_direct() && opts.call_graph == CallGraph::Dwarf => {
                Some(PerfEventArray::try_from(
                    ebpf.take_map(fdprof_common::copies::SLOW_COPIES_MAP)
                        .context("no map SLOW_COPIES")?,
                )?)
            }
            _ => None,
        };
        let linked = linked::Linked::at_attach(&ebpf, !matches!(full, FullTracing::Fixed));
        let unwinding = Unwinding::start(RingBuf::try_from(copies)?, slow_copies)
            .context("cannot start the unwinding thread")?;
        let mut profiler = Self {
            ebpf,
            attachments,
            notes,
            lock_only: opts.lock_only,
            latency: opts.latency,
            stats: StatsSampler::new(),
            attached_at: Instant::now(),
            attached_ns: monotonic_ns(),
            attached_cpu_times: CpuTimes::read(),
            cpu,
            per_process: matches!(opts.filter, Filter::All | Filter::Set { .. }),
            exited: Exited::default(),
            cgroups: CgroupTargets::default(),
            full,
            linked,
            slow_sites,
            unwinding,
        };
        // The first window of run-time statistics opens now, so that a refusal is among the
        // notes the figures carry from the start.
        profiler.tick_from(profiler.attached_at);
        if let Some(why) = &profiler.stats.refused {
            profiler.notes.push(format!(
                "own cost: the programs' run times are not measured: BPF_ENABLE_STATS refused \
                 ({why}); it needs CAP_SYS_ADMIN (in a container, add SYS_ADMIN, or go without \
                 them)"
            ));
        }
        Ok(profiler)
    }

    /// Whether the fd syscalls are traced now.
    pub fn full_tracing(&self) -> bool {
        match self.full {
            FullTracing::On(_) => true,
            FullTracing::Off => false,
            FullTracing::Fixed => !self.lock_only,
        }
    }

    /// Attaches the fd syscall programs (`on`) or detaches them, which stay loaded: their
    /// links made for a window of full tracing and dropped after it. Where they are probed
    /// directly (or not loaded) nothing changes and it says so.
    pub fn set_full_tracing(&mut self, on: bool) -> Result<()> {
        match (&mut self.full, on) {
            (FullTracing::Fixed, _) => {
                bail!(
                    "full tracing is not switched: the fd syscalls are probed directly, or not \
                     at all (--lock-only)"
                )
            }
            (full @ FullTracing::Off, true) => {
                let tp_btf = self.attachments.get(&Role::FdSyscalls) == Some(&Attachment::TpBtf);
                *full = FullTracing::On(attach::relink(&mut self.ebpf, Role::FdSyscalls, tp_btf)?);
            }
            (full @ FullTracing::On(_), false) => {
                if let FullTracing::On(links) = std::mem::replace(full, FullTracing::Off) {
                    attach::unlink(&mut self.ebpf, links)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// The events ring buffer, to read with an [`EventStream`]; `None` once taken. The
    /// programs send events from then on only. Call it inside a tokio runtime with IO enabled.
    pub(crate) fn take_events(&mut self) -> Option<Result<EventStream>> {
        let map = self.ebpf.take_map(map::EVENTS)?;
        Some(self.start_events(map))
    }

    /// The process starts' ring buffer (`record -a`), to read with a [`StartStream`]; `None`
    /// once taken. The programs send starts from then on only. Call it inside a tokio runtime
    /// with IO enabled.
    pub(crate) fn take_starts(&mut self) -> Option<Result<StartStream>> {
        let map = self.ebpf.take_map(map::PROCESS_STARTS)?;
        Some(self.start_starts(map))
    }

    fn start_starts(&mut self, map: aya::maps::Map) -> Result<StartStream> {
        let stream = StartStream::new(RingBuf::try_from(map)?)?;
        self.switch_on(fnops::CONFIG_STARTS)?;
        Ok(stream)
    }

    /// Sets the programs' run-time switch `index` of `CONFIG` (they send from then on).
    fn switch_on(&mut self, index: u32) -> Result<()> {
        let mut config: Array<_, u32> =
            Array::try_from(self.ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
        config.set(index, 1, 0)?;
        Ok(())
    }

    /// The fd-table trace's ring buffer (`ProfilerOptions::trace`), to drain with a
    /// [`super::trace::TraceReader`]; `None` once taken.
    pub fn take_trace(&mut self) -> Option<Result<RingBuf<aya::maps::MapData>>> {
        let map = self.ebpf.take_map(map::TRACE)?;
        Some(RingBuf::try_from(map).map_err(Into::into))
    }

    fn start_events(&mut self, map: aya::maps::Map) -> Result<EventStream> {
        let stream = EventStream::new(RingBuf::try_from(map)?)?;
        self.switch_on(fnops::CONFIG_EVENTS)?;
        Ok(stream)
    }

    /// Adds process `tgid` to the target set (see [`Filter::Set`]) as `entry` says.
    pub fn add_target(
        &mut self,
        tgid: u32,
        entry: fdprof_common::targets::TargetEntry,
    ) -> Result<Result<(), targets::Refused>> {
        targets::add(&mut self.ebpf, tgid, entry)
    }

    /// Removes process `tgid` from the target set.
    pub fn remove_target(&mut self, tgid: u32) -> Result<()> {
        targets::remove(&mut self.ebpf, tgid)
    }

    /// The target set now: tgid → how it joined.
    pub fn targets(&self) -> Result<BTreeMap<u32, fdprof_common::targets::TargetEntry>> {
        targets::members(&self.ebpf)
    }

    /// Processes named one of `comms` join the set at their exec or rename: `(comm, slot)`.
    pub fn match_comms(&mut self, comms: &[(String, u32)]) -> Result<()> {
        targets::set_comms(&mut self.ebpf, comms)
    }

    /// Processes moved into these cgroups join the set at the move: `(cgroup, slot)`, with the
    /// hierarchies' marks (see [`fdprof_common::targets::CgroupKey`]), replacing those set before;
    /// `past_bound`, the cgroups left out past the bound, are counted as drops.
    pub(crate) fn follow_cgroups(
        &mut self,
        keys: &BTreeMap<CgroupKey, u32>,
        past_bound: BTreeSet<CgroupKey>,
    ) -> Result<()> {
        self.cgroups.set(&mut self.ebpf, keys, past_bound)
    }

    /// Deletes the per-process rows of processes that left, once their figures were read.
    pub(crate) fn forget(&mut self, tgids: &[u32]) -> Result<()> {
        targets::forget(&mut self.ebpf, tgids)
    }

    /// Takes the rows of processes that ended out of the kernel maps (those due, see
    /// [`Exited`]): every snapshot adds them until released.
    pub(crate) fn sweep(&mut self) -> Result<()> {
        if !self.per_process {
            return Ok(());
        }
        self.exited.sweep(&mut self.ebpf)
    }

    /// Sweeps if one is due: a second after the last, or sooner while sites fill.
    pub(crate) fn check_exited(&mut self) -> Result<()> {
        match self.per_process {
            true => self.exited.check(&mut self.ebpf),
            false => Ok(()),
        }
    }

    /// Forgets the rows taken out of the maps so far (an interval has read them); their
    /// processes.
    pub(crate) fn release_exited(&mut self) -> Vec<u32> {
        let gone = self.exited.release();
        let keys = self.unwinding.forget(&gone);
        if let Some(map) = self.ebpf.map_mut(fdprof_common::copies::COPY_IDS_MAP)
            && let Ok(mut ids) = BpfHashMap::<_, u64, i32>::try_from(map)
        {
            for key in keys {
                // An LRU entry may have gone already.
                let _ = ids.remove(&key);
            }
        }
        gone
    }

    /// The event on-CPU sampling runs on (`--cpu`), if it does.
    pub fn cpu_event(&self) -> Option<CpuEvent> {
        self.cpu.map(|(event, _)| event)
    }

    /// `CLOCK_MONOTONIC` at attach, in ns: the origin of the events' time.
    pub fn attached_ns(&self) -> u64 {
        self.attached_ns
    }

    /// The addresses of the stacks `ids` refers to (an event's stacks), innermost first;
    /// negative and unknown ids are left out.
    pub(crate) fn stacks(
        &self,
        ids: impl IntoIterator<Item = i32>,
    ) -> Result<HashMap<i32, Vec<u64>>> {
        let stacks: StackTraceMap<_> =
            StackTraceMap::try_from(self.ebpf.map(map::STACKS).context("no map STACKS")?)?;
        let ids: Vec<i32> = ids.into_iter().collect();
        let mut out = self.unwinding.stacks(ids.iter().copied());
        if ids.iter().any(|&id| is_copy(id) && !out.contains_key(&id)) {
            // Sent with the site's first wait, a copy may still be on its way: a drain pass of
            // the unwinder's takes some ms.
            self.unwinding.flush(Duration::from_millis(100));
            out = self.unwinding.stacks(ids.iter().copied());
        }
        for id in ids {
            if id >= 0
                && !out.contains_key(&id)
                && let Ok(s) = stacks.get(&(id as u32), 0)
            {
                out.insert(id, s.frames().iter().map(|f| f.ip).collect());
            }
        }
        Ok(out)
    }

    /// How each role was attached.
    pub(crate) fn attachments(&self) -> &BTreeMap<Role, Attachment> {
        &self.attachments
    }

    /// The profile's mode: that of the allocator, the role the product is about; with
    /// `--lock-only`, that of the lock slow path.
    pub fn mode(&self) -> Mode {
        let lead = if self.lock_only {
            Role::LockSlowpath
        } else {
            Role::Allocate
        };
        self.attachments
            .get(&lead)
            .map_or(Mode::Tracepoint, Attachment::mode)
    }

    /// Whether fd syscall latency is measured (`--latency`).
    pub(crate) fn syscall_latency(&self) -> bool {
        self.latency && !self.lock_only
    }

    /// What attaching changed or could not do (fallbacks, tracefs mounted).
    pub(crate) fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Keeps the run-time statistics sampler going (call it again after the time it returns),
    /// with the sampling windows timed from `origin`, not from attach: the
    /// statistics are on for the whole system while any profiler has them on, so profilers
    /// that share an origin share their windows (a daemon with 64 profilers timed from their
    /// attaches would keep them on most of the time).
    pub(crate) fn tick_from(&mut self, origin: Instant) -> Duration {
        let ebpf = &self.ebpf;
        self.stats
            .tick(origin.elapsed(), || snapshot::walk_ns(ebpf).unwrap_or(0))
    }

    /// Everything aggregated since attach: per-CPU sums of the maps, the stacks they refer to
    /// and the programs' costs.
    pub(crate) fn snapshot(&self) -> Result<Snapshot> {
        let retired = self.exited.retired();
        let mut snap = snapshot::read(&self.ebpf, (&retired.processes, &retired.contention))?;
        snap.stacks.extend(retired.stacks.clone());
        if self.slow_sites {
            let slow = slow_sites::read(&self.ebpf)?;
            snap.add_sites(&slow.contention);
            snap.stacks.extend(slow.stacks);
        }
        let cgroup_bound = (drop::PROBE_TARGETS * drop::COUNT + drop::CGROUP_BOUND) as usize;
        snap.drops[cgroup_bound] += self.cgroups.dropped;
        snap.programs = stats::program_costs(&self.ebpf);
        snap.elapsed = self.attached_at.elapsed();
        snap.stats_window = self.stats.sampled_so_far();
        snap.walk_ns_sampled = self
            .stats
            .walk_ns_so_far(snap.globals[global::WALK_NS as usize]);
        if let Some((event, frequency_hz)) = self.cpu {
            snap.cpu = Some(cpu::read(&self.ebpf, event, frequency_hz)?);
        }
        self.add_copies(&mut snap);
        snap.machine = self
            .attached_cpu_times
            .clone()
            .zip(CpuTimes::read())
            .map(|(start, end)| Span { start, end });
        Ok(snap)
    }

    /// The unwound user stacks the snapshot's sites and samples refer to, once every copy sent
    /// so far is unwound or 100 ms have passed: the unwinder reads a new file's sections on its
    /// own thread, and a live view's interval does not wait for a large one (its stacks come
    /// in the next interval; `finish` waits longer).
    fn add_copies(&self, snap: &mut Snapshot) {
        self.unwinding.flush(Duration::from_millis(100));
        let sites = snap.contention.iter().map(|(k, _)| k.user_stack);
        snap.stacks.extend(self.unwinding.stacks(sites));
        if let Some(cpu) = &mut snap.cpu {
            let samples = cpu.counts.iter().map(|(k, _)| k.user_stack);
            cpu.stacks.extend(self.unwinding.stacks(samples));
        }
        snap.unwind = self.unwinding.counts();
        // The slow-path probe's copies lost to a full perf buffer are its drops.
        let lost = (drop::PROBE_CONTENTION * drop::COUNT + drop::RINGBUF_FULL) as usize;
        snap.drops[lost] += snap.unwind.lost;
    }

    /// Takes the last snapshot, with the statistics sampler stopped so its window is final,
    /// then detaches and unloads every program.
    pub(crate) fn finish(mut self) -> Result<Snapshot> {
        let ebpf = &self.ebpf;
        self.stats.stop(|| snapshot::walk_ns(ebpf).unwrap_or(0));
        self.unwinding.flush(Duration::from_secs(5));
        self.snapshot()
    }
}

/// Attaches each function role in the most direct mode that works (`opts.forced` forces one).
fn attach_roles(
    ebpf: &mut Ebpf,
    kernel: &Kernel,
    opts: &ProfilerOptions,
    attachments: &mut BTreeMap<Role, Attachment>,
    notes: &mut Vec<String>,
) -> Result<()> {
    for (role, functions) in &kernel.functions {
        if opts.lock_only && role.role != Role::LockSlowpath {
            attachments.insert(role.role, Attachment::Off);
            continue;
        }
        let how = direct::attach_role(ebpf, &kernel.btf, role, functions, opts.forced, notes)?;
        let direct_config = match role.role {
            Role::Allocate => Some(fnops::CONFIG_DIRECT_ALLOC),
            Role::Expand => Some(fnops::CONFIG_DIRECT_EXPAND),
            _ => None,
        };
        if let Some(index) = direct_config
            && how.is_direct()
        {
            let mut config: Array<_, u32> =
                Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
            config.set(index, 1, 0)?;
        }
        attachments.insert(role.role, how);
    }
    Ok(())
}

/// Attaches the tracepoint families: tp_btf where it loads, else the classic tracepoints; the
/// fd syscalls directly where the allocator is.
fn attach_families(
    ebpf: &mut Ebpf,
    kernel: &Kernel,
    opts: &ProfilerOptions,
    children: u32,
    attachments: &mut BTreeMap<Role, Attachment>,
    notes: &mut Vec<String>,
) -> Result<FullTracing> {
    let mut full = FullTracing::Fixed;
    for family in [Role::LockTracepoints, Role::FdSyscalls, Role::TaskExits] {
        if opts.lock_only && family == Role::FdSyscalls {
            attachments.insert(family, Attachment::Off);
            continue;
        }
        // With the allocator probed directly, the fd syscalls are too, in its mode: the raw
        // syscall tracepoints would put every syscall of every task on the slow path.
        if family == Role::FdSyscalls
            && let Some(Attachment::Direct { mode, .. }) = attachments.get(&Role::Allocate)
            && let Some(how) = direct::attach_syscalls(
                ebpf,
                &kernel.btf,
                &kernel.syscall_functions,
                *mode,
                opts.forced.is_some(),
                notes,
            )?
        {
            attachments.insert(family, how);
            continue;
        }
        // At rest the fd syscall programs are loaded, not attached.
        let link = !(opts.rest && family == Role::FdSyscalls);
        let (how, links) = match attach::tp_btf(ebpf, family, &kernel.btf, link) {
            Ok(links) => (Attachment::TpBtf, links),
            Err(btf_err) => {
                notes.extend(tracefs::ensure_mounted());
                // Before 5.19 there are no lock contention tracepoints: the waits come from the
                // slow-path probe alone, where it attaches.
                if family == Role::LockTracepoints && !tracefs::has_event("lock/contention_begin") {
                    notes.push(
                        "lock_tracepoints: this kernel has no lock:contention_begin/end (5.19+): \
                         lock waits come only from the spinlock slow-path probe (direct modes), \
                         and there are none in tracepoint mode"
                            .into(),
                    );
                    attachments.insert(family, Attachment::Off);
                    continue;
                }
                let links = attach::classic(ebpf, family, link).map_err(|e| {
                    anyhow!(
                        "cannot attach the {} probes: tp_btf: {btf_err:#}; tracepoint: {e:#}",
                        family.name()
                    )
                })?;
                notes.push(format!("{}: tp_btf refused ({btf_err:#})", family.name()));
                (Attachment::ClassicTracepoint, links)
            }
        };
        if family == Role::FdSyscalls {
            full = match link {
                true => FullTracing::On(links),
                false => FullTracing::Off,
            };
        }
        if family == Role::TaskExits && how == Attachment::ClassicTracepoint && children != 0 {
            notes.push(
                "task_exits: forks are seen with tp_btf only: the processes the command \
                 starts are not followed, only the command's own"
                    .into(),
            );
        }
        attachments.insert(family, how);
    }
    Ok(full)
}

/// Where the lock contention tracepoints are missing and the slow path is probed, the slow-path
/// probe is the source of every spinlock's waits: switched on in the programs, and read.
fn slow_path_sees_all(ebpf: &mut Ebpf, attachments: &BTreeMap<Role, Attachment>) -> Result<bool> {
    let all = attachments.get(&Role::LockTracepoints) == Some(&Attachment::Off)
        && attachments
            .get(&Role::LockSlowpath)
            .is_some_and(Attachment::is_direct);
    if all {
        let mut config: Array<_, u32> =
            Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
        config.set(fnops::CONFIG_SLOWPATH_ALL, 1, 0)?;
    }
    Ok(all)
}

/// `CLOCK_MONOTONIC` now, the clock of `bpf_ktime_get_ns`.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to write to.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
