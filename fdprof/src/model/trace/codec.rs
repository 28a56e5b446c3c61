//! The trace's bytes: one row of varints per operation (times as deltas, so most fields take a
//! byte), deflated, then base64 so the recording stays one JSON document. Decoding is bounded
//! and checked: garbage gives an error, never a panic or an unbounded allocation.

use std::io::{Read, Write};

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

/// The most bytes a row takes once decompressed (11 varints of at most 10 bytes).
const MAX_ROW_BYTES: u64 = 110;
/// The most rows a trace may have: more than a 64 MiB recording can hold.
pub const MAX_ROWS: u64 = 1 << 24;
/// The most bytes the rows may inflate to (a real row takes 12 to 20): a deflate bomb stops
/// here.
const MAX_RAW_BYTES: u64 = 256 << 20;

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

/// Decodes exactly `count` rows whose tables are below `tables`.
pub fn decode(data: &str, count: u64, tables: u32) -> Result<Vec<Row>, String> {
    if count > MAX_ROWS {
        return Err(format!("{count} rows, more than {MAX_ROWS}"));
    }
    let packed = unbase64(data).ok_or("not base64")?;
    let mut raw = Vec::new();
    DeflateDecoder::new(packed.as_slice())
        .take((count * MAX_ROW_BYTES).min(MAX_RAW_BYTES) + 1)
        .read_to_end(&mut raw)
        .map_err(|e| format!("not deflate data: {e}"))?;
    let mut rows = Vec::with_capacity(count.min(raw.len() as u64 / 10) as usize);
    let mut cur = Cursor { bytes: &raw, at: 0 };
    let (mut exit, mut tid) = (0u64, 0u32);
    for i in 0..count {
        let bad = |what: &str| format!("row {i}: {what}");
        let opflags = cur.get().ok_or_else(|| bad("cut short"))?;
        let small = |v: u64, what: &str| u8::try_from(v).map_err(|_| bad(what));
        let op = small(opflags & 7, "op")?;
        let flags = small(opflags >> 3, "flags")?;
        let syscall = small(cur.want(&bad)?, "syscall")?;
        exit = exit.wrapping_add(unzigzag(cur.want(&bad)?) as u64);
        let duration = cur.want(&bad)?;
        let t = i64::from(tid) + unzigzag(cur.want(&bad)?);
        tid = u32::try_from(t).map_err(|_| bad("tid"))?;
        let table = u32::try_from(cur.want(&bad)?).map_err(|_| bad("table"))?;
        if table >= tables {
            return Err(bad("unknown table"));
        }
        let fd = i32::try_from(unzigzag(cur.want(&bad)?)).map_err(|_| bad("fd"))?;
        let word = |v: u64, what: &str| u32::try_from(v).map_err(|_| bad(what));
        let arg = word(cur.want(&bad)?, "arg")?;
        let next_fd = word(cur.want(&bad)?, "next_fd")?;
        let max_fds = word(cur.want(&bad)?, "max_fds")?;
        rows.push(Row {
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
        });
    }
    if cur.at != raw.len() {
        return Err(format!("{} bytes after the last row", raw.len() - cur.at));
    }
    Ok(rows)
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    /// An LEB128 varint of at most 10 bytes.
    fn get(&mut self) -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..70).step_by(7) {
            let b = *self.bytes.get(self.at)?;
            self.at += 1;
            if shift == 63 && b > 1 {
                return None;
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    }

    fn want(&mut self, bad: &impl Fn(&str) -> String) -> Result<u64, String> {
        self.get().ok_or_else(|| bad("cut short"))
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

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
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

fn unbase64(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(4) {
        return None;
    }
    let value = |c: u8| ALPHABET.iter().position(|&a| a == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let quads = bytes.len() / 4;
    for (q, quad) in bytes.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|&&c| c == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for (i, &c) in quad[..4 - pad].iter().enumerate() {
            n |= value(c)? << (18 - 6 * i);
        }
        for i in 0..3 - pad {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips() {
        for len in 0..10 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 200) as u8).collect();
            assert_eq!(unbase64(&base64(&bytes)).unwrap(), bytes);
        }
        assert_eq!(base64(b"fdprof"), "ZmRwcm9m");
        assert_eq!(base64(b"fd"), "ZmQ=");
        assert!(unbase64("ZmQ=ZmQ=").is_none());
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
}
