//! The one start-up path of every live profile (`record`, `top`, the daemon's every load):
//! attach by the request, put the target set's first processes in, name fdprof's own programs,
//! then the symbolizers, the facts and the running [`Stage`].

use std::time::Instant;

use super::clock::unix_ms;

use anyhow::Result;

use super::{Facts, Maps, Stage, StageOptions, Symbols};
use crate::collect::{Kernel, Profiler, ProfilerOptions, cgroups::CgroupSet, stats::own_cpu_ns};
use crate::probe::kallsyms::Kallsyms;
use crate::symbolize::{DebugSources, KernelSymbols, UserSymbolizer};
use fdprof_recording::recording::Target;

/// Reads `/proc/kallsyms` once (it is several MB): the kernel's symbols for its stacks, and the
/// kernel the probes attach to.
pub fn read_kernel() -> Result<(Kernel, KernelSymbols)> {
    let kallsyms = crate::procfs::kallsyms()?;
    let symbols = KernelSymbols::from_kallsyms(&kallsyms)?;
    let kernel = Kernel::discover(&Kallsyms::parse(&kallsyms))?;
    Ok((kernel, symbols))
}

/// Where the stage's symbolizers come from.
pub enum SymbolsFrom {
    /// New ones over the kernel's symbols (record, top), looking for stripped files' names in
    /// the sources: events timed from the attach.
    Kernel(KernelSymbols, DebugSources),
    /// The daemon's, kept across loads: events timed from its start, mapped files kept.
    Kept(Box<Symbols>),
}

impl SymbolsFrom {
    fn kernel(&mut self) -> &mut KernelSymbols {
        match self {
            SymbolsFrom::Kernel(kernel, _) => kernel,
            SymbolsFrom::Kept(symbols) => &mut symbols.kernel,
        }
    }

    /// The symbolizers, reading `maps` from now on; new ones time their events from
    /// `attached_ns` and keep raw addresses by `raw_addrs`.
    fn reading(self, maps: Maps, attached_ns: u64, raw_addrs: bool) -> Symbols {
        match self {
            SymbolsFrom::Kernel(kernel, debug) => Symbols::new(
                kernel,
                UserSymbolizer::with_sources(debug),
                maps,
                attached_ns,
                raw_addrs,
            ),
            SymbolsFrom::Kept(mut symbols) => {
                symbols.set_maps(maps);
                *symbols
            }
        }
    }

    /// The kept symbolizers back.
    fn kept(self) -> Option<Box<Symbols>> {
        match self {
            SymbolsFrom::Kept(symbols) => Some(symbols),
            SymbolsFrom::Kernel(..) => None,
        }
    }
}

/// What a live profile attaches, follows and keeps: the request record, top and the daemon
/// make of their arguments.
pub struct Request {
    pub options: ProfilerOptions,
    pub symbols: SymbolsFrom,
    /// Whose maps are read when.
    pub maps: Maps,
    /// The target set's processes, put in before anything is read (with
    /// [`ProfilerOptions::children`], bringing the processes they start).
    pub pids: Vec<u32>,
    /// Cgroups followed (`--cgroup`): their processes put in the set at once, and read again
    /// every second by the stage.
    pub cgroups: Option<CgroupSet>,
    pub target: Target,
    /// Keep raw addresses in what is assembled (`--raw-addrs`).
    pub raw_addrs: bool,
    /// The run's notes besides the profiler's; `None`: no run notes at all (the daemon, whose
    /// figures add up over its whole life).
    pub notes: Option<Vec<String>>,
    pub stage: StageOptions,
}

/// A stage running, and when it started.
pub struct Started {
    pub stage: Stage,
    /// When the programs were attached and the set filled.
    pub at: Instant,
    /// fdprof's CPU time then.
    pub cpu_ns: u64,
}

/// A start that failed: nothing stays attached.
pub struct Failed {
    pub error: anyhow::Error,
    /// [`SymbolsFrom::Kept`] back, when they were not yet handed to the stage.
    pub symbols: Option<Box<Symbols>>,
}

/// Attaches by `request` and starts the stage. Call it inside the runtime that will drive the
/// stage (its rings register with that reactor).
pub fn start(kernel: &Kernel, request: Request) -> Result<Started, Failed> {
    let Request {
        options,
        mut symbols,
        maps,
        pids,
        mut cgroups,
        target,
        raw_addrs,
        notes,
        stage,
    } = request;
    let profiler = match attach(kernel, options, &pids, cgroups.as_mut()) {
        Ok(profiler) => profiler,
        Err(error) => {
            let symbols = symbols.kept();
            return Err(Failed { error, symbols });
        }
    };
    // fdprof's own programs exist from now on: name their frames (an interrupt can land while
    // one runs). Without them, such frames stay `[unknown]`.
    if let Ok(now) = crate::procfs::kallsyms() {
        symbols.kernel().add_bpf_programs(&now);
    }
    let (at, cpu_ns, unix_ms) = (Instant::now(), own_cpu_ns(), unix_ms());
    let mut symbols = symbols.reading(maps, profiler.attached_ns(), raw_addrs);
    symbols.follow(&pids);
    if let Some(set) = &cgroups {
        symbols.follow(&set.joined);
    }
    let mut facts = Facts::of(&profiler, target, unix_ms);
    facts.raw_addrs = raw_addrs;
    match notes {
        Some(notes) => facts.notes.extend(notes),
        None => facts.notes.clear(),
    }
    let mut stage = Stage::start(profiler, symbols, facts, stage).map_err(|error| Failed {
        error,
        symbols: None,
    })?;
    stage.follow_cgroups(cgroups);
    Ok(Started { stage, at, cpu_ns })
}

/// The programs attached, the set filled: with `--cgroup`, the cgroups' processes (and the
/// cgroups watched for moves); then `pids`. Nothing stays attached on failure.
fn attach(
    kernel: &Kernel,
    options: ProfilerOptions,
    pids: &[u32],
    cgroups: Option<&mut CgroupSet>,
) -> Result<Profiler> {
    use fdprof_common::targets::{TargetEntry, flag};
    let flags = if options.children { flag::CHILDREN } else { 0 };
    let mut profiler = Profiler::attach(kernel, options)?;
    if let Some(set) = cgroups {
        set.pass(&mut profiler)?;
    }
    for (slot, &pid) in pids.iter().enumerate() {
        let entry = TargetEntry {
            slot: slot as u32,
            flags,
        };
        if profiler.add_target(pid, entry)?.is_err() {
            anyhow::bail!("cannot follow pid {pid}: the target set is full");
        }
    }
    Ok(profiler)
}
