//! The trace's bytes: one row of varints per operation (times as deltas, so most fields take a
//! byte), deflated, then base64 so the recording stays one JSON document. Decoding streams: the
//! base64 text is inflated a buffer at a time and each row is read as its bytes arrive, so
//! neither the deflated nor the inflated bytes are ever held whole. It is bounded and checked:
//! the inflated bytes stop at what the declared number of rows can take, a trace holding fewer
//! or more rows than it declares is refused, and garbage gives an error, never a panic.

use std::io::{BufRead, BufReader, Read, Take, Write};

use flate2::{Compression, read::DeflateDecoder, write::DeflateEncoder};

/// One operation as the recording keeps it: times in ns since the trace's origin, the table
/// as its index in `Trace::tables`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Row {
    pub exit_ns: u64,
    /// The syscall's entry; equal to `exit_ns` where unknown.
    pub enter_ns: u64,
    pub tid: u32,
    pub table: u32,
    /// `fdprof_common::trace::op`.
    pub op: u8,
    /// `fdprof_common::trace::flag`.
    pub flags: u8,
    /// Index in `FD_SYSCALLS`; `u8::MAX` for exec and expansions.
    pub syscall: u8,
    pub fd: i32,
    pub arg: u32,
    pub next_fd: u32,
    pub max_fds: u32,
}

/// The most bytes a row takes once inflated (ten varints of at most 10 bytes, and room for an
/// eleventh): the inflated bytes of a trace stop at its declared rows times this.
pub const MAX_ROW_BYTES: u64 = 110;
/// The most rows a trace may have: `record --trace-limit` keeps at most this many.
pub const MAX_ROWS: u64 = crate::bounded::TRACE_ROWS;

pub fn encode(rows: &[Row]) -> String {
    let mut raw = Vec::with_capacity(rows.len() * 12);
    let (mut exit, mut tid) = (0u64, 0u32);
    for r in rows {
        put(&mut raw, u64::from(r.op) | u64::from(r.flags) << 3);
        put(&mut raw, u64::from(r.syscall));
        put(&mut raw, zigzag(r.exit_ns.wrapping_sub(exit) as i64));
        put(&mut raw, r.exit_ns.saturating_sub(r.enter_ns));
        put(&mut raw, zigzag(i64::from(r.tid) - i64::from(tid)));
        put(&mut raw, u64::from(r.table));
        put(&mut raw, zigzag(i64::from(r.fd)));
        put(&mut raw, u64::from(r.arg));
        put(&mut raw, u64::from(r.next_fd));
        put(&mut raw, u64::from(r.max_fds));
        (exit, tid) = (r.exit_ns, r.tid);
    }
    let mut z = DeflateEncoder::new(Vec::new(), Compression::default());
    z.write_all(&raw).expect("writing to memory");
    base64(&z.finish().expect("writing to memory"))
}

/// Decodes exactly `count` rows whose tables are below `tables`, into a list of exactly that
/// size (the caller has checked that `count` rows fit: [`crate::budget`]).
pub fn decode(data: &str, count: u64, tables: u32) -> Result<Vec<Row>, String> {
    let rows = Rows::new(data, count, tables)?;
    let mut out = Vec::with_capacity(count as usize);
    for row in rows {
        out.push(row?);
    }
    Ok(out)
}

/// The rows of a trace, one at a time: `count` of them, then an error if the data holds more.
/// After an error, nothing more.
pub struct Rows<'a> {
    input: BufReader<Take<DeflateDecoder<Unbase64<'a>>>>,
    count: u64,
    tables: u32,
    /// Rows read so far.
    read: u64,
    exit: u64,
    tid: u32,
    over: bool,
}

impl<'a> Rows<'a> {
    /// The rows of `data`, which declares `count` of them on `tables` tables.
    pub fn new(data: &'a str, count: u64, tables: u32) -> Result<Rows<'a>, String> {
        if count > MAX_ROWS {
            return Err(format!("{count} rows, more than {MAX_ROWS}"));
        }
        let packed = Unbase64::new(data).ok_or("not base64")?;
        // One byte past what `count` rows can take, to tell that there is more.
        let most = count * MAX_ROW_BYTES + 1;
        Ok(Rows {
            input: BufReader::new(DeflateDecoder::new(packed).take(most)),
            count,
            tables,
            read: 0,
            exit: 0,
            tid: 0,
            over: false,
        })
    }

    /// The next inflated byte; `None` at the end.
    fn byte(&mut self) -> Result<Option<u8>, String> {
        let buf = self
            .input
            .fill_buf()
            .map_err(|e| format!("not deflate data: {e}"))?;
        let Some(&b) = buf.first() else {
            return Ok(None);
        };
        self.input.consume(1);
        Ok(Some(b))
    }

    /// An LEB128 varint of at most 10 bytes; `None` if the data ends first or it is longer.
    fn varint(&mut self) -> Result<Option<u64>, String> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let Some(b) = self.byte()? else {
                return Ok(None);
            };
            if shift == 63 && b > 1 {
                return Ok(None);
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    fn row(&mut self) -> Result<Row, String> {
        let i = self.read;
        let bad = |what: &str| format!("row {i}: {what}");
        let want = |rows: &mut Self| -> Result<u64, String> {
            rows.varint()?.ok_or_else(|| {
                format!(
                    "row {i}: cut short (the trace declares {} rows)",
                    rows.count
                )
            })
        };
        let opflags = want(self)?;
        let small = |v: u64, what: &str| u8::try_from(v).map_err(|_| bad(what));
        let op = small(opflags & 7, "op")?;
        let flags = small(opflags >> 3, "flags")?;
        let syscall = small(want(self)?, "syscall")?;
        let exit = self.exit.wrapping_add(unzigzag(want(self)?) as u64);
        let duration = want(self)?;
        let t = i64::from(self.tid) + unzigzag(want(self)?);
        let tid = u32::try_from(t).map_err(|_| bad("tid"))?;
        let table = u32::try_from(want(self)?).map_err(|_| bad("table"))?;
        if table >= self.tables {
            return Err(bad("unknown table"));
        }
        let fd = i32::try_from(unzigzag(want(self)?)).map_err(|_| bad("fd"))?;
        let word = |v: u64, what: &str| u32::try_from(v).map_err(|_| bad(what));
        let arg = word(want(self)?, "arg")?;
        let next_fd = word(want(self)?, "next_fd")?;
        let max_fds = word(want(self)?, "max_fds")?;
        (self.exit, self.tid) = (exit, tid);
        Ok(Row {
            exit_ns: exit,
            enter_ns: exit.saturating_sub(duration),
            tid,
            table,
            op,
            flags,
            syscall,
            fd,
            arg,
            next_fd,
            max_fds,
        })
    }
}

impl Iterator for Rows<'_> {
    type Item = Result<Row, String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.over {
            return None;
        }
        if self.read == self.count {
            self.over = true;
            return match self.byte() {
                Ok(None) => None,
                Ok(Some(_)) => Some(Err(format!(
                    "more data than the {} rows the trace declares",
                    self.count
                ))),
                Err(e) => Some(Err(e)),
            };
        }
        let row = self.row();
        self.read += 1;
        self.over = row.is_err();
        Some(row)
    }
}

/// Standard base64 with padding, decoded as it is read; the text is checked whole first.
struct Unbase64<'a> {
    text: &'a [u8],
    /// Decoded bytes not yet handed out.
    pending: [u8; 3],
    pending_len: usize,
}

impl<'a> Unbase64<'a> {
    fn new(text: &'a str) -> Option<Unbase64<'a>> {
        let text = text.as_bytes();
        if !text.len().is_multiple_of(4) {
            return None;
        }
        let quads = text.len() / 4;
        for (q, quad) in text.chunks(4).enumerate() {
            let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
            if pad > 2 || (pad > 0 && q + 1 != quads) {
                return None;
            }
            if quad[..4 - pad]
                .iter()
                .any(|&c| VALUE[usize::from(c)] == INVALID)
            {
                return None;
            }
        }
        Some(Unbase64 {
            text,
            pending: [0; 3],
            pending_len: 0,
        })
    }

    /// Decodes the next quad into `pending`; false at the end.
    fn refill(&mut self) -> bool {
        let Some((quad, rest)) = self.text.split_first_chunk::<4>() else {
            return false;
        };
        self.text = rest;
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        let n = quad[..4 - pad].iter().enumerate().fold(0u32, |n, (i, &c)| {
            n | u32::from(VALUE[usize::from(c)]) << (18 - 6 * i)
        });
        self.pending_len = 3 - pad;
        for i in 0..self.pending_len {
            // Handed out from the end: store reversed.
            self.pending[self.pending_len - 1 - i] = (n >> (16 - 8 * i)) as u8;
        }
        true
    }
}

impl Read for Unbase64<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            if self.pending_len == 0 && !self.refill() {
                break;
            }
            self.pending_len -= 1;
            buf[n] = self.pending[self.pending_len];
            n += 1;
        }
        Ok(n)
    }
}

fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    (v >> 1) as i64 ^ -((v & 1) as i64)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (the trace's `data` text; tests build hostile traces with it).
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Each byte's value in [`ALPHABET`], or [`INVALID`].
const VALUE: [u8; 256] = {
    let mut v = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        v[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    v
};
const INVALID: u8 = 0xff;

#[cfg(test)]
mod tests {
    use super::*;

    fn unbase64(text: &str) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        Unbase64::new(text)?.read_to_end(&mut out).unwrap();
        Some(out)
    }

    #[test]
    fn base64_round_trips() {
        for len in 0..10 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 200) as u8).collect();
            assert_eq!(unbase64(&base64(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64(b"fdprof"), "ZmRwcm9m");
        assert_eq!(base64(b"fd"), "ZmQ=");
        assert!(unbase64("ZmQ=ZmQ=").is_none());
        assert!(unbase64("Zm=Q").is_none());
        assert!(unbase64("ZmQ").is_none());
        assert!(unbase64("Zm\n").is_none());
    }

    #[test]
    fn rows_round_trip() {
        let rows = vec![
            Row {
                exit_ns: 1_000,
                enter_ns: 900,
                tid: 7,
                op: 1,
                fd: 3,
                ..Row::default()
            },
            Row {
                exit_ns: 950,
                enter_ns: 950,
                tid: 8,
                table: 1,
                op: 2,
                flags: 1,
                syscall: 32,
                fd: -24,
                arg: 9,
                next_fd: 4,
                max_fds: 64,
            },
        ];
        let data = encode(&rows);
        assert_eq!(decode(&data, 2, 2).unwrap(), rows);
        assert!(decode(&data, 2, 1).is_err(), "table out of range");
        assert!(decode(&data, 3, 2).is_err(), "fewer rows than said");
        assert!(decode(&data, 1, 2).is_err(), "more rows than said");
    }

    fn deflated(raw: &[u8]) -> String {
        let mut z = DeflateEncoder::new(Vec::new(), Compression::best());
        z.write_all(raw).unwrap();
        base64(&z.finish().unwrap())
    }

    #[test]
    fn a_trace_holding_other_than_its_declared_rows_is_refused() {
        // 16 MiB of zero bytes are 1.6 M all-zero rows: declared as 1, inflating stops at
        // the 111th byte.
        let bomb = deflated(&vec![0; 16 << 20]);
        assert_eq!(
            decode(&bomb, 1, 1).unwrap_err(),
            "more data than the 1 rows the trace declares"
        );
        assert_eq!(
            decode(&deflated(&[0; 25]), 3, 1).unwrap_err(),
            "row 2: cut short (the trace declares 3 rows)"
        );
        assert_eq!(decode(&deflated(&[0; 20]), 2, 1).unwrap().len(), 2);
        assert_eq!(
            decode(&bomb, MAX_ROWS + 1, 1).unwrap_err(),
            format!("{} rows, more than {MAX_ROWS}", MAX_ROWS + 1)
        );
        assert_eq!(decode("ZmQ", 0, 1).unwrap_err(), "not base64");
        assert!(
            decode("ZmRwcm9m", 1, 1)
                .unwrap_err()
                .starts_with("not deflate data")
        );
    }
}
