//! Kernel capability detection, symbol resolution, attach strategy and BTF offsets.

pub mod btf;
pub mod capabilities;
pub mod kallsyms;
pub mod object;
pub(crate) mod offsets;
pub mod pod_spec;
pub(crate) mod roles;
pub(crate) mod text;
pub mod tracefs;
pub(crate) mod trial;
