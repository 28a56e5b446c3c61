//! What the profiler needs to know about the running kernel: where the fd-table fields are
//! (BTF), and which kernel function plays each probe role.

use anyhow::{Context, Result};

use crate::probe::{
    btf::Btf,
    kallsyms::Kallsyms,
    offsets::{CgroupOffsets, KernelOffsets, LockOffsets},
    roles::{FUNCTION_ROLES, FoundFunction, FunctionRole, Role, SYSCALL_ROLE},
};

pub struct Kernel {
    pub offsets: KernelOffsets,
    pub lock_offsets: LockOffsets,
    pub cgroup_offsets: CgroupOffsets,
    /// The kernel image's data, `[start, end)`, where kallsyms lists it: static locks.
    pub image_data: Option<(u64, u64)>,
    /// The kernel's BTF as aya needs it (fentry, tp_btf).
    pub btf: aya::Btf,
    /// Each function role and the functions it resolves to here.
    pub functions: Vec<(FunctionRole, Vec<FoundFunction>)>,
    /// The fd syscalls' functions present here (probed in the fentry and kprobe modes).
    pub syscall_functions: Vec<FoundFunction>,
    /// Whether `bpf_get_current_task_btf` loads here (5.11+): the BTF-typed programs' direct
    /// loads need it, and read through the helper without it.
    pub task_btf: bool,
    /// Whether the kernel has `lock:contention_begin/end` (5.19+): its tracepoint function
    /// in BTF or kallsyms.
    pub lock_tracepoints: bool,
}

impl Kernel {
    /// Reads the running kernel's BTF; `kallsyms` is `/proc/kallsyms`, already read.
    pub(crate) fn discover(kallsyms: &Kallsyms) -> Result<Self> {
        let btf = Btf::from_sys_fs()?;
        let offsets = KernelOffsets::from_btf(&btf)?;
        let functions = FUNCTION_ROLES
            .iter()
            .map(|r| (*r, r.resolve(Some(&btf), kallsyms)))
            .collect();
        let syscall_functions = SYSCALL_ROLE.resolve(Some(&btf), kallsyms);
        let lock_tracepoints = [
            "__bpf_trace_contention_begin",
            "__traceiter_contention_begin",
        ]
        .iter()
        .any(|f| btf.has_func(f) || kallsyms.has_function(f));
        Ok(Self {
            offsets,
            lock_offsets: LockOffsets::from_btf(&btf),
            cgroup_offsets: CgroupOffsets::from_btf(&btf),
            image_data: kallsyms.image_data,
            btf: aya::Btf::from_sys_fs().context("cannot read the kernel's BTF")?,
            functions,
            syscall_functions,
            task_btf: crate::probe::trial::Trials::new(std::path::Path::new(
                crate::probe::btf::SYS_FS,
            ))
            .task_btf()
            .works(),
            lock_tracepoints,
        })
    }

    /// `start` is the first argument of `alloc_fd`, the second of `__alloc_fd(files, …)`.
    pub(crate) fn alloc_start_arg(&self) -> u32 {
        let legacy = self.functions.iter().any(|(r, f)| {
            r.role == Role::Allocate && f.first().is_some_and(|f| f.name == "__alloc_fd")
        });
        u32::from(legacy)
    }
}
