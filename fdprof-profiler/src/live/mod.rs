//! The live stage every profile runs on (`record`, `top`, the daemon): one start-up path
//! (`start`: attach, the symbolizers, the facts), one attached [`crate::collect::Profiler`], its
//! symbolizers with their bounds and the refresh of memory maps, and the assembly of each
//! interval and of the whole. Each front end keeps only what is its own: record the file, top
//! the screen, the daemon its history and HTTP.

pub(crate) mod assembler;
pub(crate) mod clock;
pub(crate) mod facts;
pub mod stage;
pub mod start;
pub(crate) mod symbols;
pub(crate) mod whole;

pub use assembler::Assembler;
pub use clock::{Clock, unix_ms};
pub(crate) use facts::Facts;
pub use stage::{LiveInterval, Stage, StageOptions, Tick};
pub use start::{Request, SymbolsFrom, read_kernel, start};
pub use symbols::{Maps, Symbols};
