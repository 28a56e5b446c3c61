//! The system calls the scenarios issue, as raw `syscall(2)`s.
//!
//! Raw calls rather than libc wrappers because the ground truth names kernel system calls: libc
//! wrappers are free to pick another one (musl's `open()` is `SYS_open`, its `pipe2(fds, 0)` is
//! `SYS_pipe`), and a profiler compares the names exactly.

use std::fmt;

/// A system call that a scenario's measured phase makes, named as the kernel names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Sys {
    Openat,
    Socket,
    Socketpair,
    Pipe2,
    Dup,
    /// `dup2(old, new)`; on architectures without a `dup2` system call, `dup3(old, new, 0)`.
    Dup2,
    Close,
    Accept4,
    Connect,
    Setsockopt,
    CloseRange,
}

impl Sys {
    pub(crate) const COUNT: usize = 11;

    /// The kernel's name of the system call (the `syscalls:sys_enter_*` tracepoint suffix).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Sys::Openat => "openat",
            Sys::Socket => "socket",
            Sys::Socketpair => "socketpair",
            Sys::Pipe2 => "pipe2",
            Sys::Dup => "dup",
            Sys::Dup2 => DUP2_NAME,
            Sys::Close => "close",
            Sys::Accept4 => "accept4",
            Sys::Connect => "connect",
            Sys::Setsockopt => "setsockopt",
            Sys::CloseRange => "close_range",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    pub(crate) fn from_index(i: usize) -> Sys {
        const ALL: [Sys; Sys::COUNT] = [
            Sys::Openat,
            Sys::Socket,
            Sys::Socketpair,
            Sys::Pipe2,
            Sys::Dup,
            Sys::Dup2,
            Sys::Close,
            Sys::Accept4,
            Sys::Connect,
            Sys::Setsockopt,
            Sys::CloseRange,
        ];
        ALL[i]
    }
}

#[cfg(target_arch = "x86_64")]
const DUP2_NAME: &str = "dup2";
#[cfg(not(target_arch = "x86_64"))]
const DUP2_NAME: &str = "dup3";

/// A failed system call: which one and its errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SysError {
    pub sys: Sys,
    pub errno: i32,
}

impl fmt::Display for SysError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}() failed: {}",
            self.sys.name(),
            describe_errno(self.errno)
        )
    }
}

impl std::error::Error for SysError {}

/// `EMFILE (Too many open files)`.
pub(crate) fn describe_errno(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match errno_name(errno) {
        Some(name) => format!("{name} ({text})"),
        None => format!("errno {errno} ({text})"),
    }
}

fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EBADF => "EBADF",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENFILE => "ENFILE",
        libc::EMFILE => "EMFILE",
        libc::ENOBUFS => "ENOBUFS",
        libc::EADDRINUSE => "EADDRINUSE",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ECONNRESET => "ECONNRESET",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::EAFNOSUPPORT => "EAFNOSUPPORT",
        _ => return None,
    })
}

pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[inline(always)]
fn ret(sys: Sys, r: libc::c_long) -> Result<i32, SysError> {
    if r < 0 {
        Err(SysError {
            sys,
            errno: errno(),
        })
    } else {
        Ok(r as i32)
    }
}

#[inline(always)]
pub(crate) fn socket(domain: i32, ty: i32, protocol: i32) -> Result<i32, SysError> {
    // SAFETY: socket(2) takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_socket,
            domain as libc::c_long,
            ty as libc::c_long,
            protocol as libc::c_long,
        )
    };
    ret(Sys::Socket, r)
}

/// Binds the IPv4 socket `fd` to 127.0.0.1 on a port the kernel picks; returns the address.
pub(crate) fn bind_loopback(fd: i32) -> std::io::Result<libc::sockaddr_in> {
    let mut addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
        },
        sin_zero: [0; 8],
    };
    let mut len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `addr` and `len` are live, correctly sized locals for the calls' duration.
    let failed = unsafe {
        libc::bind(fd, (&raw const addr).cast(), len) != 0
            || libc::getsockname(fd, (&raw mut addr).cast(), &mut len) != 0
    };
    if failed {
        return Err(std::io::Error::last_os_error());
    }
    Ok(addr)
}

/// `socket(AF_INET, SOCK_STREAM, 0)`, the seed's socket.
#[inline(always)]
pub(crate) fn tcp_socket() -> Result<i32, SysError> {
    socket(libc::AF_INET, libc::SOCK_STREAM, 0)
}

#[inline(always)]
pub(crate) fn close(fd: i32) -> Result<(), SysError> {
    // SAFETY: close(2) takes an integer only.
    let r = unsafe { libc::syscall(libc::SYS_close, fd as libc::c_long) };
    ret(Sys::Close, r).map(|_| ())
}

/// `close_range(first, last, 0)`: closes every open fd from `first` to `last`.
#[inline(always)]
pub(crate) fn close_range(first: i32, last: i32) -> Result<(), SysError> {
    // SAFETY: close_range(2) takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_long,
            last as libc::c_long,
            0 as libc::c_long,
        )
    };
    ret(Sys::CloseRange, r).map(|_| ())
}

/// `openat(AT_FDCWD, path, flags)`.
#[inline(always)]
pub(crate) fn openat(path: &std::ffi::CStr, flags: i32) -> Result<i32, SysError> {
    // SAFETY: `path` is a valid NUL-terminated string for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD as libc::c_long,
            path.as_ptr(),
            flags as libc::c_long,
            0 as libc::c_long,
        )
    };
    ret(Sys::Openat, r)
}

#[inline(always)]
pub(crate) fn dup(fd: i32) -> Result<i32, SysError> {
    // SAFETY: dup(2) takes an integer only.
    let r = unsafe { libc::syscall(libc::SYS_dup, fd as libc::c_long) };
    ret(Sys::Dup, r)
}

#[inline(always)]
pub(crate) fn dup2(old: i32, new: i32) -> Result<i32, SysError> {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: dup2(2) takes integers only.
    let r = unsafe { libc::syscall(libc::SYS_dup2, old as libc::c_long, new as libc::c_long) };
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: dup3(2) takes integers only.
    let r = unsafe {
        libc::syscall(
            libc::SYS_dup3,
            old as libc::c_long,
            new as libc::c_long,
            0 as libc::c_long,
        )
    };
    ret(Sys::Dup2, r)
}

#[inline(always)]
pub(crate) fn pipe2(flags: i32) -> Result<[i32; 2], SysError> {
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` has room for the two ints the kernel writes.
    let r = unsafe { libc::syscall(libc::SYS_pipe2, fds.as_mut_ptr(), flags as libc::c_long) };
    ret(Sys::Pipe2, r).map(|_| fds)
}

/// `socketpair(AF_UNIX, SOCK_STREAM, 0, fds)`.
#[inline(always)]
pub(crate) fn unix_socketpair() -> Result<[i32; 2], SysError> {
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` has room for the two ints the kernel writes.
    let r = unsafe {
        libc::syscall(
            libc::SYS_socketpair,
            libc::AF_UNIX as libc::c_long,
            libc::SOCK_STREAM as libc::c_long,
            0 as libc::c_long,
            fds.as_mut_ptr(),
        )
    };
    ret(Sys::Socketpair, r).map(|_| fds)
}

/// `accept4(fd, NULL, NULL, 0)`.
#[inline(always)]
pub(crate) fn accept4(fd: i32) -> Result<i32, SysError> {
    // SAFETY: NULL address and length pointers are allowed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_accept4,
            fd as libc::c_long,
            std::ptr::null_mut::<libc::sockaddr>(),
            std::ptr::null_mut::<libc::socklen_t>(),
            0 as libc::c_long,
        )
    };
    ret(Sys::Accept4, r)
}

#[inline(always)]
pub(crate) fn connect_in(fd: i32, addr: &libc::sockaddr_in) -> Result<(), SysError> {
    // SAFETY: `addr` points to a complete sockaddr_in for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_connect,
            fd as libc::c_long,
            addr as *const libc::sockaddr_in,
            size_of::<libc::sockaddr_in>() as libc::c_long,
        )
    };
    ret(Sys::Connect, r).map(|_| ())
}

/// `setsockopt(fd, SOL_SOCKET, SO_LINGER, {on, 0})`: close sends a reset and leaves no
/// TIME_WAIT behind, so a long accept run does not run out of ephemeral ports.
#[inline(always)]
pub(crate) fn linger_zero(fd: i32) -> Result<(), SysError> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: `linger` is a complete struct linger for the duration of the call.
    let r = unsafe {
        libc::syscall(
            libc::SYS_setsockopt,
            fd as libc::c_long,
            libc::SOL_SOCKET as libc::c_long,
            libc::SO_LINGER as libc::c_long,
            &linger as *const libc::linger,
            size_of::<libc::linger>() as libc::c_long,
        )
    };
    ret(Sys::Setsockopt, r).map(|_| ())
}

/// Whether `fd` is open in this process (`fcntl(F_GETFD)`, which allocates nothing).
pub(crate) fn is_open(fd: i32) -> bool {
    // SAFETY: F_GETFD takes no further argument.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}
