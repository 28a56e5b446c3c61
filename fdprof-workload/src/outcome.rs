//! What a measured phase did, as threads and processes mode both report it. Its own module so
//! the output (which renders it) need not import the runners (which use the output).

use crate::ground_truth::Expected;

/// What one task did.
#[derive(Clone, Debug)]
pub(crate) struct TaskResult {
    pub ops: u64,
    pub secs: f64,
    pub cpu: Option<usize>,
}

/// What a measured phase did.
#[derive(Clone, Debug)]
pub(crate) struct Outcome {
    /// The tasks whose count is the scenario's ops.
    pub tasks: Vec<TaskResult>,
    /// From the first task's start to the last task's end.
    pub secs: f64,
    pub fds_held: u64,
    /// Table size at the end (per process in processes mode: the largest).
    pub max_fds: u32,
    /// accept: connections the connector threads made.
    pub connects: Option<u64>,
    pub expected: Option<Expected>,
}
