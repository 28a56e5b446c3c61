//! Attaching the programs and draining what they aggregated.

pub mod direct;
pub mod session;
pub mod snapshot;
