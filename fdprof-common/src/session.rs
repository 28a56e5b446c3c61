//! A recording session: what it profiles and how it ends.

/// Why recording stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum EndReason {
    /// The `-d` duration ran out.
    #[default]
    Duration,
    /// SIGINT, SIGTERM or SIGHUP.
    Interrupted,
    /// The profiled process or thread exited.
    TargetExited,
    /// The command fdprof launched exited.
    CommandExited,
}

impl EndReason {
    /// As the recording names it: `duration`, `interrupted`, `target_exited`, `command_exited`.
    pub const fn name(self) -> &'static str {
        match self {
            EndReason::Duration => "duration",
            EndReason::Interrupted => "interrupted",
            EndReason::TargetExited => "target_exited",
            EndReason::CommandExited => "command_exited",
        }
    }

    /// As people read it.
    pub const fn describe(self) -> &'static str {
        match self {
            EndReason::Duration => "duration reached",
            EndReason::Interrupted => "interrupted",
            EndReason::TargetExited => "target exited",
            EndReason::CommandExited => "command exited",
        }
    }
}

/// What a recording profiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum TargetKind {
    /// One process, all its threads (`-p`).
    Pid,
    /// One thread (`-t`).
    Tid,
    /// Every process (`-a`).
    #[default]
    All,
    /// A command fdprof launched (`-- CMD`).
    Command,
    /// The processes of one name that `fdprof daemon` follows (`--comm`, or the names of its
    /// `-p` list), those that exited included.
    Name,
    /// Several processes (`-p` given more than once, or `-p` with `--children`), each with its
    /// own figures as under `-a`.
    Pids,
    /// The processes of cgroups (`--cgroup`): those in them and below them, those started
    /// there and those moved in; each with its own figures as under `-a`.
    Cgroup,
}

impl TargetKind {
    /// Whether figures are kept per process (`-a`, a target set).
    pub fn per_process(self) -> bool {
        matches!(
            self,
            TargetKind::All | TargetKind::Pids | TargetKind::Cgroup
        )
    }
}

/// How a launched command ended: `{"code": N}` or `{"signal": N}` in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// This signal killed it.
    Signal(i32),
}

/// `exited with code 3`, `killed by signal 15 (SIGTERM)`.
impl core::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            ExitStatus::Code(code) => write!(f, "exited with code {code}"),
            ExitStatus::Signal(sig) => match signal_name(sig) {
                Some(name) => write!(f, "killed by signal {sig} ({name})"),
                None => write!(f, "killed by signal {sig}"),
            },
        }
    }
}

/// The name of a standard Linux signal (x86 and arm numbering).
fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: [&str; 31] = [
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    NAMES
        .get(usize::try_from(sig).ok()?.checked_sub(1)?)
        .copied()
}
