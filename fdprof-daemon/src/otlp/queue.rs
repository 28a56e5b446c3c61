//! The requests not yet sent, oldest first, at most a bound of them: past it the oldest goes,
//! counted. The interval that adds one never waits; the one task that sends reads the oldest
//! and removes it only once it is sent or refused.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use hyper::body::Bytes;
use tokio::sync::Notify;

/// One interval's request, encoded, with its number in the queue's order.
#[derive(Clone)]
pub(crate) struct Request {
    pub seq: u64,
    pub body: Bytes,
}

/// What the pushing has done since the daemon started, for `/metrics`.
#[derive(Default)]
pub(crate) struct Counters {
    /// Requests the receiver took (its partial refusals included).
    pub sent: AtomicU64,
    /// Bytes of the requests it took.
    pub sent_bytes: AtomicU64,
    /// Attempts that failed: no connection, a timeout, or an answer that is not a success.
    pub failed: AtomicU64,
    /// Intervals never sent: past the queue's bound, refused for good, or left at shutdown.
    pub dropped: AtomicU64,
    /// Profiles the receiver took but said it rejected (`partial_success`).
    pub rejected_profiles: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn read(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

pub(crate) struct Queue {
    waiting: Mutex<Waiting>,
    bound: usize,
    /// Wakes the sender when a request comes.
    pub added: Notify,
    pub counters: Counters,
}

#[derive(Default)]
struct Waiting {
    requests: VecDeque<Request>,
    next_seq: u64,
}

impl Queue {
    pub(crate) fn new(bound: usize) -> Self {
        Self {
            waiting: Mutex::default(),
            bound: bound.max(1),
            added: Notify::new(),
            counters: Counters::default(),
        }
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a request; the oldest goes if the queue is full.
    pub(crate) fn push(&self, body: Bytes) {
        {
            let mut w = self.waiting();
            if w.requests.len() >= self.bound {
                w.requests.pop_front();
                Counters::add(&self.counters.dropped, 1);
            }
            let seq = w.next_seq;
            w.next_seq += 1;
            w.requests.push_back(Request { seq, body });
        }
        self.added.notify_one();
    }

    /// The oldest request, left in the queue.
    pub(crate) fn oldest(&self) -> Option<Request> {
        self.waiting().requests.front().cloned()
    }

    /// Removes request `seq` once it is sent or refused; the queue may have dropped it already.
    pub(crate) fn done(&self, seq: u64) {
        let mut w = self.waiting();
        if w.requests.front().is_some_and(|r| r.seq == seq) {
            w.requests.pop_front();
        }
    }

    /// Requests waiting.
    pub(crate) fn len(&self) -> usize {
        self.waiting().requests.len()
    }

    /// Empties the queue, counting what it held as dropped (the daemon stops).
    pub(crate) fn drop_all(&self) -> usize {
        let n = std::mem::take(&mut self.waiting().requests).len();
        Counters::add(&self.counters.dropped, n as u64);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_its_bound_the_oldest_goes_counted_and_a_dropped_request_is_not_removed_twice() {
        let q = Queue::new(2);
        for i in 0..3u8 {
            q.push(Bytes::from(vec![i]));
        }
        assert_eq!(q.len(), 2);
        assert_eq!(Counters::read(&q.counters.dropped), 1);
        let oldest = q.oldest().unwrap();
        assert_eq!((oldest.seq, &oldest.body[..]), (1, &[1u8][..]));
        // While it is being sent, two more come: it is dropped, and its `done` removes nothing.
        q.push(Bytes::from_static(&[3]));
        q.push(Bytes::from_static(&[4]));
        q.done(oldest.seq);
        assert_eq!(q.oldest().unwrap().seq, 3);
        assert_eq!(q.len(), 2);
        assert_eq!(q.drop_all(), 2);
        assert_eq!(Counters::read(&q.counters.dropped), 5);
    }
}
