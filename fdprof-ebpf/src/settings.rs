//! The load-time settings (`fdprof_common::settings`) as the programs read them: each field by
//! a volatile load, so that the loader's value is read and not the default compiled in. The
//! kernel freezes them, so the verifier knows each as a constant and drops whatever a switch
//! turns off.

use fdprof_common::settings::{Settings, target_kind};

/// Written by user space before load (`EbpfLoader::override_global`, `settings::SYMBOL`).
#[unsafe(no_mangle)]
static SETTINGS: Settings = Settings::DEFAULT;

/// One setting: `setting(|s| &s.slow_ns)`.
#[inline(always)]
pub(crate) fn setting<T: Copy>(field: impl FnOnce(&Settings) -> &T) -> T {
    // SAFETY: a field of a valid static; volatile so the loader's value is read, not the
    // compile-time one.
    unsafe { core::ptr::read_volatile(field(&SETTINGS)) }
}

/// The slow-wait threshold.
#[inline(always)]
pub(crate) fn slow_ns() -> u64 {
    setting(|s| &s.slow_ns)
}

/// Whether fd syscall latency is measured. The verifier drops the clock reads from the
/// programs when it is off.
#[inline(always)]
pub(crate) fn latency_on() -> bool {
    setting(|s| &s.latency) != 0
}

/// Whether `btf` (a BTF-typed program's direct loads) can be used here: the kernel has
/// `bpf_get_current_task_btf`.
#[inline(always)]
pub(crate) fn direct_loads(btf: bool) -> bool {
    btf && setting(|s| &s.task_btf) != 0
}

/// Whether the fd-table trace is on (`record --trace`). The verifier drops every trace path
/// from the programs when it is off.
#[inline(always)]
pub(crate) fn trace_on() -> bool {
    setting(|s| &s.trace_on) != 0
}

/// Whether the processes a single target starts are followed (a launched command). With it and
/// the trace off, the verifier drops the `FOLLOWED` lookup from the filter.
#[inline(always)]
pub(crate) fn children_on() -> bool {
    setting(|s| &s.children) != 0
}

/// Whether the target is a set (`TARGETS`).
#[inline(always)]
pub(crate) fn target_is_set() -> bool {
    setting(|s| &s.target_kind) == target_kind::SET
}

/// fdprof's own pid under `-a` and a set (never profiled).
#[inline(always)]
pub(crate) fn own_tgid() -> u32 {
    setting(|s| &s.target_id)
}

/// Whether figures are kept per process (`-a`, a target set).
#[inline(always)]
pub(crate) fn per_process() -> bool {
    let kind = setting(|s| &s.target_kind);
    kind == target_kind::ALL || kind == target_kind::SET
}
