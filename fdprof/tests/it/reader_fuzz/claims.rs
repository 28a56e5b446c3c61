//! Recordings small on disk whose numbers claim more than fdprof may expand (the audit's two
//! bombs, and their neighbours), through `fdprof report`, `replay`, `export --format
//! trace-jsonl` and `flamegraph` under a 1 GiB address space: refused in one line with exit 1
//! or 2 wherever the claim would be expanded, never an allocation abort (exit 134) or a signal.
//! Those within the bounds and the budget are read (a table of 2^27 fds with none open).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fdprof_common::trace::op;
use fdprof_recording::testdata::{self, TempDir};
use fdprof_recording::trace::{ENCODING, TableSnapshot, Trace, TraceTable, codec};

use crate::common::load_lock;

use super::{Run, describe, run_limited};

/// What a command must do with a file.
#[derive(Clone, Copy)]
enum Want {
    /// Exit 0.
    Read,
    /// Exit 1 or 2 and one line of error containing this.
    Refuse(&'static str),
}
use Want::{Read, Refuse};

/// A hostile file and what each command must do with it: report, replay, export trace-jsonl,
/// flamegraph.
struct Case {
    name: &'static str,
    trace: Trace,
    want: [Want; 4],
}

fn trace(tables: u32, snapshots: Vec<TableSnapshot>, events: u64, data: String) -> Trace {
    Trace {
        encoding: ENCODING.into(),
        events,
        limit: 5_000_000,
        over_limit: 0,
        lost: 0,
        tables: (0..tables)
            .map(|pid| TraceTable { pid, addr: None })
            .collect(),
        snapshots,
        notes: Vec::new(),
        data,
    }
}

fn snapshot(table: u32, open: u32, max_fds: u32) -> TableSnapshot {
    TableSnapshot {
        table,
        from_ns: 0,
        until_ns: 0,
        open: if open > 0 {
            vec![[0, open]]
        } else {
            Vec::new()
        },
        cloexec: Vec::new(),
        next_fd: open,
        max_fds,
    }
}

/// `n` zero bytes, deflated (ten make an all-zero row), in 1 MiB writes.
fn zeros(n: usize) -> String {
    let mut z = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
    let chunk = vec![0u8; 1 << 20];
    let mut left = n;
    while left > 0 {
        let k = left.min(chunk.len());
        z.write_all(&chunk[..k]).unwrap();
        left -= k;
    }
    codec::base64(&z.finish().unwrap())
}

fn row(table: u32, op: u8, fd: i32, arg: u32, t: u64) -> codec::Row {
    codec::Row {
        exit_ns: t,
        enter_ns: t,
        tid: 1,
        table,
        op,
        fd,
        arg,
        syscall: u8::MAX,
        ..codec::Row::default()
    }
}

fn cases() -> Vec<Case> {
    const OVER: &str = "more than the 512 MiB fdprof expands a recording to";
    let all = |w: Want| [w; 4];
    let row_bomb = zeros(10 << 24);
    let three: Vec<codec::Row> = (0..3).map(|i| row(0, op::ALLOC, 3 + i, 0, 10)).collect();
    vec![
        // The audit's first: 4 KB claiming a table of 2^27 fds, all but one open.
        Case {
            name: "snapshot of 2^27 open fds",
            trace: trace(
                1,
                vec![snapshot(0, (1 << 27) - 1, 1 << 27)],
                0,
                codec::encode(&[]),
            ),
            want: all(Refuse(
                "the 134217727 open fds of its fd trace's tables would take 4.0 GiB",
            )),
        },
        // The audit's second: 2^24 all-zero rows, 163 KB deflated.
        Case {
            name: "2^24 all-zero rows",
            trace: trace(1, vec![snapshot(0, 3, 64)], 1 << 24, row_bomb.clone()),
            want: all(Refuse(
                "an fd trace of 16777216 rows (fdprof writes at most 5000000)",
            )),
        },
        // Within the row bound, but with a snapshot of 4 M open fds over the budget together.
        Case {
            name: "5 M rows and 4 M open fds",
            trace: trace(
                1,
                vec![snapshot(0, 4 << 20, 4 << 20)],
                5_000_000,
                row_bomb.clone(),
            ),
            want: all(Refuse(OVER)),
        },
        Case {
            name: "a table of 2^28 fds, none open",
            trace: trace(1, vec![snapshot(0, 0, 1 << 28)], 0, codec::encode(&[])),
            want: all(Refuse(
                "a table snapshot of 268435456 fds (fdprof reads tables of at most 134217728)",
            )),
        },
        Case {
            name: "a table of 2^27 fds, none open",
            trace: trace(1, vec![snapshot(0, 0, 1 << 27)], 0, codec::encode(&[])),
            want: all(Read),
        },
        // Each at the bound, five together over the budget.
        Case {
            name: "five tables of 2^27 fds",
            trace: trace(
                5,
                (0..5).map(|t| snapshot(t, 0, 1 << 27)).collect(),
                0,
                codec::encode(&[]),
            ),
            want: all(Refuse(OVER)),
        },
        Case {
            name: "4096 tables of 2^27 fds",
            trace: trace(
                4096,
                (0..4096).map(|t| snapshot(t, 0, 1 << 27)).collect(),
                0,
                codec::encode(&[]),
            ),
            want: all(Refuse("the 4096 fd tables a replay of its trace models")),
        },
        // Rows that are not what the trace declares: refused where the trace is read.
        Case {
            name: "fewer rows than declared",
            trace: trace(1, vec![snapshot(0, 3, 64)], 10, codec::encode(&three)),
            want: [
                Read,
                Refuse("corrupt fd trace: row 3: cut short (the trace declares 10 rows)"),
                Refuse("corrupt fd trace: row 3: cut short"),
                Read,
            ],
        },
        Case {
            name: "more rows than declared",
            trace: trace(1, vec![snapshot(0, 3, 64)], 2, codec::encode(&three)),
            want: [
                Read,
                Refuse("corrupt fd trace: more data than the 2 rows the trace declares"),
                Refuse("corrupt fd trace: more data than the 2 rows"),
                Read,
            ],
        },
        // 1.6 M zero rows declared as 10: inflating stops at the 1101st byte.
        Case {
            name: "a deflate bomb declared as 10 rows",
            trace: trace(1, vec![snapshot(0, 3, 64)], 10, zeros(16 << 20)),
            want: [
                Read,
                Refuse("more data than the 10 rows the trace declares"),
                Refuse("more data than the 10 rows the trace declares"),
                Read,
            ],
        },
        // Rows growing eight tables to 2^27 fds: only a replay would build them.
        Case {
            name: "rows growing 8 tables to 2^27 fds",
            trace: trace(
                8,
                Vec::new(),
                8,
                codec::encode(
                    &(0..8)
                        .map(|t| row(t, op::INSTALL, (1 << 27) - 1, 0, u64::from(t)))
                        .collect::<Vec<_>>(),
                ),
            ),
            want: [
                Read,
                Refuse("the 8 fd tables a replay of its trace models (up to 134217728 fds each)"),
                Read,
                Read,
            ],
        },
        // A table of 1 M open fds forked 100 times: each child starts as a copy.
        Case {
            name: "100 forks of a table of 1 M open fds",
            trace: trace(
                101,
                vec![snapshot(0, 1 << 20, 1 << 20)],
                100,
                codec::encode(
                    &(1..101)
                        .map(|c| row(0, op::FORK, 1000 + c as i32, c, 100 + u64::from(c)))
                        .collect::<Vec<_>>(),
                ),
            ),
            want: [
                Read,
                Refuse("open fds of its fd trace's tables would take"),
                Read,
                Read,
            ],
        },
    ]
}

#[test]
fn fdprof_refuses_claims_past_its_budget_within_1_gib() {
    let _load = load_lock();
    let started = Instant::now();
    let dir = TempDir::new("reader-claims");
    let out = dir.0.join("out");
    let (mut checked, mut peak) = (0, (0, String::new()));
    for case in cases() {
        // A trace export refuses is one the report's close-loops rule could not read either.
        let unreadable = matches!(case.want[2], Refuse(_));
        let mut rec = testdata::recording();
        rec.kernel_release = "6.12.0".into();
        rec.trace = Some(case.trace);
        let file = dir.0.join("case.data");
        std::fs::write(&file, serde_json::to_vec(&rec).unwrap()).unwrap();
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(size < 1 << 20, "{}: {size} bytes", case.name);
        let commands: [&[&str]; 4] = [
            &["report"],
            &["replay"],
            &["export", "--format", "trace-jsonl", "-o"],
            &["flamegraph", "-o"],
        ];
        for (args, want) in commands.iter().zip(case.want) {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_fdprof"));
            cmd.args(*args);
            if args.ends_with(&["-o"]) {
                cmd.arg(&out);
            }
            cmd.arg(&file);
            let run = run_limited(&mut cmd, Stdio::null(), &dir.0, Duration::from_secs(60));
            check(case.name, args, &file, &run, want);
            if args[0] == "report" && matches!(want, Read) && unreadable {
                let note = "not checked: close-loops: the fd trace cannot be read";
                assert!(run.stdout.contains(note), "{}: {}", case.name, run.stdout);
            }
            if run.maxrss_kb > peak.0 {
                peak = (run.maxrss_kb, format!("{}: {args:?}", case.name));
            }
            checked += 1;
        }
    }
    println!(
        "{checked} runs of hostile claims in {:.1} s, peak RSS {} MiB ({})",
        started.elapsed().as_secs_f64(),
        peak.0 / 1024,
        peak.1
    );
}

fn check(name: &str, args: &[&str], file: &Path, run: &Run, want: Want) {
    let what = format!(
        "{name}: fdprof {args:?}: {}, peak RSS {} MiB, stderr: {}",
        describe(run.status),
        run.maxrss_kb / 1024,
        run.stderr
    );
    let code = run.status.and_then(|s| s.code());
    assert!(code.is_some() && code != Some(134), "{what}");
    match want {
        Read => assert_eq!(code, Some(0), "{what}"),
        Refuse(needle) => {
            assert!(matches!(code, Some(1 | 2)), "{what}");
            assert_eq!(run.stderr.lines().count(), 1, "{what}");
            assert!(run.stderr.starts_with("fdprof: error: "), "{what}");
            assert!(run.stderr.contains(needle), "{what}");
            // The files are named in the reader's refusals.
            if !needle.contains("corrupt fd trace") && !needle.starts_with("more data") {
                assert!(run.stderr.contains(&file.display().to_string()), "{what}");
            }
        }
    }
}
