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
}
