//! fdprof: a profiler for the Linux per-process fd table (`alloc_fd`, the close path and
//! `files->file_lock`).
//!
//! Data flows one way: **probe → collect → model → render**. The binary is a thin `main` over
//! [`cli`].

pub mod cli;
pub mod collect;
pub mod duration;
pub mod error;
pub mod model;
pub mod output;
pub mod privileges;
pub mod probe;
pub mod record;
pub mod render;
pub mod report_cmd;
pub mod symbolize;
pub mod workload;
