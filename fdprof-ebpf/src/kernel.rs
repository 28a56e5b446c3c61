//! Reading the current task's structures (its fd table, its locks, a cgroup's name) through
//! the offsets the loader found in the kernel's BTF (`Settings`; the Rust eBPF side has no
//! CO-RE relocations).

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use fdprof_common::targets::CgroupKey;

use crate::settings::{direct_loads, setting};

/// `struct cgroup *cgrp` as `TARGET_CGROUPS` keys it; `None` where the kernel's fields are
/// unknown or unreadable.
#[inline(always)]
pub(crate) fn cgroup_key(cgrp: u64) -> Option<CgroupKey> {
    let (kn_off, id_off) = (setting(|s| &s.off_cgroup_kn), setting(|s| &s.off_kernfs_id));
    let (root_off, hier_off) = (
        setting(|s| &s.off_cgroup_root),
        setting(|s| &s.off_root_hierarchy),
    );
    if kn_off == u32::MAX || id_off == u32::MAX || root_off == u32::MAX || hier_off == u32::MAX {
        return None;
    }
    let kn = read::<u64>(cgrp + u64::from(kn_off)).filter(|&k| k != 0)?;
    let root = read::<u64>(cgrp + u64::from(root_off)).filter(|&r| r != 0)?;
    Some(CgroupKey {
        hierarchy: read::<u32>(root + u64::from(hier_off))?,
        _pad: 0,
        id: read::<u64>(kn + u64::from(id_off))?,
    })
}

/// `current->signal` and its `live` count (threads that have not yet passed `do_exit`'s
/// decrement).
#[inline(always)]
pub(crate) fn current_signal_live() -> Option<(u64, i32)> {
    let task = unsafe { bpf_get_current_task() };
    let signal =
        read::<u64>(task + u64::from(setting(|s| &s.off_task_signal))).filter(|&s| s != 0)?;
    let live = read::<i32>(signal + u64::from(setting(|s| &s.off_signal_live)))?;
    Some((signal, live))
}

#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(addr as *const T).ok() }
}

/// Whether the current task has a user address space (`current->mm`): kernel threads have
/// none, so no user stack. True when the kernel's offsets are unknown.
#[inline(always)]
pub(crate) fn current_has_mm() -> bool {
    let off = setting(|s| &s.off_task_mm);
    if off == u32::MAX {
        return true;
    }
    let task = unsafe { bpf_get_current_task() };
    read::<u64>(task + u64::from(off)).is_none_or(|mm| mm != 0)
}

/// `current->files`.
#[inline(always)]
pub(crate) fn current_files() -> Option<u64> {
    task_files(unsafe { bpf_get_current_task() })
}

/// `task->files`.
#[inline(always)]
pub(crate) fn task_files(task: u64) -> Option<u64> {
    read::<u64>(task + u64::from(setting(|s| &s.off_task_files))).filter(|&f| f != 0)
}

/// `task->tgid`.
#[inline(always)]
pub(crate) fn task_tgid(task: u64) -> Option<u32> {
    read::<u32>(task + u64::from(setting(|s| &s.off_task_tgid))).filter(|&t| t != 0)
}

/// `&current->files->file_lock`.
#[inline(always)]
pub(crate) fn current_file_lock() -> Option<u64> {
    Some(own_lock(OwnLock::FileLock, false)).filter(|&lock| lock != 0)
}

/// `files->next_fd`, `files->fdt` and `fdt->max_fds`.
#[inline(always)]
pub(crate) fn table_state(files: u64) -> Option<(u32, u64, u32)> {
    let next_fd = read::<u32>(files + u64::from(setting(|s| &s.off_files_next_fd)))?;
    let fdt = read::<u64>(files + u64::from(setting(|s| &s.off_files_fdt)))?;
    let max_fds = read::<u32>(fdt + u64::from(setting(|s| &s.off_fdt_max_fds)))?;
    Some((next_fd, fdt, max_fds))
}

/// [`table_state`] of the current task through BTF-checked direct loads, for tp_btf programs:
/// the verifier turns them into plain loads with an exception fixup, much cheaper than
/// `bpf_probe_read_kernel`. The offsets are constants to the verifier (frozen `.rodata`).
#[inline(always)]
pub(crate) fn current_table_state_btf() -> Option<(u32, u64, u32)> {
    // SAFETY: a trusted BTF pointer to the current task; every load below is checked by the
    // verifier against the kernel's BTF and fixed up on fault.
    unsafe {
        let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
        let files = *(task.add(setting(|s| &s.off_task_files) as usize) as *const *const u8);
        if files.is_null() {
            return None;
        }
        let next_fd = *(files.add(setting(|s| &s.off_files_next_fd) as usize) as *const u32);
        let fdt = *(files.add(setting(|s| &s.off_files_fdt) as usize) as *const *const u8);
        if fdt.is_null() {
            return None;
        }
        let max_fds = *(fdt.add(setting(|s| &s.off_fdt_max_fds) as usize) as *const u32);
        Some((next_fd, fdt as u64, max_fds))
    }
}

/// `open_fds` words between the first and the last that [`open_in_range`] reads at most:
/// close_range over ~32k fds.
const RANGE_WORDS: u32 = 512;

/// How many fds in `first..=last` are open in `fdt`, and whether the range was read whole (not
/// when wider than [`RANGE_WORDS`] words: then the count is a floor). Branch-free per word, so
/// the verifier walks the loop once per iteration, not once per path.
#[inline(always)]
pub(crate) fn open_in_range(fdt: u64, max_fds: u32, first: u32, last: u32) -> (u32, bool) {
    if first >= max_fds || first > last {
        return (0, true);
    }
    let last = if last < max_fds { last } else { max_fds - 1 };
    let Some(bitmap) = read::<u64>(fdt + u64::from(setting(|s| &s.off_fdt_open_fds))) else {
        return (0, false);
    };
    // An unreadable word counts as empty.
    let word = |w: u32| -> u64 {
        let mut v = 0u64;
        // SAFETY: the helper copes with any source address and writes 8 bytes to `v`.
        unsafe {
            aya_ebpf::helpers::generated::bpf_probe_read_kernel(
                (&mut v as *mut u64).cast(),
                8,
                (bitmap + u64::from(w) * 8) as *const _,
            )
        };
        v
    };
    let (w0, w1) = (first / 64, last / 64);
    let low = !0u64 << (first % 64);
    let high = !0u64 >> (63 - last % 64);
    if w0 == w1 {
        return ((word(w0) & low & high).count_ones(), true);
    }
    let mut open = (word(w0) & low).count_ones() + (word(w1) & high).count_ones();
    let middle = w1 - w0 - 1;
    for i in 0..RANGE_WORDS {
        if i >= middle {
            break;
        }
        open += word(w0 + 1 + i).count_ones();
    }
    (open, middle <= RANGE_WORDS)
}

/// Whether `fd` is open in `fdt` (its bit in `open_fds`).
#[inline(always)]
pub(crate) fn fd_is_open(fdt: u64, max_fds: u32, fd: u32) -> bool {
    if fd >= max_fds {
        return false;
    }
    let Some(bitmap) = read::<u64>(fdt + u64::from(setting(|s| &s.off_fdt_open_fds))) else {
        return false;
    };
    read::<u64>(bitmap + u64::from(fd / 64) * 8).is_some_and(|w| w & (1 << (fd % 64)) != 0)
}

/// Whether `lock` lies in the kernel image (a static lock).
#[inline(always)]
pub(crate) fn is_static(lock: u64) -> bool {
    lock >= setting(|s| &s.image_start) && lock < setting(|s| &s.image_end)
}

/// The lock of the runqueue the current task runs on, `current->se.cfs_rq->rq->__lock` (0 where
/// the kernel has no such fields): the task is running, so that is this CPU's runqueue. As
/// [`own_lock`], `btf` selects direct loads.
#[inline(always)]
pub(crate) fn running_rq_lock(btf: bool) -> u64 {
    let (se_cfs_rq, cfs_rq_rq, rq_lock) = (
        setting(|s| &s.off_task_cfs_rq),
        setting(|s| &s.off_cfs_rq_rq),
        setting(|s| &s.off_rq_lock),
    );
    if se_cfs_rq == u32::MAX || cfs_rq_rq == u32::MAX || rq_lock == u32::MAX {
        return 0;
    }
    let rq = if direct_loads(btf) {
        // SAFETY: as in own_lock: loads the verifier checks against the kernel's BTF (a
        // `struct cfs_rq *`, then a `struct rq *`) and fixes up on fault.
        unsafe {
            let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
            let cfs_rq = *(task.add(se_cfs_rq as usize) as *const *const u8);
            if cfs_rq.is_null() {
                return 0;
            }
            *(cfs_rq.add(cfs_rq_rq as usize) as *const *const u8) as u64
        }
    } else {
        let task = unsafe { bpf_get_current_task() };
        read::<u64>(task + u64::from(se_cfs_rq))
            .filter(|&c| c != 0)
            .and_then(|c| read::<u64>(c + u64::from(cfs_rq_rq)))
            .unwrap_or(0)
    };
    if rq == 0 { 0 } else { rq + u64::from(rq_lock) }
}

/// A lock of the current task's own structures.
#[derive(Clone, Copy)]
pub(crate) enum OwnLock {
    /// `current->files->file_lock`
    FileLock,
    /// `current->mm->mmap_lock`
    MmapLock,
    /// `current->sighand->siglock`
    Siglock,
}

/// The address of `which` (0 when the task has no such structure); `btf` selects
/// BTF-checked direct loads (tp_btf programs only), much cheaper than `bpf_probe_read_kernel`.
#[inline(always)]
pub(crate) fn own_lock(which: OwnLock, btf: bool) -> u64 {
    let (off, inner) = match which {
        OwnLock::FileLock => (
            setting(|s| &s.off_task_files),
            setting(|s| &s.off_files_file_lock),
        ),
        OwnLock::MmapLock => (
            setting(|s| &s.off_task_mm),
            setting(|s| &s.off_mm_mmap_lock),
        ),
        OwnLock::Siglock => (
            setting(|s| &s.off_task_sighand),
            setting(|s| &s.off_sighand_siglock),
        ),
    };
    if off == u32::MAX || inner == u32::MAX {
        return 0;
    }
    let ptr = if direct_loads(btf) {
        // SAFETY: as in current_table_state_btf: a trusted BTF pointer and a load the verifier
        // checks against the kernel's BTF and fixes up on fault. Only an address is computed
        // from the loaded pointer.
        unsafe {
            let task = aya_ebpf::helpers::bpf_get_current_task_btf() as *const u8;
            *(task.add(off as usize) as *const *const u8) as u64
        }
    } else {
        let task = unsafe { bpf_get_current_task() };
        read::<u64>(task + u64::from(off)).unwrap_or(0)
    };
    if ptr == 0 { 0 } else { ptr + u64::from(inner) }
}
