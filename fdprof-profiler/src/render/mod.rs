//! Sinks on the analysis: the text report, folded stacks, flamegraph SVGs, the profile
//! exports (`pprof`, `speedscope`) and the daemon's [`metrics`]. They only lay out and
//! format the figures [`crate::analysis`] computed; the JSON report is the analysis
//! [`Report`](crate::analysis::Report) serialized as it is.

pub mod doctor;
pub mod flamegraph;
pub(crate) mod folded;
pub mod human;
pub(crate) mod layout;
pub mod live;
pub mod metrics;
pub mod otlp;
pub(crate) mod pprof;
pub mod replay;
pub(crate) mod speedscope;
pub mod text;
pub mod trace;

pub use flamegraph::svg;
pub use folded::folded;
pub use otlp::otlp;
pub use pprof::pprof;
pub use speedscope::speedscope;
pub use text::cpu_text;
pub use text::text;

#[cfg(test)]
mod tests;
