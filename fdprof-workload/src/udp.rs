//! udp-loopback: every task sends datagrams to one UDP socket on 127.0.0.1 and takes one back
//! from it. Loopback hands each datagram to the NET_RX softirq of the sending CPU, which runs
//! on the sender's own stack and takes the receiving socket's queue lock there; so with two
//! tasks or more, most of the lock wait is an interrupt handler's that landed on the program's
//! threads, the pattern the diagnosis's interrupt-time rule names. No fd-table call is made
//! in the measured phase: the ground truth is exact with any number of threads.

use anyhow::{Context, Result};

use crate::ground_truth::{LoopError, Tracker};
use crate::scenarios::Op;
use crate::sys;

/// The datagram's size: small, so the queue lock, not the copy, dominates.
const DATAGRAM: usize = 64;

/// A UDP socket bound to 127.0.0.1 on a port the kernel picks, and its address.
pub(crate) fn bind_loopback() -> Result<(i32, libc::sockaddr_in)> {
    let fd = sys::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)?;
    let addr = sys::bind_loopback(fd).context("binding a UDP socket to 127.0.0.1")?;
    Ok((fd, addr))
}

/// One task: its own sending socket, the shared receiving one and its address.
pub(crate) struct UdpLoopback {
    pub sender: i32,
    pub receiver: i32,
    pub to: libc::sockaddr_in,
}

impl UdpLoopback {
    pub(crate) fn new(receiver: i32, to: libc::sockaddr_in) -> Result<Self> {
        let sender = sys::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)?;
        Ok(UdpLoopback {
            sender,
            receiver,
            to,
        })
    }

    /// The fd this task owns (the receiver is the run's).
    pub(crate) fn held_fds(&self) -> &[i32] {
        std::slice::from_ref(&self.sender)
    }
}

impl Op for UdpLoopback {
    #[inline(always)]
    fn once<T: Tracker>(&mut self, _t: &mut T) -> Result<(), LoopError> {
        let buf = [0u8; DATAGRAM];
        // SAFETY: `buf` and `to` are live for the call; the lengths are theirs.
        let sent = unsafe {
            libc::sendto(
                self.sender,
                buf.as_ptr().cast(),
                DATAGRAM,
                0,
                (&raw const self.to).cast(),
                size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if sent < 0 {
            return Err(LoopError::Net {
                what: "sendto()",
                errno: sys::errno(),
            });
        }
        let mut back = [0u8; DATAGRAM];
        // Take one back, so the queue stays short and the kernel drops no datagram before its
        // lock (a full queue is refused without taking it). Another task may have taken it.
        // SAFETY: `back` is live and DATAGRAM bytes long.
        let got = unsafe {
            libc::recv(
                self.receiver,
                back.as_mut_ptr().cast(),
                DATAGRAM,
                libc::MSG_DONTWAIT,
            )
        };
        let errno = if got < 0 { sys::errno() } else { 0 };
        if errno != 0 && errno != libc::EAGAIN {
            return Err(LoopError::Net {
                what: "recv()",
                errno,
            });
        }
        Ok(())
    }
}
