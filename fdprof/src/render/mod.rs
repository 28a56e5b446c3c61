//! Sinks on the model: text and JSON reports, folded stacks and flamegraph SVGs. Every figure
//! shown is computed here from a [`Recording`](crate::model::Recording), in one place
//! ([`aggregate`]), so the text and JSON twins always agree.

pub mod aggregate;
pub mod doctor;
pub mod flamegraph;
pub mod folded;
pub mod human;
pub mod report;

pub use flamegraph::svg;
pub use folded::{FlamegraphOptions, LockFilter, OpFilter, folded};
pub use report::{ReportOptions, SortKey, json, text};

#[doc(hidden)]
pub mod testdata;
