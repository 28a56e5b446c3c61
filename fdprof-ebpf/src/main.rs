//! fdprof's kernel-side programs. Every program name starts with `fdprof_` so that leaked
//! programs are easy to spot in `bpftool prog show` (names are cut at 15 characters).
//!
//! Everything is aggregated in the kernel, in per-CPU maps where the path is hot; user space
//! reads the maps when the recording ends. Only the few events that each deserve a record of
//! their own (slow waits, table expansions, thread exits) are streamed, through a ring buffer.
#![no_std]
#![no_main]
#![warn(unreachable_pub)]

mod config;
mod contention;
mod copies;
mod counters;
mod cpu;
mod exits;
mod fdops;
mod filter;
mod kernel;
mod processes;
mod scans;
mod settings;
mod slowpath;
mod streams;
mod syscall_table;
mod syscalls;
mod sysfns;
mod targets;
mod trace;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
