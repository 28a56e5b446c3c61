//! Reads the programs' maps into plain sums (per-CPU values added up), once, at the end.

use std::collections::HashMap;

use anyhow::{Context, Result};
use aya::{
    Ebpf,
    maps::{PerCpuArray, PerCpuHashMap, StackTraceMap},
};
use fdprof_common::{
    HIST_SLOTS,
    contention::{ContentionKey, ContentionValue},
    counters::{DROP_ENTRIES, HIST_ENTRIES, SYSCALL_COUNTER_ENTRIES, global},
    fnops::{FN_COUNTER_ENTRIES, FN_HIST_ENTRIES, counter},
    probes::map,
};

/// Aggregated contention for one key, summed over CPUs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Contention {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// Everything the kernel side aggregated.
#[derive(Debug, Default)]
pub struct RawSnapshot {
    pub contention: Vec<(ContentionKey, Contention)>,
    /// Stack id → instruction pointers, innermost first.
    pub stacks: HashMap<i32, Vec<u64>>,
    pub syscall_counters: Vec<u64>,
    /// Largest value over CPUs for the `max` globals, smallest non-zero for `MAX_FDS_FIRST`,
    /// sums for the rest.
    pub globals: Vec<u64>,
    pub hists: Vec<u64>,
    pub drops: Vec<u64>,
    /// Direct-probe counters and histograms (`fnops` layout); max counters combined with max.
    pub fn_counters: Vec<u64>,
    pub fn_hists: Vec<u64>,
}

impl RawSnapshot {
    /// `hist` `id` as 64 slot counts.
    pub fn hist_slots(&self, id: u32) -> &[u64] {
        let start = (id * HIST_SLOTS) as usize;
        &self.hists[start..start + HIST_SLOTS as usize]
    }
}

fn per_cpu_array(
    ebpf: &Ebpf,
    name: &str,
    len: u32,
    combine: impl Fn(u32, &[u64]) -> u64,
) -> Result<Vec<u64>> {
    let map: PerCpuArray<_, u64> =
        PerCpuArray::try_from(ebpf.map(name).with_context(|| format!("no map {name}"))?)?;
    (0..len)
        .map(|i| {
            let values = map.get(&i, 0)?;
            Ok(combine(i, &values))
        })
        .collect()
}

pub fn read(ebpf: &Ebpf) -> Result<RawSnapshot> {
    let sum = |_: u32, v: &[u64]| v.iter().sum();
    let mut snap = RawSnapshot {
        syscall_counters: per_cpu_array(ebpf, map::SYSCALL_COUNTERS, SYSCALL_COUNTER_ENTRIES, sum)?,
        hists: per_cpu_array(ebpf, map::HISTS, HIST_ENTRIES, sum)?,
        drops: per_cpu_array(ebpf, map::DROPS, DROP_ENTRIES, sum)?,
        globals: per_cpu_array(ebpf, map::GLOBALS, global::COUNT, |i, v| match i {
            global::MAX_FDS_SEEN | global::SCAN_MAX => v.iter().copied().max().unwrap_or(0),
            global::MAX_FDS_FIRST => v.iter().copied().filter(|&x| x > 0).min().unwrap_or(0),
            _ => v.iter().sum(),
        })?,
        fn_counters: per_cpu_array(ebpf, map::FN_COUNTERS, FN_COUNTER_ENTRIES, |i, v| {
            if i % counter::COUNT == counter::SLOWPATH_WAIT_MAX {
                v.iter().copied().max().unwrap_or(0)
            } else {
                v.iter().sum()
            }
        })?,
        fn_hists: per_cpu_array(ebpf, map::FN_HISTS, FN_HIST_ENTRIES, sum)?,
        ..Default::default()
    };

    let contention: PerCpuHashMap<_, ContentionKey, ContentionValue> =
        PerCpuHashMap::try_from(ebpf.map(map::CONTENTION).context("no map CONTENTION")?)?;
    for entry in contention.iter() {
        let (key, values) = entry?;
        let mut c = Contention::default();
        for v in values.iter() {
            c.count += v.count;
            c.total_ns += v.total_ns;
            c.max_ns = c.max_ns.max(v.max_ns);
        }
        if c.count > 0 {
            snap.contention.push((key, c));
        }
    }

    let stacks: StackTraceMap<_> =
        StackTraceMap::try_from(ebpf.map(map::STACKS).context("no map STACKS")?)?;
    for (key, _) in &snap.contention {
        for id in [key.kernel_stack, key.user_stack] {
            if id >= 0 && !snap.stacks.contains_key(&id) {
                let frames = stacks
                    .get(&(id as u32), 0)
                    .map(|s| s.frames().iter().map(|f| f.ip).collect())
                    .unwrap_or_default();
                snap.stacks.insert(id, frames);
            }
        }
    }
    Ok(snap)
}
