//! What this kernel offers fdprof, found by trial, and the mode chosen for each probe role.
//! `doctor` prints it; `record` attaches by it.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::{
    btf::Btf,
    kallsyms::Kallsyms,
    offsets::{KernelOffsets, LockOffsets},
    pod_spec::{Needs, PodSpec},
    roles::{FUNCTION_ROLES, FoundFunction, Mode, Role, SYSCALL_ROLE},
    trial::{Outcome, Trials},
};

/// Direct-probe trials for one kernel function.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionTrials {
    #[serde(flatten)]
    pub function: FoundFunction,
    pub fentry: Outcome,
    pub fexit: Outcome,
    pub kprobe: Outcome,
    pub kretprobe: Outcome,
}

/// One function role: the functions found and how each can be attached.
#[derive(Debug, Clone, Serialize)]
pub struct FunctionRoleReport {
    pub role: Role,
    pub candidates: &'static [&'static str],
    pub functions: Vec<FunctionTrials>,
    /// The mode `record` uses for this role.
    pub chosen: Mode,
}

/// A tracepoint role: each tracepoint tried as classic tracepoint and, where it applies, tp_btf.
#[derive(Debug, Clone, Serialize)]
pub struct TracepointTrial {
    pub name: String,
    pub tracepoint: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp_btf: Option<Outcome>,
}

/// How a tracepoint family (the lock-contention or the fd-syscall tracepoints) is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TracepointKind {
    TpBtf,
    Tracepoint,
    Unavailable,
}

impl TracepointKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            TracepointKind::TpBtf => "tp_btf",
            TracepointKind::Tracepoint => "tracepoint",
            TracepointKind::Unavailable => "unavailable",
        }
    }
}

/// Tries each tracepoint of `family` as record attaches it (the contract's tp_btf and classic
/// programs), and says which way record will take: tp_btf where every one loads so, else
/// classic where every one does.
fn family(trials: &Trials, family: Role) -> (Vec<TracepointTrial>, TracepointKind) {
    let list: Vec<TracepointTrial> = family
        .tp_btf_programs()
        .iter()
        .zip(family.tracepoint_programs())
        .map(|(&(_, btf_name), &(_, category, name))| TracepointTrial {
            name: format!("{category}:{name}"),
            tracepoint: trials.tracepoint(category, name),
            tp_btf: Some(trials.tp_btf(btf_name)),
        })
        .collect();
    let all = |works: fn(&TracepointTrial) -> bool| !list.is_empty() && list.iter().all(works);
    let kind = if all(|t| t.tp_btf.as_ref().is_some_and(Outcome::works)) {
        TracepointKind::TpBtf
    } else if all(|t| t.tracepoint.works()) {
        TracepointKind::Tracepoint
    } else {
        TracepointKind::Unavailable
    };
    (list, kind)
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Rlimit {
    pub soft: u64,
    pub hard: u64,
}

/// Everything `doctor` reports.
#[derive(Debug, Clone, Serialize)]
pub struct Capabilities {
    /// fdprof's version and the commit it was built from.
    pub fdprof_version: String,
    pub kernel_release: String,
    /// Whether the kernel's BTF could be read and parsed, from where, and why not.
    pub btf: bool,
    pub btf_path: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub btf_error: Option<String>,
    pub rlimit_nofile: Rlimit,
    pub functions: Vec<FunctionRoleReport>,
    pub lock_tracepoints: Vec<TracepointTrial>,
    pub lock_tracepoints_chosen: TracepointKind,
    pub fd_syscall_tracepoints: Vec<TracepointTrial>,
    pub cpu_sampling: Outcome,
    /// The helper `bpf_get_current_task_btf` (5.11+): without it the BTF-typed programs read
    /// the task's fields through the read helper.
    pub task_btf: Outcome,
    /// The overall mode `record` runs in (the allocator role's mode).
    pub mode: Mode,
    /// Mode per role, including the tracepoint roles.
    pub chosen: BTreeMap<String, String>,
    /// Struct offsets from BTF; absent without BTF (then `record` cannot run).
    pub offsets: Option<KernelOffsets>,
    pub lock_names: LockNaming,
    pub user_stacks: UserStacks,
    /// Things fdprof changed or could not change on the way (e.g. mounting tracefs).
    pub notes: Vec<String>,
    /// Inside a container: what its pod spec lacks (set by the caller, who knows what it
    /// would write).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_spec: Option<PodSpec>,
    /// Where stripped binaries' names are looked for, as the flags or the environment say
    /// (set by the caller, who has them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name_sources: Option<NameSources>,
}

/// Where stripped binaries' names are looked for, beyond each binary's own folder, its
/// `.debug/`, the `/usr/lib/debug` of its root and its MiniDebugInfo (always looked in).
#[derive(Debug, Clone, Default, Serialize)]
pub struct NameSources {
    /// Build-id trees and debug-link folders: each `--debug-dir`, then the host's
    /// `/usr/lib/debug`; with whether each is a directory.
    pub debug_dirs: Vec<DebugDir>,
    /// debuginfod servers, in order (`--debuginfod`, else `DEBUGINFOD_URLS`); none: nothing
    /// is fetched.
    pub debuginfod_urls: Vec<String>,
    /// Why the URLs given cannot be used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub debuginfod_error: Option<String>,
    /// Where fetched debug files are kept, and the bound on their bytes.
    pub debuginfod_cache: String,
    pub debuginfod_cache_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct DebugDir {
    pub path: String,
    pub exists: bool,
}

/// How `record` can name the locks waited for, beyond the target's `file_lock` (by address)
/// and the first caller below the lock functions (always).
#[derive(Debug, Clone, Serialize)]
pub struct LockNaming {
    /// `mmap_lock` and `siglock` told from the waiting task: their offsets are in BTF.
    pub by_kind: bool,
    /// Static locks by their symbol: kallsyms lists the kernel image's data
    /// (`CONFIG_KALLSYMS_ALL`).
    pub static_symbols: bool,
}

impl LockNaming {
    fn new(lock: Option<&LockOffsets>, static_symbols: bool) -> Self {
        Self {
            by_kind: lock.is_some_and(|l| {
                l.mm_struct_mmap_lock != u32::MAX && l.sighand_struct_siglock != u32::MAX
            }),
            static_symbols,
        }
    }
}

/// How user stacks are walked here: a copy of the stack's top with its registers, unwound in
/// user space from the mapped files' call-frame information.
#[derive(Debug, Clone, Serialize)]
pub struct UserStacks {
    /// Where a task's user registers are read in a syscall: `bpf_task_pt_regs` (with
    /// `bpf_get_current_task_btf`) or the top of its kernel stack (`task_struct.stack`).
    pub registers: &'static str,
    /// Whether a stack's top is known (`thread.fsbase` for threads, `mm.start_stack` for the
    /// main thread): copies stop there instead of at the copy's size.
    pub stack_tops: bool,
    /// Bytes of stack copied at most, and a CPU's copies a second at most.
    pub copy_bytes: usize,
    pub budget_bytes_per_cpu_sec: u32,
}

impl UserStacks {
    fn new(task_btf: bool, lock: Option<&LockOffsets>) -> Self {
        let known = |f: fn(&LockOffsets) -> u32| lock.is_some_and(|l| f(l) != u32::MAX);
        Self {
            registers: match (task_btf, known(|l| l.task_struct_stack)) {
                (true, _) => "bpf_task_pt_regs",
                (false, true) => "task_struct.stack",
                (false, false) => "unknown (no BTF): no user stacks in syscalls",
            },
            stack_tops: known(|l| l.task_struct_fsbase) && known(|l| l.mm_struct_start_stack),
            copy_bytes: fdprof_common::copies::COPY_BYTES,
            budget_bytes_per_cpu_sec: fdprof_common::copies::BUDGET_BYTES_PER_CPU_SEC,
        }
    }
}

pub(crate) use crate::procfs::kernel_release;

pub(crate) fn rlimit_nofile() -> Rlimit {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    Rlimit {
        soft: lim.rlim_cur,
        hard: lim.rlim_max,
    }
}

fn mode_for(functions: &[FunctionTrials]) -> Mode {
    let all = |f: fn(&FunctionTrials) -> bool| !functions.is_empty() && functions.iter().all(f);
    if all(|t| t.fentry.works() && t.fexit.works()) {
        Mode::Fentry
    } else if all(|t| t.kprobe.works() && t.kretprobe.works()) {
        Mode::Kprobe
    } else {
        Mode::Tracepoint
    }
}

/// Each function role's candidates present in this kernel, every mode tried on each.
fn function_roles(
    trials: &Trials,
    btf: Option<&Btf>,
    kallsyms: &Kallsyms,
) -> Vec<FunctionRoleReport> {
    FUNCTION_ROLES
        .iter()
        .map(|role| {
            let functions: Vec<FunctionTrials> = role
                .resolve(btf, kallsyms)
                .into_iter()
                .map(|f| FunctionTrials {
                    fentry: trials.fentry(&f.name),
                    fexit: trials.fexit(&f.name),
                    kprobe: trials.kprobe(&f.name, false),
                    kretprobe: trials.kprobe(&f.name, true),
                    function: f,
                })
                .collect();
            FunctionRoleReport {
                role: role.role,
                candidates: role.candidates,
                chosen: mode_for(&functions),
                functions,
            }
        })
        .collect()
}

/// How record attaches the fd syscalls: with the allocator probed directly (`mode`), their own
/// functions in its mode (tried here on close's), else the tracepoints (`tracepoints`).
fn fd_syscalls_mode(trials: &Trials, mode: Mode, tracepoints: &'static str) -> &'static str {
    let close = SYSCALL_ROLE
        .candidates
        .iter()
        .find(|f| f.ends_with("_sys_close"))
        .copied()
        .unwrap_or_default();
    match mode {
        Mode::Fentry if trials.fentry(close).works() && trials.fexit(close).works() => mode.name(),
        Mode::Kprobe
            if trials.kprobe(close, false).works() && trials.kprobe(close, true).works() =>
        {
            mode.name()
        }
        _ => tracepoints,
    }
}

impl Capabilities {
    /// Tries every probe point for real, with the kernel BTF read from `btf_path`. Needs root.
    /// Without usable BTF it still tries what needs none and says what is missing.
    pub fn detect(btf_path: &Path) -> Result<Self> {
        let kallsyms = Kallsyms::load()?;
        let trials = Trials::new(btf_path);
        let mut notes: Vec<String> = super::tracefs::ensure_mounted().into_iter().collect();
        let (btf, offsets, btf_error) = match Btf::from_file(btf_path)
            .and_then(|btf| KernelOffsets::from_btf(&btf).map(|o| (btf, o)))
        {
            Ok((btf, offsets)) => (Some(btf), Some(offsets), None),
            Err(e) => {
                notes.push(
                    "without BTF, fentry, fexit and tp_btf are unavailable and record cannot \
                     locate the fd-table fields: it will refuse to run"
                        .into(),
                );
                (None, None, Some(format!("{e:#}")))
            }
        };

        let functions = function_roles(&trials, btf.as_ref(), &kallsyms);

        // The very tracepoints record attaches, tp_btf first, then classic.
        let (lock_tracepoints, lock_tracepoints_chosen) = family(&trials, Role::LockTracepoints);
        let (fd_syscall_tracepoints, fd_syscalls_chosen) = family(&trials, Role::FdSyscalls);
        let cpu_sampling = trials.cpu_clock();
        let task_btf = trials.task_btf();
        let lock = btf.as_ref().map(LockOffsets::from_btf);
        let lock = lock.as_ref();
        let user_stacks = UserStacks::new(task_btf.works(), lock);

        let mode = functions
            .iter()
            .find(|r| r.role == Role::Allocate)
            .map_or(Mode::Tracepoint, |r| r.chosen);
        let mut chosen: BTreeMap<String, String> = functions
            .iter()
            .map(|r| (r.role.name().to_string(), r.chosen.name().to_string()))
            .collect();
        chosen.insert(
            Role::LockTracepoints.name().into(),
            lock_tracepoints_chosen.name().into(),
        );
        let fd_syscalls_chosen = fd_syscalls_mode(&trials, mode, fd_syscalls_chosen.name());
        chosen.insert(Role::FdSyscalls.name().into(), fd_syscalls_chosen.into());
        chosen.insert(
            "cpu_sampling".into(),
            if cpu_sampling.works() {
                "perf_event cpu-clock"
            } else {
                "unavailable"
            }
            .into(),
        );

        Ok(Self {
            fdprof_version: crate::VERSION.into(),
            kernel_release: kernel_release(),
            btf: btf.is_some(),
            btf_path: btf_path.display().to_string(),
            btf_error,
            rlimit_nofile: rlimit_nofile(),
            functions,
            lock_tracepoints,
            lock_tracepoints_chosen,
            fd_syscall_tracepoints,
            cpu_sampling,
            task_btf,
            mode,
            chosen,
            lock_names: LockNaming::new(lock, kallsyms.image_data.is_some()),
            user_stacks,
            offsets,
            notes,
            pod_spec: None,
            name_sources: None,
        })
    }

    /// What decides which pod spec gaps matter: a tracepoint family that only attaches as a
    /// classic tracepoint needs tracefs; `token_dir` is where a daemon would save its token.
    pub fn needs(&self, token_dir: Option<&'static str>) -> Needs {
        let classic_only = |family: &[TracepointTrial]| {
            !family.is_empty()
                && !family
                    .iter()
                    .all(|t| t.tp_btf.as_ref().is_some_and(Outcome::works))
        };
        Needs {
            classic_tracepoints: classic_only(&self.lock_tracepoints)
                || classic_only(&self.fd_syscall_tracepoints),
            token_dir,
        }
    }
}
