//! The work a trace may take to replay. A few bytes can ask for much (an exec row makes a
//! replay read every word of its table, 16384 words at a million fds, under each model), so
//! ordering and modelling count what they visit (rows, open fds and bitmap words:
//! [`Work::bound`]) and stop, in one line, once it comes to more than [`WORK_PER_BYTE`]
//! operations per byte of the trace, or [`WORK_FLOOR`] for a small one. The memory a
//! recording's claims take is [`crate::budget`]'s.

use super::Trace;

/// Operations a replay may take per byte of its fd trace ([`trace_bytes`]): a real trace's rows
/// take a few bytes each and a few dozen operations each under all the models.
pub const WORK_PER_BYTE: u64 = 256;
/// Operations any trace may take, however small: a second or so of a release build.
pub const WORK_FLOOR: u64 = 1 << 27;

/// The bytes an fd trace takes in its recording, as far as they ask for work: its rows' data,
/// 16 a snapshot run (two numbers in JSON) and 64 a table and snapshot.
pub fn trace_bytes(trace: &Trace) -> u64 {
    let runs: usize = trace
        .snapshots
        .iter()
        .map(|s| s.open.len() + s.cloexec.len())
        .sum();
    let records = trace.tables.len() + trace.snapshots.len();
    (trace.data.len() as u64)
        .saturating_add(16 * runs as u64)
        .saturating_add(64 * records as u64)
}

/// Work done on a trace against its bound: rows, open fds, bitmap words and candidate rows
/// visited, one operation each.
#[derive(Debug, Clone)]
pub struct Work {
    bound: u64,
    spent: u64,
    bytes: u64,
}

impl Work {
    /// The work `trace` is worth: [`WORK_PER_BYTE`] per byte of it, at least [`WORK_FLOOR`].
    pub fn bound(trace: &Trace) -> Work {
        let bytes = trace_bytes(trace);
        Work {
            bound: bytes.saturating_mul(WORK_PER_BYTE).max(WORK_FLOOR),
            spent: 0,
            bytes,
        }
    }

    /// No bound (a synthetic trace, whose size its flags bound).
    pub fn unbounded() -> Work {
        Work {
            bound: u64::MAX,
            spent: 0,
            bytes: 0,
        }
    }

    pub fn add(&mut self, n: u64) {
        self.spent = self.spent.saturating_add(n);
    }

    /// Operations left before the bound (0 once past it).
    pub fn left(&self) -> u64 {
        self.bound.saturating_sub(self.spent)
    }

    pub fn over(&self) -> bool {
        self.spent > self.bound
    }

    /// The one line a replay stopped with, `name` the recording and `at` what it was doing.
    pub fn refusal(&self, name: &str, at: &str) -> String {
        format!(
            "{name}: its fd trace would take more than {} operations to replay, the most its {} \
             bytes are worth ({WORK_PER_BYTE} a byte, at least {WORK_FLOOR}): stopped {at}",
            self.bound, self.bytes
        )
    }
}
