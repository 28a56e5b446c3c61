//! What to profile: a process (`-p`), a thread (`-t`), every process (`-a`) or a launched
//! command, resolved to the programs' filter; processes and threads read from `/proc`: is it a
//! user task, is it still running.
//!
//! A process whose main thread called `pthread_exit` shows that thread as a zombie (`Z`) in
//! `/proc/PID/stat` while its other threads run on; only `/proc/PID/task` tells it from a process
//! that has exited and awaits its parent's `wait`.

use std::fmt;

use anyhow::{Context, Result};

use fdprof_common::session::TargetKind;

use super::profiler::Filter;
use crate::procfs::{self, stat_fields};

/// What the user asked to profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    Pid(u32),
    /// Several processes (`-p` more than once), or one with the processes it starts
    /// (`--children`): a target set.
    Pids {
        pids: Vec<u32>,
        children: bool,
    },
    /// The processes of cgroups (`--cgroup`): a target set.
    Cgroups(Vec<std::path::PathBuf>),
    Tid(u32),
    All,
    /// A command, launched by [`super::launch`]; its pid is known once it is forked.
    Command(Vec<String>),
}

/// A target checked against `/proc`: what the programs filter on, and how to name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub kind: TargetKind,
    pub filter: Filter,
    /// The process (for `-t`, the thread's process).
    pub pid: Option<u32>,
    pub tid: Option<u32>,
    pub comm: Option<String>,
    /// A target set's processes, as given; empty for the other kinds.
    pub pids: Vec<u32>,
    /// The cgroups given (`--cgroup`), checked; empty for the other kinds.
    pub cgroups: Vec<super::cgroups::Cgroup>,
    /// The processes the target starts are followed too: a target set's with `--children`
    /// (each its own figures), a launched command's always (counted as the command's own).
    pub children: bool,
}

/// Checks `spec` (a live user process or thread, not a thread given as a process) and gives
/// what to filter on. A command's filter is set once it is forked ([`Resolved::launched`]).
pub fn resolve(spec: &TargetSpec) -> Result<Resolved> {
    let none = Resolved {
        kind: TargetKind::All,
        filter: Filter::All,
        pid: None,
        tid: None,
        comm: None,
        pids: Vec::new(),
        cgroups: Vec::new(),
        children: false,
    };
    Ok(match *spec {
        TargetSpec::Cgroups(ref paths) => {
            let mut cgroups: Vec<super::cgroups::Cgroup> = Vec::new();
            for path in paths {
                let cgroup = super::cgroups::Cgroup::resolve(path)?;
                if !cgroups.contains(&cgroup) {
                    cgroups.push(cgroup);
                }
            }
            Resolved {
                kind: TargetKind::Cgroup,
                filter: Filter::Set {
                    max: fdprof_common::targets::MAX_TARGETS,
                },
                cgroups,
                children: true,
                ..none
            }
        }
        TargetSpec::Pid(pid) => {
            check_process(pid)?;
            Resolved {
                kind: TargetKind::Pid,
                filter: Filter::Tgid(pid),
                pid: Some(pid),
                comm: comm_of(pid),
                ..none
            }
        }
        TargetSpec::Pids { ref pids, children } => {
            for &pid in pids {
                check_process(pid)?;
            }
            let mut pids = pids.clone();
            pids.sort_unstable();
            pids.dedup();
            Resolved {
                kind: TargetKind::Pids,
                filter: Filter::Set {
                    max: fdprof_common::targets::MAX_TARGETS.max(pids.len() as u32),
                },
                pids,
                children,
                ..none
            }
        }
        TargetSpec::Tid(tid) => Resolved {
            kind: TargetKind::Tid,
            pid: Some(check_task(tid, TaskKind::Thread)?),
            filter: Filter::Tid(tid),
            tid: Some(tid),
            comm: comm_of(tid),
            ..none
        },
        TargetSpec::All => none,
        // What a command starts (a shell's children, a pipeline) is the command's work.
        TargetSpec::Command(_) => Resolved {
            kind: TargetKind::Command,
            children: true,
            ..none
        },
    })
}

/// Checks that `pid` is a live user process, not a thread of one.
fn check_process(pid: u32) -> Result<()> {
    let tgid = check_task(pid, TaskKind::Process)?;
    if tgid != pid {
        return Err(TargetError::ThreadOf { tid: pid, tgid }.into());
    }
    Ok(())
}

impl TargetSpec {
    /// The target a command line names: `-p` (one, or a set: several, or with `children`),
    /// else `-t`, else `-a`, else the command.
    pub fn of(
        pids: &[u32],
        children: bool,
        cgroups: &[std::path::PathBuf],
        tid: Option<u32>,
        all: bool,
        command: &[String],
    ) -> Self {
        if !cgroups.is_empty() {
            return TargetSpec::Cgroups(cgroups.to_vec());
        }
        match (pids, tid, all) {
            ([pid], _, _) if !children => TargetSpec::Pid(*pid),
            ([_, ..], _, _) => TargetSpec::Pids {
                pids: pids.to_vec(),
                children,
            },
            ([], Some(tid), _) => TargetSpec::Tid(tid),
            ([], None, true) => TargetSpec::All,
            _ => TargetSpec::Command(command.to_vec()),
        }
    }
}

impl Resolved {
    /// The command is forked as `pid`: profile that process.
    pub fn launched(&mut self, pid: u32) {
        self.pid = Some(pid);
        self.filter = Filter::Tgid(pid);
    }

    /// Whether the process or thread given has exited (never, for `-a` and commands, whose end
    /// is their exit status, nor for the daemon's names, which outlive their processes).
    pub fn exited(&self) -> bool {
        match self.kind {
            TargetKind::Pid => self.pid.is_some_and(|p| !process_alive(p)),
            // When every process given has exited (the processes they started may live on).
            TargetKind::Pids => self.pids.iter().all(|&p| !process_alive(p)),
            TargetKind::Tid => self.tid.is_some_and(|t| !thread_alive(t)),
            // A cgroup's processes come and go: it ends with a signal or a duration.
            TargetKind::All | TargetKind::Command | TargetKind::Name | TargetKind::Cgroup => false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskKind {
    Process,
    Thread,
}

impl fmt::Display for TaskKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TaskKind::Process => "process",
            TaskKind::Thread => "thread",
        })
    }
}

/// Why a task cannot be profiled: the user named one that is not (or no longer) a user task.
/// Exit code 2, like every usage error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetError {
    /// No task has that id.
    Gone { kind: TaskKind, id: u32 },
    /// It has exited and awaits its parent (a zombie).
    Exited { kind: TaskKind, id: u32 },
    /// A kernel thread: no fd table of its own.
    KernelThread { kind: TaskKind, id: u32 },
    /// `-p` named a thread of another process.
    ThreadOf { tid: u32, tgid: u32 },
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetError::Gone { kind, id } => write!(f, "no {kind} with id {id}"),
            TargetError::Exited { kind, id } => write!(
                f,
                "{kind} {id} has exited (zombie): there is nothing left to profile"
            ),
            TargetError::KernelThread { kind, id } => write!(
                f,
                "{kind} {id} is a kernel thread: it has no fd table of its own to profile"
            ),
            TargetError::ThreadOf { tid, tgid } => write!(
                f,
                "{tid} is a thread of process {tgid}: use -p {tgid}, or -t {tid} for this \
                 thread alone"
            ),
        }
    }
}

impl std::error::Error for TargetError {}

/// Whether `fields` (from [`stat_fields`]) show a task that has not exited: not a zombie
/// (`Z`) nor dead (`X`).
/// Not a zombie, not dead, and not on its way out: `PF_EXITING` (flags, field 9) is set as
/// `exit()` begins, before the exit tracepoint, so a task the programs saw end never looks alive.
fn running(fields: &[String]) -> bool {
    const PF_EXITING: u64 = 0x4;
    let exiting = fields
        .get(6)
        .and_then(|f| f.parse::<u64>().ok())
        .is_some_and(|flags| flags & PF_EXITING != 0);
    fields.first().is_some_and(|s| s != "Z" && s != "X") && !exiting
}

/// Whether thread `tid` has not exited.
pub(crate) fn thread_alive(tid: u32) -> bool {
    stat_fields(&tid.to_string()).is_some_and(|f| running(&f))
}

/// Whether any thread of process `pid` has not exited, the main thread or another (stops at
/// the first: the record loop asks every 20 ms).
pub fn process_alive(pid: u32) -> bool {
    let Some(mut tasks) = procfs::tasks(pid) else {
        return false;
    };
    tasks.any(|t| stat_fields(&format!("{pid}/task/{t}")).is_some_and(|f| running(&f)))
}

/// The threads of process `pid` that have not exited; `None` once it is gone.
pub fn live_threads(pid: u32) -> Option<u32> {
    let live = procfs::tasks(pid)?
        .filter(|t| stat_fields(&format!("{pid}/task/{t}")).is_some_and(|f| running(&f)))
        .count();
    (live > 0).then_some(live as u32)
}

fn tgid_of(tid: u32) -> Option<u32> {
    procfs::status(tid)?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
}

pub fn comm_of(pid: u32) -> Option<String> {
    procfs::comm(pid).map(|s| s.trim().to_string())
}

/// Checks that `id` is a user task that has not exited; returns its thread-group id.
pub(crate) fn check_task(id: u32, kind: TaskKind) -> Result<u32> {
    let Some(fields) = stat_fields(&id.to_string()) else {
        return Err(TargetError::Gone { kind, id }.into());
    };
    const PF_KTHREAD: u64 = 0x0020_0000;
    let flags: u64 = fields.get(6).and_then(|f| f.parse().ok()).unwrap_or(0);
    if flags & PF_KTHREAD != 0 {
        return Err(TargetError::KernelThread { kind, id }.into());
    }
    let exited = match kind {
        TaskKind::Process => !running(&fields) && !process_alive(id),
        TaskKind::Thread => !running(&fields),
    };
    if exited {
        return Err(TargetError::Exited { kind, id }.into());
    }
    tgid_of(id).with_context(|| format!("cannot read /proc/{id}/status"))
}
