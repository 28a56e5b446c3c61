//! Kernel capability detection, symbol resolution, attach strategy and BTF offsets.

pub mod btf;
pub mod capabilities;
pub mod kallsyms;
pub mod object;
pub mod offsets;
pub mod roles;
pub mod text;
pub mod tracefs;
pub mod trial;
