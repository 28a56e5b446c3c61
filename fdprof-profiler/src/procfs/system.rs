//! The kernel's files under `/proc` that are no process's: its settings, its CPU times and
//! its memory image.

use std::fs::File;

use super::{FILE_BYTES, read_bounded};

/// `/proc/sys/kernel/NAME` without its newline (`pid_max`, `kptr_restrict`, `osrelease`...);
/// `None` where it cannot be read.
pub fn kernel_setting(name: &str) -> Option<String> {
    let text = read_bounded(&format!("/proc/sys/kernel/{name}"), FILE_BYTES)?;
    Some(text.trim().to_string())
}

/// `/proc/stat` (a line per CPU and a few more), its first [`STAT_BYTES`].
pub fn stat() -> Option<String> {
    read_bounded("/proc/stat", STAT_BYTES)
}

/// Bytes of `/proc/stat` read: about 100 a CPU, and the interrupts line, which grows with the
/// interrupts the machine has.
const STAT_BYTES: u64 = 4 << 20;

/// `/proc/kcore` opened: the kernel's memory as an ELF core file, read at the offsets its
/// program headers give.
pub fn kcore() -> std::io::Result<File> {
    File::open("/proc/kcore")
}

/// The running kernel's release, read once: every interval's recording names it.
pub fn kernel_release() -> String {
    static RELEASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RELEASE
        .get_or_init(|| kernel_setting("osrelease").unwrap_or_else(|| "unknown".into()))
        .clone()
}
