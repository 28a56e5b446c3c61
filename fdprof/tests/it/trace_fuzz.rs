//! The fd-trace decoder on hostile input, no kernel needed: random bytes, random varint rows
//! behind valid deflate and base64, valid rows with every field random, cut and flipped data,
//! wrong counts and hostile snapshots. Each case goes through the decoder, the ordering, the
//! JSON lines export and a replay under every model. Pass: no panic (an error is fine), and
//! the whole run ends (hostile sizes are bounded by the decoder). A deflate bomb stops at the
//! rows it declares.

use std::io::Write;

use fdprof_profiler::analysis::replay::{self, ModelChoice};
use fdprof_profiler::render;
use fdprof_recording::budget;
use fdprof_recording::trace::{ENCODING, TableSnapshot, Trace, TraceTable, codec, order};

use crate::common::load_lock;

/// splitmix64: deterministic cases, reproducible from the case number.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Small values mostly, sometimes the extremes: beyond the largest table a replay grows
    /// (2^27 fds), so a case is refused quickly rather than replayed slowly over a huge table.
    fn value(&mut self) -> u64 {
        match self.below(8) {
            0 => u64::MAX,
            1 => u64::from(u32::MAX),
            2 => 1 << (28 + self.below(36)),
            _ => self.below(300),
        }
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

fn deflate(bytes: &[u8]) -> Vec<u8> {
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    z.write_all(bytes).unwrap();
    z.finish().unwrap()
}

fn varints(rng: &mut Rng, n: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..n {
        let mut v = rng.value();
        while v >= 0x80 {
            out.push(v as u8 | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    out
}

fn random_row(rng: &mut Rng, tables: u32) -> codec::Row {
    let exit_ns = rng.value();
    let table = rng.below(u64::from(tables)) as u32;
    let mut op = rng.below(8) as u8;
    // A fork needs another table to name.
    if op == fdprof_common::trace::op::FORK && tables == 1 {
        op = 0;
    }
    codec::Row {
        exit_ns,
        enter_ns: exit_ns.saturating_sub(rng.value()),
        tid: rng.below(4) as u32,
        table,
        op,
        flags: rng.below(8) as u8,
        syscall: rng.next() as u8,
        fd: rng.value() as i32,
        // A fork names another table, mostly (a bad one makes the whole trace corrupt).
        arg: if op == fdprof_common::trace::op::FORK && rng.below(256) != 0 {
            (table + 1) % tables
        } else {
            rng.value() as u32
        },
        next_fd: rng.value() as u32,
        max_fds: rng.value() as u32,
    }
}

fn random_snapshot(rng: &mut Rng, tables: u32) -> TableSnapshot {
    let runs = |rng: &mut Rng| -> Vec<[u32; 2]> {
        (0..rng.below(5))
            .map(|_| [rng.value() as u32, rng.value() as u32])
            .collect()
    };
    TableSnapshot {
        table: rng.below(u64::from(tables) + 1) as u32,
        from_ns: rng.value(),
        until_ns: rng.value(),
        open: runs(rng),
        cloexec: runs(rng),
        next_fd: rng.value() as u32,
        max_fds: match rng.below(4) {
            0 => 64,
            1 => 1 << 20,
            _ => rng.value() as u32,
        },
    }
}

fn case(seed: u64) -> Trace {
    let mut rng = Rng(seed);
    let tables = 1 + rng.below(3) as u32;
    let n = rng.below(200) as usize;
    let data = match rng.below(5) {
        0 => codec::base64(&rng.bytes(n)),
        1 => codec::base64(&deflate(&varints(&mut rng, n * 10))),
        2 => {
            let rows: Vec<_> = (0..n).map(|_| random_row(&mut rng, tables)).collect();
            codec::encode(&rows)
        }
        3 => {
            let rows: Vec<_> = (0..n).map(|_| random_row(&mut rng, tables)).collect();
            let mut data = codec::encode(&rows);
            let cut = rng.below(data.len() as u64 + 1) as usize;
            data.truncate(cut);
            data
        }
        _ => {
            let rows: Vec<_> = (0..n).map(|_| random_row(&mut rng, tables)).collect();
            let mut data = codec::encode(&rows).into_bytes();
            if !data.is_empty() {
                let at = rng.below(data.len() as u64) as usize;
                data[at] = b"AZaz09+/="[rng.below(9) as usize];
            }
            String::from_utf8(data).unwrap()
        }
    };
    let events = match rng.below(4) {
        0 => rng.value(),
        _ => n as u64,
    };
    Trace {
        encoding: ENCODING.into(),
        events,
        limit: rng.value(),
        over_limit: rng.below(2),
        lost: rng.below(2),
        tables: (0..tables)
            .map(|i| TraceTable { pid: i, addr: None })
            .collect(),
        snapshots: (0..rng.below(4).saturating_sub(1))
            .map(|_| random_snapshot(&mut rng, tables))
            .collect(),
        notes: Vec::new(),
        data,
    }
}

/// `export --format trace-jsonl`'s lines, written to memory, or why the trace cannot be read.
fn jsonl(trace: &Trace) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    render::trace::lines(trace)?
        .write(&mut out)
        .expect("writing to memory");
    Ok(out)
}

/// Cases per run (≈ 5 s in a debug build).
const CASES: u64 = 1500;

#[test]
fn hostile_traces_never_panic() {
    let _load = load_lock();
    let mut decoded = 0;
    for seed in 0..CASES {
        let trace = case(seed);
        let _ = jsonl(&trace);
        if order::events(&trace).is_ok() {
            decoded += 1;
        }
        let mut rec = fdprof_recording::testdata::recording();
        rec.kernel_release = "6.12.0".into();
        rec.trace = Some(trace);
        // What the reader checks, then what a replay checks with the rows (inside `recorded`).
        let _ = budget::check(&rec, None, "fuzz");
        let _ = replay::recorded(&rec, "fuzz", ModelChoice::All, seed);
    }
    // Some valid-row cases must get through, or the decoder is refusing everything.
    assert!(decoded > CASES / 50, "only {decoded} cases decoded");
}

/// Zero bytes deflate a thousand to one and ten make a row: whatever the bomb holds, decoding
/// stops one byte past what the declared rows can take (110 bytes a row) and says so.
#[test]
fn deflate_bombs_stop_at_their_declared_rows() {
    let _load = load_lock();
    let bomb = codec::base64(&deflate(&vec![0; 8 << 20]));
    for declared in [0u64, 1, 10, 1000] {
        let trace = Trace {
            encoding: ENCODING.into(),
            events: declared,
            limit: 1000,
            over_limit: 0,
            lost: 0,
            tables: vec![TraceTable { pid: 1, addr: None }],
            snapshots: Vec::new(),
            notes: Vec::new(),
            data: bomb.clone(),
        };
        let want = format!("more data than the {declared} rows the trace declares");
        assert_eq!(trace.rows().unwrap_err(), want);
        assert_eq!(jsonl(&trace).unwrap_err(), want);
        let streamed: Vec<_> = trace.stream().unwrap().collect();
        assert_eq!(streamed.len() as u64, declared + 1);
        assert_eq!(streamed.last().unwrap().as_ref().unwrap_err(), &want);
        let mut rec = fdprof_recording::testdata::recording();
        rec.kernel_release = "6.12.0".into();
        rec.trace = Some(trace);
        let err = replay::recorded(&rec, "bomb", ModelChoice::All, 1).unwrap_err();
        assert_eq!(err, format!("bomb: corrupt fd trace: {want}"));
    }
}
