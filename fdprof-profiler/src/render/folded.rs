//! Folded stacks (the input format of inferno and FlameGraph): one `stack wait_ns` line per
//! stack of an [`analysis::Folded`](crate::analysis::Folded).

use crate::analysis::Folded;

/// The folded lines, each newline-terminated; empty when no wait passed the filter.
pub fn folded(graph: &Folded) -> String {
    graph
        .stacks
        .iter()
        .map(|s| format!("{} {}\n", s.stack, s.weight))
        .collect()
}
