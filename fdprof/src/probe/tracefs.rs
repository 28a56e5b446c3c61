//! Classic tracepoints are attached by id, read from tracefs. Many minimal systems (this
//! workplace's VMs, busybox guests) boot without it mounted; mount it like `perf` users do.

use std::path::Path;

const TRACEFS: &str = "/sys/kernel/tracing";

/// Makes sure tracefs is mounted; returns a note when fdprof had to mount it.
pub fn ensure_mounted() -> Option<String> {
    if Path::new(TRACEFS).join("events").is_dir()
        || Path::new("/sys/kernel/debug/tracing/events").is_dir()
    {
        return None;
    }
    let target = std::ffi::CString::new(TRACEFS).unwrap();
    let fstype = c"tracefs";
    // SAFETY: all pointers are valid NUL-terminated strings; data may be NULL.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    Some(if rc == 0 {
        format!("mounted tracefs on {TRACEFS}")
    } else {
        format!(
            "tracefs is not mounted and mounting it on {TRACEFS} failed: {}",
            std::io::Error::last_os_error()
        )
    })
}
