//! The live stage every profile runs on (`record`, `top`, the daemon): one start-up path
//! (`start`: attach, the symbolizers, the facts), one attached [`crate::collect::Profiler`], its
//! symbolizers with their bounds and the refresh of memory maps, and the assembly of each
//! interval and of the whole. Each front end keeps only what is its own: record the file, top
//! the screen, the daemon its history and HTTP.

pub(crate) mod assembler;
pub(crate) mod clock;
pub(crate) mod facts;
pub(crate) mod stage;
pub(crate) mod start;
pub(crate) mod symbols;
pub(crate) mod whole;

pub(crate) use assembler::Assembler;
pub(crate) use clock::{Clock, unix_ms};
pub(crate) use facts::Facts;
pub(crate) use stage::{LiveInterval, Stage, StageOptions, Tick};
pub(crate) use start::{Request, SymbolsFrom, read_kernel, start};
pub(crate) use symbols::{Maps, Symbols};
