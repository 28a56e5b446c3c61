//! Loading the profiler object: its load-time settings (`fdprof_common::settings`, written
//! whole) and the sizes of the maps sized at load.

use anyhow::{Context, Result};
use aya::{Ebpf, EbpfLoader};
use fdprof_common::{
    probes::map,
    settings::{self, Settings, target_kind},
};

use super::{Filter, ProfilerOptions};
use crate::collect::{kernel::Kernel, targets};
use crate::probe::object;

/// Loads the programs with the settings (`trace`, `children`: [`super::Profiler::attach`]'s) and
/// map sizes `opts` asks for, nothing attached.
pub(crate) fn load(
    kernel: &Kernel,
    opts: &ProfilerOptions,
    trace: u32,
    children: u32,
) -> Result<Ebpf> {
    let values = load_settings(kernel, opts, trace, children);
    let mut loader = EbpfLoader::new();
    loader.btf(Some(&kernel.btf));
    loader.override_global(settings::SYMBOL, &values, true);
    for (map, entries) in map_sizes(kernel, opts, trace)? {
        loader.map_max_entries(map, entries);
    }
    loader
        .load(object::PROFILER)
        .context("cannot load fdprof's eBPF object")
}

/// The programs' load-time settings: the target filter, the switches, and the kernel's offsets.
fn load_settings(kernel: &Kernel, opts: &ProfilerOptions, trace: u32, children: u32) -> Settings {
    let (target_kind, target_id) = match opts.filter {
        // fdprof's own fd syscalls and waits are not the machine's load.
        Filter::All => (target_kind::ALL, std::process::id()),
        Filter::Tgid(p) => (target_kind::TGID, p),
        Filter::Tid(t) => (target_kind::TID, t),
        Filter::Set { .. } => (target_kind::SET, std::process::id()),
    };
    let (image_start, image_end) = kernel.image_data.unwrap_or((0, 0));
    let (o, l, c) = (
        &kernel.offsets,
        &kernel.lock_offsets,
        &kernel.cgroup_offsets,
    );
    Settings {
        slow_ns: u64::try_from(opts.slow.as_nanos()).unwrap_or(u64::MAX),
        image_start,
        image_end,
        target_kind,
        target_id,
        off_task_files: o.task_struct_files,
        off_files_next_fd: o.files_struct_next_fd,
        off_files_fdt: o.files_struct_fdt,
        off_files_file_lock: o.files_struct_file_lock,
        off_fdt_max_fds: o.fdtable_max_fds,
        off_fdt_open_fds: o.fdtable_open_fds,
        alloc_start_arg: kernel.alloc_start_arg(),
        off_task_signal: o.task_struct_signal,
        off_signal_live: o.signal_struct_live,
        off_task_tgid: o.task_struct_tgid,
        off_task_mm: l.task_struct_mm,
        off_mm_mmap_lock: l.mm_struct_mmap_lock,
        off_task_sighand: l.task_struct_sighand,
        off_sighand_siglock: l.sighand_struct_siglock,
        off_task_cfs_rq: l.task_struct_se_cfs_rq,
        off_cfs_rq_rq: l.cfs_rq_rq,
        off_rq_lock: l.rq_lock,
        off_cgroup_kn: c.cgroup_kn,
        off_kernfs_id: c.kernfs_node_id,
        off_cgroup_root: c.cgroup_root,
        off_root_hierarchy: c.cgroup_root_hierarchy_id,
        latency: u32::from(opts.latency),
        trace_on: trace,
        children,
        task_btf: u32::from(kernel.task_btf),
        off_task_fsbase: l.task_struct_fsbase,
        off_mm_start_stack: l.mm_struct_start_stack,
        off_task_stack: l.task_struct_stack,
        copy_budget: fdprof_common::copies::BUDGET_BYTES_PER_CPU_SEC,
        user_fp: u32::from(opts.call_graph == super::CallGraph::Fp),
    }
}

/// The maps sized at load, and their sizes: the large ones get room only where used.
fn map_sizes(
    kernel: &Kernel,
    opts: &ProfilerOptions,
    trace: u32,
) -> Result<[(&'static str, u32); 7]> {
    let stacks = opts.cpu_hz.map_or(1, |_| fdprof_common::cpu::STACK_TRACES);
    let trace_bytes = if trace != 0 {
        fdprof_common::trace::RING_BYTES
    } else {
        page_size()
    };
    // Only a system-wide profiler and a set send process starts.
    let starts_bytes = match opts.filter {
        Filter::All | Filter::Set { .. } => fdprof_common::process::STARTS_RING_BYTES,
        _ => page_size(),
    };
    let (max_targets, member_pids) = match opts.filter {
        Filter::Set { max } => (max.max(1), targets::member_pids()),
        _ => (1, 1),
    };
    // Only per-process figures have rows to free when a process ends.
    let exited = match opts.filter {
        Filter::All | Filter::Set { .. } => fdprof_common::process::EXITED_SLOTS,
        _ => 1,
    };
    // The slow-path probe's own sites, where it is the source of every spinlock's waits.
    let slow_sites = if kernel.lock_tracepoints {
        1
    } else {
        let cpus = aya::util::nr_cpus().map_err(|(_, e)| e)?;
        fdprof_common::contention::SLOW_SITES_PER_CPU * cpus as u32
    };
    Ok([
        (fdprof_common::cpu::STACKS_MAP, stacks),
        (map::TRACE, trace_bytes),
        (map::PROCESS_STARTS, starts_bytes),
        (map::TARGETS, max_targets),
        (map::MEMBERS, member_pids),
        (map::EXITED, exited),
        (map::SLOW_SITES, slow_sites),
    ])
}

/// The ring buffers' smallest size: one page.
fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u32::try_from(size).unwrap_or(4096)
}
