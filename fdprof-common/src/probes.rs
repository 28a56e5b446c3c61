//! The attach contract: the names of the object's maps and programs, the probe roles and the
//! modes they attach in (the load-time settings are `settings`'). User space attaches by these
//! names; the eBPF side declares its items under exactly these identifiers, and a test of
//! `fdprof-profiler` (`object_matches_the_contract`) checks the built object against every one
//! of them.

/// Maps of the profiler object.
pub mod map {
    pub const STACKS: &str = "STACKS";
    /// Site → its element of `SITE_WAITS`.
    pub const SITE_INDEX: &str = "SITE_INDEX";
    /// Per-CPU array of `contention::SiteWaits`.
    pub const SITE_WAITS: &str = "SITE_WAITS";
    /// `SITE_WAITS` element → the site it was given to.
    pub const SITE_OWNERS: &str = "SITE_OWNERS";
    /// Array of `contention::SlowSite`s, `SLOW_SITES_PER_CPU` for each CPU: the slow-path
    /// probe's waits of every spinlock where there are no lock tracepoints.
    pub const SLOW_SITES: &str = "SLOW_SITES";
    pub const SYSCALL_COUNTERS: &str = "SYSCALL_COUNTERS";
    pub const GLOBALS: &str = "GLOBALS";
    pub const HISTS: &str = "HISTS";
    pub const DROPS: &str = "DROPS";
    pub const FN_COUNTERS: &str = "FN_COUNTERS";
    pub const FN_HISTS: &str = "FN_HISTS";
    pub const CONFIG: &str = "CONFIG";
    /// Ring buffer of `events::EventRecord`s.
    pub const EVENTS: &str = "EVENTS";
    /// Ring buffer of `trace::TraceRecord`s (`record --trace`).
    pub const TRACE: &str = "TRACE";
    /// Per-CPU hash of `process::ProcessSyscall` → `process::ProcessCounts` (`-a` only).
    pub const PROCESS_SYSCALLS: &str = "PROCESS_SYSCALLS";
    /// Hash of tgid → comm (`-a` only).
    pub const PROCESS_COMMS: &str = "PROCESS_COMMS";
    /// Per-CPU hash of tgid → `process::ProcessScan` (`-a` only).
    pub const PROCESS_SCANS: &str = "PROCESS_SCANS";
    /// Array of `process::ThreadRow`s, mmapable (`process::THREAD_SLOTS`): running threads'
    /// figures not yet added to `PROCESS_SYSCALLS` and `PROCESS_SCANS` (`-a`, a target set).
    pub const THREAD_ROWS: &str = "THREAD_ROWS";
    /// Ring buffer of `process::ProcessStart`s: forks and execs to snapshot (`-a` only).
    pub const PROCESS_STARTS: &str = "PROCESS_STARTS";
    /// Hash of tgid → `targets::TargetEntry`: the target set.
    pub const TARGETS: &str = "TARGETS";
    /// Array of a byte per pid (`targets::MAX_MEMBER_PIDS`): 1 while the process is in the set.
    pub const MEMBERS: &str = "MEMBERS";
    /// Hash of comm (NUL-padded) → slot: names whose processes join the set at exec or rename.
    pub const TARGET_COMMS: &str = "TARGET_COMMS";
    /// Hash of `targets::CgroupKey` → slot: cgroups whose processes join the set when moved in.
    pub const TARGET_CGROUPS: &str = "TARGET_CGROUPS";
    /// Queue of the tgids of processes that ended (`-a`, a target set), for user space to free
    /// their per-process rows once read (`process::EXITED_SLOTS`).
    pub const EXITED: &str = "EXITED";
    /// LRU hash of (`signal_struct` address, tgid) → 1: processes whose end was claimed (one
    /// thread's exit ends it); an entry of `EXITED`'s is deleted with its process's rows.
    pub const ENDED: &str = "ENDED";
    pub const ALL: [&str; 25] = [
        STACKS,
        SITE_INDEX,
        SITE_WAITS,
        SITE_OWNERS,
        SLOW_SITES,
        SYSCALL_COUNTERS,
        GLOBALS,
        HISTS,
        DROPS,
        FN_COUNTERS,
        FN_HISTS,
        CONFIG,
        EVENTS,
        TRACE,
        PROCESS_SYSCALLS,
        PROCESS_COMMS,
        PROCESS_SCANS,
        THREAD_ROWS,
        PROCESS_STARTS,
        TARGETS,
        MEMBERS,
        TARGET_COMMS,
        TARGET_CGROUPS,
        EXITED,
        ENDED,
    ];
}

/// What a probe role observes. The first six are kernel functions, probed directly (fentry or
/// kprobe) where the kernel allows; then the tracepoint families and the trace's in-lock probes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Role {
    Allocate,
    Close,
    Expand,
    Dup2,
    CloseRange,
    LockSlowpath,
    LockTracepoints,
    FdSyscalls,
    /// `record --trace` in the direct modes: kprobes just after each `spin_lock` of
    /// `files->file_lock` in the allocator and close functions (offsets found in the kernel's
    /// text at attach), giving each traced operation its moment inside the lock.
    LockedSections,
    /// `sched:sched_process_exit`: the target's threads ending (events only); and
    /// `sched:sched_process_exec` and `sched_process_fork`, the trace's exec and fork events
    /// (`record --trace`) and a launched command's children followed from their fork, in every
    /// mode (fork with tp_btf only).
    TaskExits,
}

impl Role {
    pub const FUNCTIONS: [Role; 6] = [
        Role::Allocate,
        Role::Close,
        Role::Expand,
        Role::Dup2,
        Role::CloseRange,
        Role::LockSlowpath,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Role::Allocate => "allocate",
            Role::Close => "close",
            Role::Expand => "expand",
            Role::Dup2 => "dup2",
            Role::CloseRange => "close_range",
            Role::LockSlowpath => "lock_slowpath",
            Role::LockTracepoints => "lock_tracepoints",
            Role::FdSyscalls => "fd_syscalls",
            Role::TaskExits => "task_exits",
            Role::LockedSections => "locked_sections",
        }
    }

    /// fentry/fexit program pairs; the slow path has one pair per function it may have, the fd
    /// syscalls one per [`SYSCALL_FUNCTIONS`] entry (same index).
    pub const fn fentry_programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            // One pair per candidate: `__alloc_fd` returns after 4 arguments, `alloc_fd` after 3.
            Role::Allocate => &[
                (program::FE_ALLOC, program::FX_ALLOC_LEGACY),
                (program::FE_ALLOC, program::FX_ALLOC),
            ],
            Role::Close => &[(program::FE_CLOSE, program::FX_CLOSE)],
            Role::Expand => &[(program::FE_EXPAND, program::FX_EXPAND)],
            Role::Dup2 => &[(program::FE_DUP2, program::FX_DUP2)],
            Role::CloseRange => &[(program::FE_CRANGE, program::FX_CRANGE)],
            Role::LockSlowpath => &[
                (program::FE_SPIN, program::FX_SPIN),
                (program::FE_SPIN2, program::FX_SPIN2),
            ],
            Role::FdSyscalls => &program::SYSCALL_FENTRY,
            Role::LockTracepoints | Role::TaskExits | Role::LockedSections => &[],
        }
    }

    /// The kprobe/kretprobe pair (each attached to every function of the role).
    pub const fn kprobe_programs(self) -> Option<(&'static str, &'static str)> {
        Some(match self {
            Role::Allocate => (program::KP_ALLOC, program::KR_ALLOC),
            Role::Close => (program::KP_CLOSE, program::KR_CLOSE),
            Role::Expand => (program::KP_EXPAND, program::KR_EXPAND),
            Role::Dup2 => (program::KP_DUP2, program::KR_DUP2),
            Role::CloseRange => (program::KP_CRANGE, program::KR_CRANGE),
            Role::LockSlowpath => (program::KP_SPIN, program::KR_SPIN),
            Role::FdSyscalls => (program::KP_SYS, program::KR_SYS),
            Role::LockTracepoints | Role::TaskExits | Role::LockedSections => return None,
        })
    }

    /// A tracepoint family's (tp_btf program, tracepoint) pairs, opening probe first.
    pub const fn tp_btf_programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Role::LockTracepoints => &[
                (program::LOCK_BEGIN, "contention_begin"),
                (program::LOCK_END, "contention_end"),
            ],
            Role::FdSyscalls => &[
                (program::SYS_ENTER, "sys_enter"),
                (program::SYS_EXIT, "sys_exit"),
            ],
            Role::TaskExits => &[
                (program::TASK_EXIT, "sched_process_exit"),
                (program::TASK_EXEC, "sched_process_exec"),
                (program::TASK_FORK, "sched_process_fork"),
                (program::TASK_RENAME, "task_rename"),
                (program::CGROUP_ATTACH, "cgroup_attach_task"),
            ],
            _ => &[],
        }
    }

    /// A tracepoint family's (classic program, category, tracepoint) triples, opening first.
    pub const fn tracepoint_programs(
        self,
    ) -> &'static [(&'static str, &'static str, &'static str)] {
        match self {
            Role::LockTracepoints => &[
                (program::TP_LOCK_BEGIN, "lock", "contention_begin"),
                (program::TP_LOCK_END, "lock", "contention_end"),
            ],
            Role::FdSyscalls => &[
                (program::TP_SYS_ENTER, "raw_syscalls", "sys_enter"),
                (program::TP_SYS_EXIT, "raw_syscalls", "sys_exit"),
            ],
            Role::TaskExits => &[
                (program::TP_TASK_EXIT, "sched", "sched_process_exit"),
                (program::TP_TASK_EXEC, "sched", "sched_process_exec"),
                (program::TP_TASK_RENAME, "task", "task_rename"),
            ],
            _ => &[],
        }
    }
}

/// How a function role is observed, from most to least direct.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum Mode {
    /// fentry/fexit on the function (BTF trampolines).
    Fentry,
    /// kprobe/kretprobe on the function.
    Kprobe,
    /// Tracepoints only: `lock:contention_*` and the fd syscalls' entry/exit.
    #[default]
    Tracepoint,
}

impl Mode {
    pub const fn name(self) -> &'static str {
        match self {
            Mode::Fentry => "fentry",
            Mode::Kprobe => "kprobe",
            Mode::Tracepoint => "tracepoint",
        }
    }
}

/// Program names (the eBPF functions' identifiers).
pub mod program {
    pub const LOCK_BEGIN: &str = "fdprof_lock_begin";
    pub const LOCK_END: &str = "fdprof_lock_end";
    pub const TP_LOCK_BEGIN: &str = "fdprof_tp_lock_begin";
    pub const TP_LOCK_END: &str = "fdprof_tp_lock_end";
    pub const SYS_ENTER: &str = "fdprof_sys_enter";
    pub const SYS_EXIT: &str = "fdprof_sys_exit";
    pub const TP_SYS_ENTER: &str = "fdprof_tp_sys_enter";
    pub const TP_SYS_EXIT: &str = "fdprof_tp_sys_exit";
    pub const FE_ALLOC: &str = "fdprof_fe_alloc";
    pub const FX_ALLOC: &str = "fdprof_fx_alloc";
    pub const FX_ALLOC_LEGACY: &str = "fdprof_fx_alloc4";
    pub const FE_CLOSE: &str = "fdprof_fe_close";
    pub const FX_CLOSE: &str = "fdprof_fx_close";
    pub const FE_EXPAND: &str = "fdprof_fe_expand";
    pub const FX_EXPAND: &str = "fdprof_fx_expand";
    pub const FE_DUP2: &str = "fdprof_fe_dup2";
    pub const FX_DUP2: &str = "fdprof_fx_dup2";
    pub const FE_CRANGE: &str = "fdprof_fe_crange";
    pub const FX_CRANGE: &str = "fdprof_fx_crange";
    pub const FE_SPIN: &str = "fdprof_fe_spin";
    pub const FX_SPIN: &str = "fdprof_fx_spin";
    pub const FE_SPIN2: &str = "fdprof_fe_spin2";
    pub const FX_SPIN2: &str = "fdprof_fx_spin2";
    pub const KP_ALLOC: &str = "fdprof_kp_alloc";
    pub const KR_ALLOC: &str = "fdprof_kr_alloc";
    pub const KP_CLOSE: &str = "fdprof_kp_close";
    pub const KR_CLOSE: &str = "fdprof_kr_close";
    pub const KP_EXPAND: &str = "fdprof_kp_expand";
    pub const KR_EXPAND: &str = "fdprof_kr_expand";
    pub const KP_DUP2: &str = "fdprof_kp_dup2";
    pub const KR_DUP2: &str = "fdprof_kr_dup2";
    pub const KP_CRANGE: &str = "fdprof_kp_crange";
    pub const KR_CRANGE: &str = "fdprof_kr_crange";
    pub const KP_SPIN: &str = "fdprof_kp_spin";
    pub const KR_SPIN: &str = "fdprof_kr_spin";
    pub const TASK_EXIT: &str = "fdprof_task_exit";
    pub const TP_TASK_EXIT: &str = "fdprof_tp_task_exit";
    pub const TASK_EXEC: &str = "fdprof_task_exec";
    pub const TP_TASK_EXEC: &str = "fdprof_tp_task_exec";
    pub const TASK_FORK: &str = "fdprof_task_fork";
    /// `task:task_rename`: a `--comm` target set's names, matched at a rename.
    pub const TASK_RENAME: &str = "fdprof_task_rename";
    pub const TP_TASK_RENAME: &str = "fdprof_tp_task_rename";
    /// `cgroup:cgroup_attach_task` (tp_btf only): a process moved into or out of a followed
    /// cgroup (`--cgroup`).
    pub const CGROUP_ATTACH: &str = "fdprof_cgroup_attach";
    /// kprobe/kretprobe on every syscall function of [`super::SYSCALL_FUNCTIONS`].
    pub const KP_SYS: &str = "fdprof_kp_sys";
    pub const KR_SYS: &str = "fdprof_kr_sys";
    /// kprobe at offsets inside the allocator and close functions ([`super::Role::LockedSections`]).
    pub const KP_LOCKED: &str = "fdprof_kp_locked";
    pub const ALL: [&str; 46] = [
        LOCK_BEGIN,
        LOCK_END,
        TP_LOCK_BEGIN,
        TP_LOCK_END,
        SYS_ENTER,
        SYS_EXIT,
        TP_SYS_ENTER,
        TP_SYS_EXIT,
        FE_ALLOC,
        FX_ALLOC,
        FX_ALLOC_LEGACY,
        FE_CLOSE,
        FX_CLOSE,
        FE_EXPAND,
        FX_EXPAND,
        FE_DUP2,
        FX_DUP2,
        FE_CRANGE,
        FX_CRANGE,
        FE_SPIN,
        FX_SPIN,
        FE_SPIN2,
        FX_SPIN2,
        KP_ALLOC,
        KR_ALLOC,
        KP_CLOSE,
        KR_CLOSE,
        KP_EXPAND,
        KR_EXPAND,
        KP_DUP2,
        KR_DUP2,
        KP_CRANGE,
        KR_CRANGE,
        KP_SPIN,
        KR_SPIN,
        TASK_EXIT,
        TP_TASK_EXIT,
        TASK_EXEC,
        TP_TASK_EXEC,
        TASK_FORK,
        TASK_RENAME,
        TP_TASK_RENAME,
        CGROUP_ATTACH,
        KP_SYS,
        KR_SYS,
        KP_LOCKED,
    ];

    /// fentry/fexit pairs on the syscall functions, `fdprof_fes_<i>`/`fdprof_fxs_<i>` on
    /// [`super::SYSCALL_FUNCTIONS`]`[i]` (a fentry program is bound to one function at load).
    pub const SYSCALL_FENTRY: [(&str, &str); crate::syscalls::FD_SYSCALLS.len()] =
        super::syscall_table!(pairs);
}

/// Whether `name`, a program's name as kallsyms shows it in `bpf_prog_<tag>_<name>`, is one of
/// fdprof's programs: the whole name where the program carries BTF, else the first 15 bytes
/// the kernel keeps (`BPF_OBJ_NAME_LEN - 1`).
pub fn is_own_program(name: &str) -> bool {
    const KEPT: usize = 15;
    let kept = |full: &str| full == name || &full[..full.len().min(KEPT)] == name;
    program::ALL.iter().any(|p| kept(p))
        || program::SYSCALL_FENTRY
            .iter()
            .any(|(entry, exit)| kept(entry) || kept(exit))
}

/// Lists, for each index `i` of `FD_SYSCALLS` with its syscall's name, either the fentry/fexit
/// program names or the syscall function (`pairs` or `functions`).
macro_rules! syscall_table {
    ($what:ident) => {
        $crate::probes::syscall_table!(@ $what
            0 "open", 1 "openat", 2 "openat2", 3 "creat", 4 "open_by_handle_at", 5 "socket",
            6 "socketpair", 7 "accept", 8 "accept4", 9 "dup", 10 "dup2", 11 "dup3", 12 "fcntl",
            13 "pipe", 14 "pipe2", 15 "eventfd", 16 "eventfd2", 17 "epoll_create",
            18 "epoll_create1", 19 "memfd_create", 20 "timerfd_create", 21 "signalfd",
            22 "signalfd4", 23 "inotify_init", 24 "inotify_init1", 25 "pidfd_open",
            26 "pidfd_getfd", 27 "io_uring_setup", 28 "perf_event_open", 29 "bpf",
            30 "userfaultfd", 31 "fanotify_init", 32 "close", 33 "close_range",
            34 "memfd_secret", 35 "open_tree")
    };
    (@ pairs $($i:literal $name:literal),*) => {
        [$((concat!("fdprof_fes_", $i), concat!("fdprof_fxs_", $i))),*]
    };
    (@ functions $($i:literal $name:literal),*) => {
        [$(concat!("__x64_sys_", $name)),*]
    };
}
pub(crate) use syscall_table;

/// The x86_64 functions of the fd syscalls, in `FD_SYSCALLS` order: the direct modes probe
/// these for [`Role::FdSyscalls`], so that only fd syscalls pay (the raw syscall tracepoints
/// put every syscall of every task on the slow path).
pub const SYSCALL_FUNCTIONS: [&str; crate::syscalls::FD_SYSCALLS.len()] = syscall_table!(functions);

// The table above repeats FD_SYSCALLS' names: the build fails where they part.
const _: () = {
    let mut i = 0;
    while i < SYSCALL_FUNCTIONS.len() {
        let function = SYSCALL_FUNCTIONS[i].as_bytes();
        let name = crate::syscalls::FD_SYSCALLS[i].name.as_bytes();
        let prefix = b"__x64_sys_".len();
        assert!(function.len() == prefix + name.len());
        let mut j = 0;
        while j < name.len() {
            assert!(function[prefix + j] == name[j]);
            j += 1;
        }
        i += 1;
    }
};

#[cfg(feature = "serde")]
pub use attachment::Attachment;

#[cfg(feature = "serde")]
mod attachment {
    use alloc::{string::String, vec::Vec};
    use core::fmt;

    use serde::{Deserialize, Deserializer, Serialize};

    use super::Mode;

    /// How one role is attached.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(tag = "how", rename_all = "snake_case")]
    pub enum Attachment {
        /// fentry/fexit or kprobe/kretprobe on these kernel functions.
        Direct {
            mode: Mode,
            #[serde(deserialize_with = "function_names")]
            functions: Vec<String>,
        },
        /// A function role left to the tracepoints: its figures come from the syscall and lock
        /// tracepoints.
        Tracepoint,
        /// A tracepoint family attached as BTF-typed raw tracepoints.
        TpBtf,
        /// A tracepoint family attached as classic tracepoints.
        ClassicTracepoint,
        /// Left out by `--lock-only`.
        Off,
    }

    impl Attachment {
        /// The probe mode this attachment gives its role.
        pub fn mode(&self) -> Mode {
            match self {
                Attachment::Direct { mode, .. } => *mode,
                _ => Mode::Tracepoint,
            }
        }

        pub fn is_direct(&self) -> bool {
            matches!(self, Attachment::Direct { .. })
        }
    }

    /// As reports print it: `fentry (alloc_fd)`, `fentry (36 syscall functions)`, `tp_btf`,
    /// `tracepoint`, `off (--lock-only)`.
    impl fmt::Display for Attachment {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            match self {
                Attachment::Direct { mode, functions } if functions.len() > 4 => {
                    let syscalls = functions.iter().all(|n| n.starts_with("__x64_sys_"));
                    let what = if syscalls {
                        "syscall functions"
                    } else {
                        "functions"
                    };
                    write!(f, "{} ({} {what})", mode.name(), functions.len())
                }
                Attachment::Direct { mode, functions } => {
                    write!(f, "{} (", mode.name())?;
                    for (i, name) in functions.iter().enumerate() {
                        if i > 0 {
                            f.write_str(", ")?;
                        }
                        f.write_str(name)?;
                    }
                    f.write_str(")")
                }
                Attachment::Tracepoint | Attachment::ClassicTracepoint => f.write_str("tracepoint"),
                Attachment::TpBtf => f.write_str("tp_btf"),
                Attachment::Off => f.write_str("off"),
            }
        }
    }

    /// A role has at most one function per fd syscall (the slow path has two), each a kernel
    /// symbol name (at most `KSYM_NAME_LEN`, 512 bytes): a file claiming more is not one fdprof
    /// wrote.
    fn function_names<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
        const FUNCTIONS: usize = 2 * crate::syscalls::FD_SYSCALLS.len();
        const NAME: usize = 512;
        struct Names;
        impl<'de> serde::de::Visitor<'de> for Names {
            type Value = Vec<String>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "at most {FUNCTIONS} function names")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<Self::Value, A::Error> {
                let mut names = Vec::new();
                while let Some(name) = seq.next_element::<String>()? {
                    if names.len() == FUNCTIONS || name.len() > NAME {
                        return Err(serde::de::Error::custom(alloc::format!(
                            "more than {FUNCTIONS} functions of a role, or a name over {NAME} bytes"
                        )));
                    }
                    names.push(name);
                }
                Ok(names)
            }
        }
        d.deserialize_seq(Names)
    }
}

impl core::fmt::Display for Role {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

impl core::fmt::Display for Mode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}
