//! On-CPU sampling: a perf-event program, attached to one sampling event per online CPU,
//! counts each sample of the target by its (kernel stack, user stack copy) pair, per CPU: a
//! sample adds one to this CPU's element, no lock; a user stack not seen before is copied
//! (`copies`).

use aya_ebpf::{
    EbpfContext,
    bindings::BPF_F_USER_STACK,
    helpers::bpf_get_current_pid_tgid,
    macros::{map, perf_event},
    maps::{PerCpuHashMap, StackTrace},
    programs::{PerfEventContext, tracing::StackIdContext},
};
use fdprof_common::{
    counters::drop,
    cpu::{CpuKey, STACK_PAIRS},
};

use crate::{
    copies::{self, UserRegs},
    counters::dropped,
    filter, kernel,
    settings::setting,
};

#[map]
static CPU_SAMPLES: PerCpuHashMap<CpuKey, u64> = PerCpuHashMap::with_max_entries(STACK_PAIRS, 0);

/// One entry unless sampling: the loader sets `STACK_TRACES` then.
#[map]
static CPU_STACKS: StackTrace = StackTrace::with_max_entries(1, 0);

const BPF_NOEXIST: u64 = 1;

/// x86_64 `struct pt_regs`: `cs` is its 18th word; its low two bits are the privilege level
/// the sample interrupted (3: user mode).
const PT_REGS_CS_WORD: usize = 17;

#[inline(always)]
fn stack_id(ctx: &PerfEventContext, flags: u64, reason: u32) -> i32 {
    match ctx.get_stackid(&CPU_STACKS, flags) {
        Ok(id) => id as i32,
        Err(_) => {
            dropped(drop::PROBE_CPU, reason);
            -1
        }
    }
}

#[perf_event]
pub(crate) fn fdprof_cpu_sample(ctx: PerfEventContext) -> u32 {
    // tid 0 is a CPU's idle task, which `--all` would otherwise count as on-CPU.
    if !matches!(filter::target_tid(), Some(tid) if tid != 0) {
        return 0;
    }
    // SAFETY: the context is the sample's `bpf_perf_event_data`, which begins with the
    // interrupted registers; the verifier checks the read.
    let cs = unsafe { *(ctx.as_ptr() as *const u64).add(PT_REGS_CS_WORD) };
    let in_user_mode = cs & 3 == 3;
    let key = CpuKey {
        // A sample in user mode has no kernel stack: none, not a drop.
        kernel_stack: if in_user_mode {
            -1
        } else {
            stack_id(&ctx, 0, drop::KERNEL_STACK)
        },
        // A kernel thread (`--all`) has no user stack: none, not a drop.
        user_stack: if !kernel::current_has_mm() {
            -1
        } else if setting(|s| &s.user_fp) != 0 {
            stack_id(&ctx, u64::from(BPF_F_USER_STACK), drop::USER_STACK)
        } else {
            let regs = if in_user_mode {
                // SAFETY: as above: the context begins with the interrupted registers.
                unsafe { UserRegs::at(ctx.as_ptr() as *const u64) }
            } else {
                UserRegs::current(false)
            };
            let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
            copies::user_stack(drop::PROBE_CPU, tgid, &regs)
        },
        tgid: filter::process_of_all().unwrap_or(0),
    };
    if let Some(count) = CPU_SAMPLES.get_ptr_mut(key) {
        // SAFETY: this CPU's value; a perf-event program does not nest on a CPU.
        unsafe { *count += 1 };
    } else if CPU_SAMPLES.insert(key, 1, BPF_NOEXIST).is_err() {
        // Every stack pair the map holds is taken.
        dropped(drop::PROBE_CPU, drop::MAP_FULL);
    }
    0
}
