//! User stacks as copies (`fdprof_common::copies`): the top of the user stack and the
//! registers a walk starts from, sent once per (process, ip, depth) for user space to unwind
//! from call-frame information. A stack seen before gets the id of its first copy from
//! `COPY_IDS`: a lookup, where the frame-pointer walk this replaces cost ~1.2 µs every time.

use aya_ebpf::{
    EbpfContext,
    helpers::{
        bpf_get_current_task, bpf_get_current_task_btf, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_kernel, bpf_task_pt_regs, generated::bpf_probe_read_user,
    },
    macros::map,
    maps::{LruHashMap, PerCpuArray, PerfEventByteArray, RingBuf},
};
use fdprof_common::{
    copies::{
        COPIES_RING_BYTES, COPY_BYTES, COPY_ID_BASE, COPY_IDS as COPY_ID_ENTRIES, CopyHeader,
        StackCopy,
    },
    counters::drop,
};

use crate::{
    counters::dropped,
    settings::{direct_loads, setting},
};

#[map]
static STACK_COPIES: RingBuf = RingBuf::with_byte_size(COPIES_RING_BYTES, 0);

/// The slow-path probe's copies (per-CPU perf buffers: no lock taken to send).
#[map]
static SLOW_COPIES: PerfEventByteArray = PerfEventByteArray::new(0);

#[map]
static COPY_IDS: LruHashMap<u64, i32> = LruHashMap::with_max_entries(COPY_ID_ENTRIES, 0);

/// This CPU's copy being made (too large for the BPF stack).
#[map]
static COPY_SCRATCH: PerCpuArray<StackCopy> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's budget window and id sequence.
#[repr(C)]
#[derive(Clone, Copy)]
struct CopyState {
    window_ns: u64,
    bytes: u64,
    seq: u32,
    _pad: u32,
}

#[map]
static COPY_STATE: PerCpuArray<CopyState> = PerCpuArray::with_max_entries(1, 0);

/// The programs do not wake user space for a copy (a wakeup costs more than the copy): it
/// reads the ring on a timer (`copies::READ_EVERY_MS`).
const BPF_RB_NO_WAKEUP: u64 = 1;

/// A stack further than this from its thread's TLS block or the main stack's top is not
/// measured from them.
const MAX_SPAN: u64 = 64 << 20;

/// The user registers a walk starts from, and the syscall a task is in.
#[derive(Clone, Copy, Default)]
pub(crate) struct UserRegs {
    pub(crate) ip: u64,
    pub(crate) sp: u64,
    pub(crate) bp: u64,
    pub(crate) orig_ax: u64,
}

/// x86_64 `struct pt_regs`, in words: bp, orig_ax, ip, sp.
const BP: usize = 4;
const ORIG_AX: usize = 15;
const IP: usize = 16;
const SP: usize = 19;
/// `sizeof(struct pt_regs)` and `THREAD_SIZE`: where the user registers lie on a task's
/// kernel stack, for kernels without `bpf_task_pt_regs` (5.10).
const PT_REGS_BYTES: u64 = 168;
const THREAD_SIZE: u64 = 16384;

impl UserRegs {
    /// From `struct pt_regs` at `regs` (a perf sample's context, taken in user mode).
    ///
    /// # Safety
    /// `regs` points at a whole, readable `struct pt_regs`.
    #[inline(always)]
    pub(crate) unsafe fn at(regs: *const u64) -> Self {
        unsafe {
            Self {
                ip: *regs.add(IP),
                sp: *regs.add(SP),
                bp: *regs.add(BP),
                orig_ax: *regs.add(ORIG_AX),
            }
        }
    }

    /// The current task's saved user registers: BTF loads where the program is BTF-typed,
    /// the read helper otherwise.
    #[inline(always)]
    pub(crate) fn current(btf: bool) -> Self {
        if setting(|s| &s.task_btf) == 0 {
            return Self::from_kernel_stack();
        }
        // SAFETY: the helper returns the current task's saved user registers, a BTF pointer:
        // BTF-typed programs load from it directly (checked by the verifier, fixed up on
        // fault), the others through the read helper, which copes with any address.
        unsafe {
            let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u64;
            if direct_loads(btf) {
                Self::at(regs)
            } else {
                Self::read(regs as u64)
            }
        }
    }

    #[inline(always)]
    fn from_kernel_stack() -> Self {
        let off = setting(|s| &s.off_task_stack);
        if off == u32::MAX {
            return Self::default();
        }
        let task = unsafe { bpf_get_current_task() };
        match read::<u64>(task + u64::from(off)) {
            Some(stack) if stack != 0 => Self::read(stack + THREAD_SIZE - PT_REGS_BYTES),
            _ => Self::default(),
        }
    }

    #[inline(always)]
    fn read(regs: u64) -> Self {
        let Some(w) = read::<[u64; SP - BP + 1]>(regs + (BP * 8) as u64) else {
            return Self::default();
        };
        Self {
            ip: w[IP - BP],
            sp: w[SP - BP],
            bp: w[0],
            orig_ax: w[ORIG_AX - BP],
        }
    }
}

#[inline(always)]
fn read<T>(addr: u64) -> Option<T> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(addr as *const T).ok() }
}

/// The current thread's TLS block (`fsbase`), its address space (`mm`) and that's stack top
/// (`start_stack`): a thread's stack lies just below the first, the main thread's below the
/// last.
#[inline(always)]
fn stack_tops() -> (u64, u64, u64) {
    let task = unsafe { bpf_get_current_task() };
    let fs_off = setting(|s| &s.off_task_fsbase);
    let fsbase = match fs_off {
        u32::MAX => 0,
        off => read::<u64>(task + u64::from(off)).unwrap_or(0),
    };
    let (mm_off, start_off) = (
        setting(|s| &s.off_task_mm),
        setting(|s| &s.off_mm_start_stack),
    );
    let mm = match mm_off {
        u32::MAX => 0,
        off => read::<u64>(task + u64::from(off)).unwrap_or(0),
    };
    let start_stack = if mm == 0 || start_off == u32::MAX {
        0
    } else {
        read::<u64>(mm + u64::from(start_off)).unwrap_or(0)
    };
    (fsbase, mm, start_stack)
}

/// A stack to copy: its `COPY_IDS` key, address space and length.
struct Planned {
    key: u64,
    mm: u64,
    len: u32,
}

#[inline(always)]
fn plan(tgid: u32, regs: &UserRegs) -> Planned {
    let (fsbase, mm, start_stack) = stack_tops();
    let top = if fsbase > regs.sp && fsbase - regs.sp <= MAX_SPAN {
        fsbase
    } else if start_stack > regs.sp && start_stack - regs.sp <= MAX_SPAN {
        start_stack
    } else {
        regs.sp + COPY_BYTES as u64
    };
    let key = (u64::from(tgid) << 32
        ^ mm.rotate_left(7)
        ^ regs.ip.rotate_left(17)
        ^ top.wrapping_sub(regs.sp))
    .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        | 1;
    let span = top - regs.sp;
    let len = if span < COPY_BYTES as u64 {
        span as u32 & !7
    } else {
        COPY_BYTES as u32
    };
    Planned { key, mm, len }
}

/// The id of the current user stack's copy, made and sent now if this (address space, ip,
/// depth) has none; -1 (a drop of `probe`'s) when it cannot be copied.
#[inline(always)]
pub(crate) fn user_stack(probe: u32, tgid: u32, regs: &UserRegs) -> i32 {
    if regs.sp == 0 || regs.ip == 0 {
        dropped(probe, drop::USER_STACK);
        return -1;
    }
    let planned = plan(tgid, regs);
    if let Some(&id) = unsafe { COPY_IDS.get(planned.key) } {
        return id;
    }
    let Some((bytes, id)) = fill(probe, &planned, tgid, regs) else {
        return -1;
    };
    // The ring buffer: the programs do not wake user space for a copy.
    if STACK_COPIES
        .output::<[u8]>(bytes, BPF_RB_NO_WAKEUP)
        .is_err()
    {
        dropped(probe, drop::RINGBUF_FULL);
        return -1;
    }
    let _ = COPY_IDS.insert(planned.key, id, 0);
    id
}

/// The slow-path probe's copy of the current user stack, sent through the perf buffers (a
/// site's stacks are taken once, when it is claimed); -1 (a drop) when it cannot be.
#[inline(always)]
pub(crate) fn slow_user_stack<C: EbpfContext>(ctx: &C, probe: u32, tgid: u32) -> i32 {
    let regs = UserRegs::current(false);
    if regs.sp == 0 || regs.ip == 0 {
        dropped(probe, drop::USER_STACK);
        return -1;
    }
    let planned = plan(tgid, &regs);
    let Some((bytes, id)) = fill(probe, &planned, tgid, &regs) else {
        return -1;
    };
    // Lost records are counted by user space (the perf buffer says how many).
    SLOW_COPIES.output(ctx, bytes, 0);
    id
}

/// This CPU's copy made in its scratch element, within its budget: the record's bytes and its
/// id; `None` (a drop) when it cannot be made.
#[inline(always)]
fn fill(probe: u32, planned: &Planned, tgid: u32, regs: &UserRegs) -> Option<(&'static [u8], i32)> {
    let (Some(copy), Some(state)) = (COPY_SCRATCH.get_ptr_mut(0), COPY_STATE.get_ptr_mut(0)) else {
        return None;
    };
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: this CPU's elements; the programs that copy do not nest on a CPU.
    unsafe {
        if now.wrapping_sub((*state).window_ns) >= 1_000_000_000 {
            (*state).window_ns = now;
            (*state).bytes = 0;
        }
        let len = planned.len.min(COPY_BYTES as u32);
        if (*state).bytes + u64::from(len) > u64::from(setting(|s| &s.copy_budget)) {
            dropped(probe, drop::COPY_BUDGET);
            return None;
        }
        if len == 0
            || bpf_probe_read_user(
                (*copy).bytes.as_mut_ptr() as *mut _,
                len,
                regs.sp as *const _,
            ) < 0
        {
            dropped(probe, drop::USER_STACK);
            return None;
        }
        (*state).bytes += u64::from(len);
        (*state).seq = (*state).seq.wrapping_add(1);
        let cpu = bpf_get_smp_processor_id() & 0xff;
        let id = COPY_ID_BASE | ((((*state).seq << 8) | cpu) & (COPY_ID_BASE as u32 - 1)) as i32;
        (*copy).header = CopyHeader {
            key: planned.key,
            ip: regs.ip,
            sp: regs.sp,
            bp: regs.bp,
            mm: planned.mm,
            id,
            tgid,
            len,
            _pad: 0,
        };
        let total = (size_of::<CopyHeader>() as u32 + len) as usize;
        Some((core::slice::from_raw_parts(copy as *const u8, total), id))
    }
}
