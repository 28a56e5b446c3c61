//! Stack symbolization: kernel addresses through `/proc/kallsyms`, user addresses through
//! snapshots of `/proc/PID/maps` and the mapped files' ELF symbols (blazesym).
//!
//! Frames carry the raw address only when the caller asks for it (`--raw-addrs`): kernel
//! addresses reveal the KASLR offset and must not leave the machine otherwise.

mod debug_file;
pub mod debuginfod;
mod elf_info;
mod frame;
pub(crate) mod kernel;
#[cfg(test)]
mod kernel_tests;
mod names;
pub(crate) mod system;
pub(crate) mod user;
#[cfg(test)]
mod user_tests;
mod vdso;

pub(crate) use frame::Frame;

pub use debug_file::NameSource;
pub use kernel::KernelSymbols;
pub use names::{DebugOptions, DebugSources};
pub use system::SystemMaps;
pub use user::UserSymbolizer;
