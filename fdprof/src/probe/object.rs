//! The eBPF objects built by `build.rs` from `fdprof-ebpf`, embedded in the binary.

use aya::include_bytes_aligned;

/// The profiling programs.
pub static PROFILER: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fdprof.bpf.o"));

/// Empty programs that `doctor` attaches to find out what the kernel allows.
pub static DOCTOR: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/fdprof-doctor.bpf.o"));
