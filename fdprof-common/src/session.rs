//! How a recording session ends.

/// Why recording stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "user",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum EndReason {
    /// The `-d` duration ran out.
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
