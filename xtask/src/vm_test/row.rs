//! One line of vm-test's result table, and how a failed guest step reads in it: shared by the
//! judges of recordings (`check`) and of the live views (`live`).

use std::collections::BTreeMap;

use super::guest::StepResult;

/// One line of the result table.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub kernel: String,
    pub mode: String,
    pub scenario: String,
    pub pass: bool,
    pub figures: String,
    /// How each role was attached (`fentry (__alloc_fd)`), where the row's report says.
    pub probes: BTreeMap<String, String>,
}

impl Row {
    /// A row that has not passed (yet), with no figures.
    pub(super) fn failed(kernel: &str, mode: &str, scenario: &str) -> Row {
        Row {
            kernel: kernel.to_string(),
            mode: mode.to_string(),
            scenario: scenario.to_string(),
            pass: false,
            figures: String::new(),
            probes: BTreeMap::new(),
        }
    }
}

/// What a failed step said: its `error:` line, else its last line.
pub(super) fn failure(what: &str, step: &StepResult) -> String {
    let lines = step.stderr.lines().chain(step.stdout.lines());
    let said = lines
        .clone()
        .rev()
        .find(|l| l.contains("error"))
        .or_else(|| lines.rev().find(|l| !l.trim().is_empty()))
        .unwrap_or("(no output)");
    format!("{what} exit {}: {}", step.rc, said.trim())
}
