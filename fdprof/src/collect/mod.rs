//! Attaching the programs and draining what they aggregated.

pub mod session;
pub mod snapshot;
