//! The builders of a recording (`fdprof_recording`, the format, is a crate of its own): from the
//! collector's snapshot and the symbolizers' frames to the recording's types, and what is done
//! with whole recordings (added together, narrowed to some processes, a live view's window).

pub mod assemble;
pub(crate) mod build;
mod convert;
pub(crate) mod cpu;
pub(crate) mod events;
pub(crate) mod lock_names;
pub mod merge;
pub(crate) mod operation;
pub(crate) mod own;
pub mod process;
pub(crate) mod rows;
pub(crate) mod sample;
pub(crate) mod sum;
pub mod trace;
pub mod window;
