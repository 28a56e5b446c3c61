//! The floor under any profiler that hooks what `fdprof record` hooks: programs that return at
//! once, attached by hand (raw `bpf(2)`, no loader) to the same raw tracepoints. What they cost
//! is the kernel's dispatch (and, for `sys_enter`/`sys_exit`, the syscall slow path every task
//! is switched to), which no program body can undercut.

use anyhow::{Result, bail};

const BPF_PROG_LOAD: i64 = 5;
const BPF_RAW_TRACEPOINT_OPEN: i64 = 17;
const BPF_PROG_TYPE_RAW_TRACEPOINT: u32 = 17;
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

/// One `bpf(2)` call with a 128-byte attribute block.
pub(crate) fn bpf(cmd: i64, attr: &mut [u8; 128]) -> std::io::Result<i32> {
    // SAFETY: attr is a zero-padded bpf_attr of the size passed.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), attr.len()) };
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc as i32)
    }
}

impl EmptyPrograms {
    pub(crate) fn attach(hooks: &[&str]) -> Result<Self> {
        let mut this = Self { fds: Vec::new() };
        let license = c"GPL";
        for hook in hooks {
            let mut attr = [0u8; 128];
            attr[0..4].copy_from_slice(&BPF_PROG_TYPE_RAW_TRACEPOINT.to_ne_bytes());
            attr[4..8].copy_from_slice(&2u32.to_ne_bytes());
            attr[8..16].copy_from_slice(&(RETURN_ZERO.as_ptr() as u64).to_ne_bytes());
            attr[16..24].copy_from_slice(&(license.as_ptr() as u64).to_ne_bytes());
            attr[48..60].copy_from_slice(b"fdprof_floor");
            let prog = match bpf(BPF_PROG_LOAD, &mut attr) {
                Ok(fd) => fd,
                Err(e) => bail!("cannot load an empty raw tracepoint program: {e}"),
            };
            this.fds.push(prog);
            let name = std::ffi::CString::new(*hook)?;
            let mut attr = [0u8; 128];
            attr[0..8].copy_from_slice(&(name.as_ptr() as u64).to_ne_bytes());
            attr[8..12].copy_from_slice(&(prog as u32).to_ne_bytes());
            match bpf(BPF_RAW_TRACEPOINT_OPEN, &mut attr) {
                Ok(link) => this.fds.push(link),
                Err(e) => bail!("cannot attach an empty program to {hook}: {e}"),
            }
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
