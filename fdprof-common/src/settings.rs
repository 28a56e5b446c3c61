//! The load-time settings: one read-only global of the profiler object, [`SYMBOL`], that the
//! loader writes before load (`EbpfLoader::override_global`) and the programs read. The kernel
//! freezes it (`.rodata`), so the verifier reads its fields as constants and drops the paths a
//! setting turns off. It holds the target filter, those switches, and the struct offsets found
//! in the kernel's BTF (the programs carry no CO-RE relocations). A new setting is a field here
//! (and its default in [`Settings::DEFAULT`]), read on the eBPF side, written by the loader.

/// The settings' symbol in the object.
pub const SYMBOL: &str = "SETTINGS";

/// Every load-time setting. The u64 fields come first and `_pad` ends it, so the layout has no
/// hidden padding (`aya::Pod`, and the loader's bytes are the object's); a `_pad` ends it when
/// the u32s are odd in number.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Waits of at least this many ns are sent as slow-wait events; never unless set.
    pub slow_ns: u64,
    /// The kernel image's data, `[start, end)`: a lock there is static, named by its symbol.
    /// Both 0 when kallsyms does not list the image's data.
    pub image_start: u64,
    pub image_end: u64,
    /// What the filter lets through: a [`target_kind`] value.
    pub target_kind: u32,
    /// The process or thread of `target_kind`; fdprof's own pid under `ALL` and `SET`.
    pub target_id: u32,
    /// Offsets of the fd table's fields.
    pub off_task_files: u32,
    pub off_files_next_fd: u32,
    pub off_files_fdt: u32,
    pub off_files_file_lock: u32,
    pub off_fdt_max_fds: u32,
    pub off_fdt_open_fds: u32,
    /// Which argument of the allocator is `start`: 0 for `alloc_fd(start, end, flags)`, 1 for
    /// `__alloc_fd(files, start, end, flags)` (5.10 and older).
    pub alloc_start_arg: u32,
    /// Offsets of `task_struct.signal` and `signal_struct.live` (thread exits: which one ends
    /// the process).
    pub off_task_signal: u32,
    pub off_signal_live: u32,
    /// Offset of `task_struct.tgid` (a forked child's pid).
    pub off_task_tgid: u32,
    /// Offsets of `task_struct.mm`, `mm_struct.mmap_lock`, `task_struct.sighand` and
    /// `sighand_struct.siglock` (locks recognised by kind); `u32::MAX` when absent.
    pub off_task_mm: u32,
    pub off_mm_mmap_lock: u32,
    pub off_task_sighand: u32,
    pub off_sighand_siglock: u32,
    /// Offsets of `task_struct.se.cfs_rq` (one sum), `cfs_rq.rq` and `rq.__lock` (`rq.lock`
    /// before 5.14): the running task's runqueue lock is told by its address, as `perf lock
    /// contention` tells it; `u32::MAX` when absent (no `CONFIG_FAIR_GROUP_SCHED`).
    pub off_task_cfs_rq: u32,
    pub off_cfs_rq_rq: u32,
    pub off_rq_lock: u32,
    /// Offsets of `cgroup.kn`, `kernfs_node.id`, `cgroup.root` and `cgroup_root.hierarchy_id`
    /// (a process moved into a followed cgroup); `u32::MAX` when absent.
    pub off_cgroup_kn: u32,
    pub off_kernfs_id: u32,
    pub off_cgroup_root: u32,
    pub off_root_hierarchy: u32,
    /// 1: fd syscalls are timed entry to exit (`--latency`, two clock reads each); 0: only
    /// counted.
    pub latency: u32,
    /// 1: every fd-table operation of the target is sent to `TRACE` (`record --trace`).
    pub trace_on: u32,
    /// 1: under `target_kind::TGID`, the processes the target starts (and theirs) are followed
    /// from their fork until they end, their figures added to the target's (a launched
    /// command). Forks are seen with tp_btf only.
    pub children: u32,
    /// 1: the kernel has `bpf_get_current_task_btf` (5.11+), so the BTF-typed programs read the
    /// task's fields by direct loads; 0: through the read helper, and the verifier never walks
    /// the direct loads' branch, so the helper it lacks is never seen. Found by trial.
    pub task_btf: u32,
    /// Offsets of `task_struct.thread.fsbase` (the thread's TLS block, which user stacks are
    /// measured from), `mm_struct.start_stack` (the main thread's stack top) and
    /// `task_struct.stack` (where the user registers are saved, without
    /// `bpf_task_pt_regs`); `u32::MAX` when absent.
    pub off_task_fsbase: u32,
    pub off_mm_start_stack: u32,
    pub off_task_stack: u32,
    /// Bytes of user stack a CPU may copy in a second (`copies`).
    pub copy_budget: u32,
    /// 1: user stacks are the kernel's frame-pointer walks (`--call-graph fp`); 0: copies.
    pub user_fp: u32,
}

impl Settings {
    /// What the object holds until the loader writes it: every process but pid 0
    /// (`target_kind::ALL`), no slow-wait events, every optional offset absent, every switch
    /// off.
    pub const DEFAULT: Settings = Settings {
        slow_ns: u64::MAX,
        image_start: 0,
        image_end: 0,
        target_kind: 0,
        target_id: 0,
        off_task_files: 0,
        off_files_next_fd: 0,
        off_files_fdt: 0,
        off_files_file_lock: 0,
        off_fdt_max_fds: 0,
        off_fdt_open_fds: 0,
        alloc_start_arg: 0,
        off_task_signal: 0,
        off_signal_live: 0,
        off_task_tgid: 0,
        off_task_mm: u32::MAX,
        off_mm_mmap_lock: u32::MAX,
        off_task_sighand: u32::MAX,
        off_sighand_siglock: u32::MAX,
        off_task_cfs_rq: u32::MAX,
        off_cfs_rq_rq: u32::MAX,
        off_rq_lock: u32::MAX,
        off_cgroup_kn: u32::MAX,
        off_kernfs_id: u32::MAX,
        off_cgroup_root: u32::MAX,
        off_root_hierarchy: u32::MAX,
        latency: 0,
        trace_on: 0,
        children: 0,
        task_btf: 0,
        off_task_fsbase: u32::MAX,
        off_mm_start_stack: u32::MAX,
        off_task_stack: u32::MAX,
        copy_budget: crate::copies::BUDGET_BYTES_PER_CPU_SEC,
        user_fp: 0,
    };
}

// Three u64s and 32 u32s (an even count: no tail padding), nothing between them.
const _: () = assert!(core::mem::size_of::<Settings>() == 3 * 8 + 32 * 4);

/// `Settings::target_kind` values: what the programs' filter lets through.
pub mod target_kind {
    /// Every process but `target_id`, fdprof's own.
    pub const ALL: u32 = 0;
    /// Every thread of the process `target_id`.
    pub const TGID: u32 = 1;
    /// The thread `target_id` only.
    pub const TID: u32 = 2;
    /// The processes in `TARGETS` (`targets`), but `target_id` (fdprof's own).
    pub const SET: u32 = 3;
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] data, u64s then u32s, no padding (checked above).
    unsafe impl aya::Pod for super::Settings {}
}
