//! Empty programs `fdprof doctor` loads and attaches to find out, for real, which attach modes
//! this kernel accepts for each probe point. They do nothing and detach at once. A separate
//! object from `fdprof` so that a trial creates no maps.
#![no_std]
#![no_main]
#![warn(unreachable_pub)]

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, kprobe, kretprobe, perf_event, tracepoint},
    programs::{
        BtfTracePointContext, FEntryContext, FExitContext, PerfEventContext, ProbeContext,
        RetProbeContext, TracePointContext,
    },
};

#[fentry]
pub(crate) fn fdprof_try_fentry(_ctx: FEntryContext) -> u32 {
    0
}

#[fexit]
pub(crate) fn fdprof_try_fexit(_ctx: FExitContext) -> u32 {
    0
}

#[kprobe]
pub(crate) fn fdprof_try_kprobe(_ctx: ProbeContext) -> u32 {
    0
}

#[kretprobe]
pub(crate) fn fdprof_try_kretprobe(_ctx: RetProbeContext) -> u32 {
    0
}

#[tracepoint]
pub(crate) fn fdprof_try_tracepoint(_ctx: TracePointContext) -> u32 {
    0
}

#[btf_tracepoint]
pub(crate) fn fdprof_try_tp_btf(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// Loads only where the kernel has `bpf_get_current_task_btf` (5.11+): the trial of the helper
/// fdprof's BTF-typed programs use for direct loads.
#[btf_tracepoint]
pub(crate) fn fdprof_try_task_btf(_ctx: BtfTracePointContext) -> i32 {
    // SAFETY: the helper takes no argument.
    let task = unsafe { aya_ebpf::helpers::bpf_get_current_task_btf() };
    if task.is_null() { 1 } else { 0 }
}

#[perf_event]
pub(crate) fn fdprof_try_perf_event(_ctx: PerfEventContext) -> u32 {
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
