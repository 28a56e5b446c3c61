//! On-CPU sampling (`record --cpu`): one sampling event per online CPU, in frequency mode,
//! each running `fdprof_cpu_sample`; hardware cycles where the machine has a PMU, else the
//! `cpu-clock` software event. The links belong to the object: unloading it (the profiler's
//! drop or finish) closes them. The samples' stacks are in a map of their own
//! (`fdprof_common::cpu::STACKS_MAP`), so their ids are theirs, not the snapshot's.

use std::collections::HashMap;

use anyhow::{Context, Result, anyhow};
use aya::{
    Ebpf,
    maps::{PerCpuHashMap, StackTraceMap},
    programs::{
        PerfEvent,
        perf_event::{HardwareEvent, PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
    util::online_cpus,
};
use fdprof_common::cpu::{self, CpuEvent, CpuKey};

/// Samples counted per stack pair, summed over CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSamples {
    pub event: CpuEvent,
    pub frequency_hz: u64,
    pub counts: Vec<(CpuKey, u64)>,
    /// Stack id (of the samples' own map) → instruction pointers, innermost first.
    pub stacks: HashMap<i32, Vec<u64>>,
}

/// Loads the sampling program and attaches it on every online CPU, trying cycles first. On
/// failure nothing of it stays attached.
pub(crate) fn attach(ebpf: &mut Ebpf, frequency_hz: u64) -> Result<CpuEvent> {
    let cpus = online_cpus().map_err(|(path, e)| anyhow!("cannot read {path}: {e}"))?;
    let mut event = CpuEvent::Cycles;
    super::attach::with_rollback(ebpf, &[cpu::PROGRAM], |ebpf| {
        let program: &mut PerfEvent = ebpf
            .program_mut(cpu::PROGRAM)
            .with_context(|| format!("no program {}", cpu::PROGRAM))?
            .try_into()?;
        program.load()?;
        let cycles = PerfEventConfig::Hardware(HardwareEvent::CpuCycles);
        if attach_each(program, cycles, &cpus, frequency_hz).is_ok() {
            return Ok(());
        }
        event = CpuEvent::CpuClock;
        let clock = PerfEventConfig::Software(SoftwareEvent::CpuClock);
        attach_each(program, clock, &cpus, frequency_hz)
            .context("cannot attach the on-CPU sampling")
    })?;
    Ok(event)
}

/// One event per CPU; on failure, the ones attached so far are detached again.
fn attach_each(
    program: &mut PerfEvent,
    config: PerfEventConfig,
    cpus: &[u32],
    frequency_hz: u64,
) -> Result<()> {
    let mut links = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let scope = PerfEventScope::AllProcessesOneCpu { cpu };
        match program.attach(config, scope, SamplePolicy::Frequency(frequency_hz), false) {
            Ok(link) => links.push(link),
            Err(e) => {
                for link in links {
                    let _ = program.detach(link);
                }
                return Err(e).with_context(|| format!("CPU {cpu}"));
            }
        }
    }
    Ok(())
}

/// The samples counted so far, summed over CPUs, with their stacks.
pub(crate) fn read(ebpf: &Ebpf, event: CpuEvent, frequency_hz: u64) -> Result<CpuSamples> {
    let map: PerCpuHashMap<_, CpuKey, u64> = PerCpuHashMap::try_from(
        ebpf.map(cpu::SAMPLES_MAP)
            .with_context(|| format!("no map {}", cpu::SAMPLES_MAP))?,
    )?;
    let mut counts = Vec::new();
    for entry in map.iter() {
        let (key, per_cpu) = entry?;
        let n = per_cpu.iter().copied().fold(0, u64::saturating_add);
        if n > 0 {
            counts.push((key, n));
        }
    }
    let traces: StackTraceMap<_> = StackTraceMap::try_from(
        ebpf.map(cpu::STACKS_MAP)
            .with_context(|| format!("no map {}", cpu::STACKS_MAP))?,
    )?;
    let mut stacks = HashMap::new();
    for id in counts
        .iter()
        .flat_map(|(k, _)| [k.kernel_stack, k.user_stack])
    {
        if (0..fdprof_common::copies::COPY_ID_BASE).contains(&id)
            && !stacks.contains_key(&id)
            && let Ok(trace) = traces.get(&(id as u32), 0)
        {
            stacks.insert(id, trace.frames().iter().map(|f| f.ip).collect());
        }
    }
    Ok(CpuSamples {
        event,
        frequency_hz,
        counts,
        stacks,
    })
}

impl CpuSamples {
    /// The samples taken between `earlier` and `self` (one profiler's snapshots).
    pub(crate) fn delta(&self, earlier: Option<&CpuSamples>) -> CpuSamples {
        let before: HashMap<CpuKey, u64> = earlier
            .map(|e| e.counts.iter().copied().collect())
            .unwrap_or_default();
        let counts = self
            .counts
            .iter()
            .filter_map(|(key, n)| {
                let n = n.saturating_sub(before.get(key).copied().unwrap_or(0));
                (n > 0).then_some((*key, n))
            })
            .collect();
        CpuSamples {
            counts,
            ..self.clone()
        }
    }
}
