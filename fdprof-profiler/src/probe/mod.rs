//! Kernel capability detection, symbol resolution, attach strategy and BTF offsets.

pub mod btf;
pub mod capabilities;
pub(crate) mod kallsyms;
pub(crate) mod object;
pub(crate) mod offsets;
pub mod pod_spec;
pub(crate) mod roles;
pub(crate) mod text;
pub(crate) mod tracefs;
pub(crate) mod trial;
