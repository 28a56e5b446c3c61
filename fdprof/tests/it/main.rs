//! fdprof's integration tests, one module per subject, in one binary: each test binary links
//! the whole crate graph (70-80 MB in a debug build), and forty of them took most of CI's disk
//! and much of its link time. The modules' tests share one process and run in its threads, so:
//! - a test that loads BPF programs holds [`common::kernel_lock`] throughout: one at a time, so
//!   leak checks and system-wide figures see only its own programs and processes;
//! - a test that loads the machine for seconds (fd-syscall loops, fuzzers) holds
//!   [`common::load_lock`], which keeps it from running beside one of those;
//! - files go under [`common::tmp`] (a directory per module), and a test that runs this binary
//!   again names the test by its path
//!   (`reader_fuzz::reader_and_renderers_survive_hostile_recordings`).

mod common;

mod captures;
mod cgroups;
mod churn;
mod churn_daemon;
mod containers;
mod counters;
mod cpu;
mod daemon;
mod daemon_access;
mod daemon_bounds;
mod dashboards;
mod debuginfo;
mod deploy;
mod diagnosis;
mod doctor;
mod export;
mod input;
mod layers;
mod locks;
mod otlp_push;
mod output;
mod page;
mod pod;
mod pod_user;
mod pprof_endpoints;
mod processes;
mod reader_fuzz;
mod readme;
mod record;
mod remedies;
mod replay;
mod seccomp;
mod series;
mod server;
mod target_set;
mod targets;
mod tiers;
mod timeline;
mod top;
mod top_screen;
mod trace;
mod trace_fuzz;
mod unwind;
mod web_config;
mod workload;
