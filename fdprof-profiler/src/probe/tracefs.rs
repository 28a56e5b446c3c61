//! Classic tracepoints are attached by id, read from tracefs. Many minimal systems (this
//! workplace's VMs, busybox guests) boot without it mounted; mount it like `perf` users do.

use std::path::Path;

const TRACEFS: &str = "/sys/kernel/tracing";

/// Whether the kernel has the tracepoint `group/name` (tracefs mounted).
pub(crate) fn has_event(event: &str) -> bool {
    Path::new(TRACEFS).join("events").join(event).is_dir()
}

/// Whether tracefs is mounted. The mount table, not the directory: tracefs is mode 0700, so
/// a user with CAP_BPF and CAP_PERFMON but not root cannot look inside it, mounted or not.
pub(crate) fn is_mounted() -> bool {
    mounted(&crate::procfs::own::mounts().unwrap_or_default())
        || Path::new(TRACEFS).join("events").is_dir()
        || Path::new("/sys/kernel/debug/tracing/events").is_dir()
}

/// Makes sure tracefs is mounted; returns a note when fdprof had to mount it.
pub(crate) fn ensure_mounted() -> Option<String> {
    if is_mounted() {
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

/// Whether `/proc/self/mounts` text lists a tracefs.
fn mounted(mounts: &str) -> bool {
    mounts
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("tracefs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracefs_in_the_mount_table_is_mounted() {
        let mounts = "sysfs /sys sysfs rw 0 0\n\
                      tracefs /sys/kernel/tracing tracefs rw,nosuid,nodev,noexec,relatime 0 0\n";
        assert!(mounted(mounts));
        assert!(!mounted(
            "sysfs /sys sysfs rw 0 0\nproc /proc proc rw 0 0\n"
        ));
        // A path that merely says tracefs is not a tracefs.
        assert!(!mounted("/dev/vda /mnt/tracefs ext4 rw 0 0\n"));
    }
}
