//! The floor under any profiler that hooks what `fdprof record` hooks: programs that return at
//! once, attached by hand (raw `bpf(2)`, no loader) to the same raw tracepoints. What they cost
//! is the kernel's dispatch (and, for `sys_enter`/`sys_exit`, the syscall slow path every task
//! is switched to), which no program body can undercut.

use anyhow::{Result, anyhow};

use super::bpf::{attach_raw_tracepoint, load_raw_tracepoint};

/// `r0 = 0; exit`
const RETURN_ZERO: [u8; 16] = [0xb7, 0, 0, 0, 0, 0, 0, 0, 0x95, 0, 0, 0, 0, 0, 0, 0];

/// The tracepoints `fdprof record` attaches to in tracepoint mode, and with `--lock-only`.
pub(crate) const RECORD_HOOKS: &[&str] = &[
    "sys_enter",
    "sys_exit",
    "contention_begin",
    "contention_end",
];
pub(crate) const LOCK_HOOKS: &[&str] = &["contention_begin", "contention_end"];

/// Empty programs attached while this lives; dropping it closes every fd, which detaches them.
pub(crate) struct EmptyPrograms {
    fds: Vec<i32>,
}

impl EmptyPrograms {
    pub(crate) fn attach(hooks: &[&str]) -> Result<Self> {
        let mut this = Self { fds: Vec::new() };
        for hook in hooks {
            let prog = load_raw_tracepoint(&RETURN_ZERO, b"fdprof_floor")
                .map_err(|e| anyhow!("cannot load an empty raw tracepoint program: {e}"))?;
            this.fds.push(prog);
            let name = std::ffi::CString::new(*hook)?;
            let link = attach_raw_tracepoint(&name, prog)
                .map_err(|e| anyhow!("cannot attach an empty program to {hook}: {e}"))?;
            this.fds.push(link);
        }
        Ok(this)
    }
}

impl Drop for EmptyPrograms {
    fn drop(&mut self) {
        for &fd in &self.fds {
            // SAFETY: fds the kernel gave us, closed once.
            unsafe { libc::close(fd) };
        }
    }
}
