//! A ring buffer read asynchronously: its fd becomes readable when the kernel adds a record,
//! so nothing polls. Shared by the events ([`super::EventStream`]) and the process starts
//! ([`super::starts::StartStream`]).

use anyhow::{Context, Result};
use aya::maps::{MapData, RingBuf};
use tokio::io::unix::AsyncFd;

pub(crate) struct AsyncRing {
    ring: AsyncFd<RingBuf<MapData>>,
    /// Records that did not decode (none, unless the object and fdprof disagree).
    pub undecoded: u64,
}

impl AsyncRing {
    /// Registers `ring` with the tokio reactor: call it inside a runtime with IO enabled.
    pub(crate) fn new(ring: RingBuf<MapData>, what: &str) -> Result<Self> {
        // SAFETY: the RingBuf owns its map's fd, open and the same until it is dropped with
        // the AsyncFd.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .with_context(|| format!("cannot watch the {what} ring buffer"))?;
        Ok(Self { ring, undecoded: 0 })
    }

    /// Waits until there are records, then returns up to `max` of them, oldest first.
    pub(crate) async fn next_batch<T>(
        &mut self,
        max: usize,
        decode: impl Fn(&[u8]) -> Option<T>,
    ) -> Result<Vec<T>> {
        loop {
            let mut guard = self
                .ring
                .readable_mut()
                .await
                .context("cannot wait for a ring buffer")?;
            let batch = drain(guard.get_inner_mut(), max, &decode, &mut self.undecoded);
            if batch.len() >= max {
                // More may wait: the readiness is kept, so the next call reads on at once.
                return Ok(batch);
            }
            // Drained: the readiness was consumed; wait for the kernel's next wakeup.
            guard.clear_ready();
            if !batch.is_empty() {
                return Ok(batch);
            }
        }
    }

    /// Up to `max` records there are now, without waiting.
    pub(crate) fn try_batch<T>(
        &mut self,
        max: usize,
        decode: impl Fn(&[u8]) -> Option<T>,
    ) -> Vec<T> {
        drain(self.ring.get_mut(), max, &decode, &mut self.undecoded)
    }
}

fn drain<T>(
    ring: &mut RingBuf<MapData>,
    max: usize,
    decode: &impl Fn(&[u8]) -> Option<T>,
    undecoded: &mut u64,
) -> Vec<T> {
    let mut out = Vec::new();
    while out.len() < max {
        let Some(item) = ring.next() else { break };
        match decode(&item) {
            Some(r) => out.push(r),
            None => *undecoded += 1,
        }
    }
    out
}

/// A `#[repr(C)]` record of plain data from the bytes the kernel wrote; `None` for another
/// size.
pub(crate) fn decode_plain<T: aya::Pod>(bytes: &[u8]) -> Option<T> {
    if bytes.len() != size_of::<T>() {
        return None;
    }
    // SAFETY: the length is checked; T is Pod, valid for any bytes, and read_unaligned copes
    // with the ring buffer's 8-byte alignment either way.
    Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast()) })
}
