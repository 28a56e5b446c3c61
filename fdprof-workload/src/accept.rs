//! The accept scenario: a listener on 127.0.0.1 (never any other address), acceptor threads
//! doing accept4 + close and connector threads doing socket + connect + close.
//!
//! Bounded: the listener has a receive timeout, so a blocked accept4 wakes up to see the stop
//! flag, and connectors hold back while too many connections wait in the backlog.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::ground_truth::{LoopError, Tracker};
use crate::phase::{Plan, TaskSlot};
use crate::sys::{self, Sys};

/// accept4 gives up after this long without a connection, so it can look at the stop flag.
const ACCEPT_TIMEOUT: Duration = Duration::from_millis(50);
/// An acceptor that sees no connection for this long fails the run instead of hanging.
const STALL_LIMIT_S: u32 = 10;
/// Connections waiting in the backlog before connectors hold back (the backlog is larger, so a
/// SYN is never dropped and no connect waits for a retransmit).
const MAX_IN_FLIGHT: u64 = 256;
const BACKLOG: i32 = 4096;

#[repr(align(128))]
#[derive(Default)]
pub(crate) struct Padded(pub AtomicU64);

/// Counters connectors read to hold back; each slot has one writer.
pub(crate) struct AcceptShared {
    pub accepted: Vec<Padded>,
    pub connected: Vec<Padded>,
}

impl AcceptShared {
    pub(crate) fn new(acceptors: usize, connectors: usize) -> Self {
        AcceptShared {
            accepted: (0..acceptors).map(|_| Padded::default()).collect(),
            connected: (0..connectors).map(|_| Padded::default()).collect(),
        }
    }

    fn in_flight(&self) -> u64 {
        let sum = |v: &[Padded]| v.iter().map(|p| p.0.load(Relaxed)).sum::<u64>();
        sum(&self.connected).saturating_sub(sum(&self.accepted))
    }
}

/// Creates the listener on 127.0.0.1, port chosen by the kernel; returns it and its address.
pub(crate) fn listen_loopback() -> Result<(i32, libc::sockaddr_in)> {
    let fd = sys::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0)?;
    let addr = sys::bind_loopback(fd).context("binding the listener to 127.0.0.1")?;
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: ACCEPT_TIMEOUT.as_micros() as libc::suseconds_t,
    };
    // SAFETY: `timeout` is a live, correctly sized local for the call's duration.
    let failed = unsafe {
        libc::listen(fd, BACKLOG) != 0
            || libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const timeout).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            ) != 0
    };
    if failed {
        bail!(
            "setting up the 127.0.0.1 listener: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok((fd, addr))
}

pub(crate) struct Acceptor {
    pub listener: i32,
    pub index: usize,
    pub shared: Arc<AcceptShared>,
}

impl Acceptor {
    /// Accepts and closes connections; an op is one accepted connection.
    pub(crate) fn drive<T: Tracker>(
        &mut self,
        t: &mut T,
        plan: Plan,
        slot: &TaskSlot,
        stop: &AtomicBool,
    ) -> Result<u64, LoopError> {
        let mut done = 0u64;
        let mut idle = 0u32;
        let idle_limit = STALL_LIMIT_S * 1000 / ACCEPT_TIMEOUT.as_millis() as u32;
        loop {
            if stop.load(Relaxed) || matches!(plan, Plan::Ops(k) if done >= k) {
                return Ok(done);
            }
            match sys::accept4(self.listener) {
                Ok(fd) => {
                    t.call(Sys::Accept4);
                    t.allocated(Sys::Accept4, 0, fd)?;
                    sys::close(fd)?;
                    t.call(Sys::Close);
                    t.closed(Sys::Close, fd)?;
                    done += 1;
                    idle = 0;
                    slot.ops.store(done, Relaxed);
                    self.shared.accepted[self.index].0.store(done, Relaxed);
                }
                Err(e) if e.errno == libc::EAGAIN || e.errno == libc::EINTR => {
                    idle += 1;
                    if idle >= idle_limit {
                        return Err(LoopError::Stalled(STALL_LIMIT_S));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

pub(crate) struct Connector {
    pub addr: libc::sockaddr_in,
    pub index: usize,
    pub shared: Arc<AcceptShared>,
}

impl Connector {
    /// Connects and closes; returns the number of connections made.
    pub(crate) fn drive<T: Tracker>(
        &mut self,
        t: &mut T,
        plan: Plan,
        slot: &TaskSlot,
        stop: &AtomicBool,
    ) -> Result<u64, LoopError> {
        let mut done = 0u64;
        loop {
            if stop.load(Relaxed) || matches!(plan, Plan::Ops(k) if done >= k) {
                return Ok(done);
            }
            if self.shared.in_flight() >= MAX_IN_FLIGHT {
                std::thread::yield_now();
                continue;
            }
            let fd = sys::tcp_socket()?;
            t.call(Sys::Socket);
            t.allocated(Sys::Socket, 0, fd)?;
            sys::linger_zero(fd)?;
            t.call(Sys::Setsockopt);
            sys::connect_in(fd, &self.addr)?;
            t.call(Sys::Connect);
            sys::close(fd)?;
            t.call(Sys::Close);
            t.closed(Sys::Close, fd)?;
            done += 1;
            slot.ops.store(done, Relaxed);
            self.shared.connected[self.index].0.store(done, Relaxed);
        }
    }
}
