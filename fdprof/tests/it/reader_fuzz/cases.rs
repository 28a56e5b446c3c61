//! The fixed hostile cases and the seeds the random ones grow from.

use fdprof_common::{
    contention::LockKind,
    probes::{Attachment, Mode, Role},
    session::TargetKind,
};
use fdprof_recording::Recording;
use fdprof_recording::bounded;
use fdprof_recording::read::MAX_BYTES;
use fdprof_recording::recording::{Frame, FunctionStats, StackWalks, Target};
use fdprof_recording::series::{Sample, SampleSyscall, SampleWaits, Series};
use fdprof_recording::testdata::{self, frame, hist, site};
use serde_json::{Value, json};

use super::mutate::max_numbers;

/// A site whose stacks have `depth` frames each, named after the site.
pub fn deep_site(i: usize, depth: usize) -> fdprof_recording::recording::ContentionSite {
    let kernel: Vec<Frame> = (0..depth)
        .map(|j| frame(&format!("kernel_function_{i}_{j}"), j as u64 * 8, None))
        .collect();
    let user: Vec<Frame> = (0..depth)
        .map(|j| {
            frame(
                &format!("user_function_{i}_{j}"),
                j as u64,
                Some("/usr/lib/libx.so.1"),
            )
        })
        .collect();
    let lock = if i.is_multiple_of(3) {
        "spinlock"
    } else {
        "file_lock"
    };
    site(
        lock,
        "alloc",
        kernel,
        user,
        &[(1000 + i as u64, 1 + i as u64 % 7)],
    )
}

/// Valid recordings the mutations start from.
pub fn seeds() -> Vec<Value> {
    let base = testdata::recording();

    let mut direct = base.clone();
    direct.mode = Mode::Fentry;
    direct.probes.insert(
        Role::Allocate,
        Attachment::Direct {
            mode: Mode::Fentry,
            functions: vec!["alloc_fd".into()],
        },
    );
    direct.modes = Recording::modes_text(&direct.probes);
    direct.stack_walks = StackWalks {
        walked: 40,
        reused: 600,
        refresh_every: 16,
        ..Default::default()
    };
    direct.target = Target {
        kind: TargetKind::Command,
        pid: Some(9),
        pids: Vec::new(),
        children: false,
        cgroups: Vec::new(),
        tid: None,
        command: vec!["/usr/bin/server".into(), "--threads".into(), "8".into()],
        comm: None,
        exit_status: None,
        threads: None,
    };
    direct.functions = ["alloc", "close", "expand", "other"]
        .iter()
        .map(|op| FunctionStats {
            operation: testdata::operation(op),
            calls: 1000,
            expanded: 3,
            duration: hist(&[(500, 900), (90_000, 100)]),
            hold: hist(&[(200, 1000)]),
            slowpath_wait: hist(&[(0, 1), (u64::MAX, 1)]),
            unpaired: 1,
        })
        .collect();
    for s in &mut direct.contention {
        for f in &mut s.kernel_stack {
            f.address = Some(0xffff_ffff_8100_0000 + f.offset);
        }
    }

    let mut lock_only = base.clone();
    lock_only.probes.insert(Role::FdSyscalls, Attachment::Off);
    lock_only.modes = Recording::modes_text(&lock_only.probes);
    lock_only.target = Target {
        kind: TargetKind::All,
        pid: None,
        pids: Vec::new(),
        children: false,
        cgroups: Vec::new(),
        tid: None,
        command: vec![],
        comm: None,
        exit_status: None,
        threads: None,
    };

    let mut many = base.clone();
    many.contention = (0..60).map(|i| deep_site(i, 1 + i % 12)).collect();

    // `record --interval`: a series for the mutations to reach.
    let mut series = base.clone();
    series.series = Some(Series {
        interval_ns: 1_000_000_000,
        samples: (0..4u64)
            .map(|i| Sample {
                start_ns: i * 1_000_000_000,
                duration_ns: 1_000_000_000,
                waits: vec![SampleWaits {
                    lock_name: None,
                    lock: LockKind::FileLock,
                    operation: testdata::operation("close"),
                    count: 10 * i,
                    total_wait_ns: 5_000 * i,
                    max_wait_ns: 900,
                }],
                syscalls: vec![SampleSyscall {
                    name: "socket".into(),
                    calls: 1000 + i,
                    errors: i,
                }],
                allocations: 1000 + i,
                next_fd_hits: 990,
                max_fds: 256,
                expansions: i % 2,
                drops: i / 3,
            })
            .collect(),
    });

    [base, direct, lock_only, many, series]
        .iter()
        .map(|r| serde_json::to_value(r).unwrap())
        .collect()
}

/// The test recording as compact JSON, with `f` applied.
pub fn doc_with(f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut doc = serde_json::to_value(testdata::recording()).unwrap();
    f(&mut doc);
    serde_json::to_vec(&doc).unwrap()
}

/// A minimal frame, as small as JSON allows.
pub fn tiny_frame() -> Value {
    json!({"function": "", "offset": 0})
}

/// A fixed case: its name and how to make it (only when it runs).
pub type Case = (String, Box<dyn Fn() -> Vec<u8>>);

pub fn fixed_cases() -> Vec<Case> {
    let mut cases: Vec<Case> = Vec::new();
    let mut add = |name: String, make: Box<dyn Fn() -> Vec<u8>>| cases.push((name, make));
    for text in [
        "",
        " \n",
        "null",
        "[]",
        "{}",
        "1",
        "\"fdprof-recording\"",
        "{\"format\":\"fdprof-recording\",\"version\":1}",
        "{\"format\":\"fdprof-recording\",\"version\":1,\"format\":\"x\"}",
    ] {
        add(format!("document {text:?}"), Box::new(move || text.into()));
    }
    for version in [
        "\"1\"",
        "1.0",
        "-1",
        "null",
        "18446744073709551616",
        "2",
        "[[[[1]]]]",
    ] {
        add(
            format!("version {version}"),
            Box::new(move || {
                recording_text()
                    .replacen("\"version\":1", &format!("\"version\":{version}"), 1)
                    .into()
            }),
        );
    }
    const DEEP: usize = 100_000;
    add(format!("{DEEP} ["), Box::new(|| "[".repeat(DEEP).into()));
    add(
        format!("{DEEP} nested arrays"),
        Box::new(|| format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP)).into()),
    );
    add(
        format!("{DEEP} nested arrays in an unknown field"),
        Box::new(|| {
            recording_text()
                .replacen(
                    '{',
                    &format!("{{\"x\":{}{},", "[".repeat(DEEP), "]".repeat(DEEP)),
                    1,
                )
                .into()
        }),
    );
    add(
        format!("{DEEP} nested objects as the version"),
        Box::new(|| {
            let nested = format!("{}1{}", "{\"a\":".repeat(DEEP), "}".repeat(DEEP));
            recording_text()
                .replacen("\"version\":1", &format!("\"version\":{nested}"), 1)
                .into()
        }),
    );
    add(
        format!("{DEEP} nested arrays as a frame"),
        Box::new(|| {
            let nested = format!("{}{}", "[".repeat(DEEP), "]".repeat(DEEP));
            recording_text()
                .replacen(
                    "\"kernel_stack\":[",
                    &format!("\"kernel_stack\":[{nested},"),
                    1,
                )
                .into()
        }),
    );

    // Each bound reached (read) and passed (refused).
    for n in [bounded::SLOTS, bounded::SLOTS + 1, 1_000_000] {
        add(
            format!("{n} slots of u64::MAX"),
            Box::new(move || {
                doc_with(|d| {
                    d["contention"][0]["wait"]["slots"] = Value::Array(vec![json!(u64::MAX); n]);
                    d["scan"]["bits"]["slots"] = Value::Array(vec![json!(u64::MAX); n.min(65)]);
                    d["scan"]["bits"]["count"] = json!(u64::MAX);
                })
            }),
        );
    }
    for n in [bounded::FRAMES, bounded::FRAMES + 1] {
        add(
            format!("{n} frames"),
            Box::new(move || {
                doc_with(|d| {
                    d["contention"][1]["user_stack"] = Value::Array(vec![tiny_frame(); n]);
                })
            }),
        );
    }
    for n in [bounded::SITES, bounded::SITES + 1] {
        add(
            format!("{n} sites"),
            Box::new(move || {
                doc_with(|d| {
                    let site = d["contention"][3].clone();
                    d["contention"] = Value::Array(vec![site; n]);
                })
            }),
        );
    }
    add(
        format!("{} sites, each its own lock and operation", bounded::SITES),
        Box::new(|| {
            doc_with(|d| {
                let site = d["contention"][3].clone();
                d["contention"] = (0..bounded::SITES)
                    .map(|i| {
                        let mut s = site.clone();
                        s["lock"] = json!(format!("lock{i}"));
                        s["operation"] = json!(format!("op{i}"));
                        s
                    })
                    .collect();
            })
        }),
    );
    for (field, n) in [
        ("syscalls", bounded::SYSCALLS),
        ("functions", bounded::FUNCTIONS),
        ("drops", bounded::DROPS),
        ("notes", bounded::NOTES),
    ] {
        for n in [n, n + 1] {
            add(
                format!("{n} {field}"),
                Box::new(move || {
                    doc_with(|d| {
                        let one = match field {
                            "functions" => serde_json::to_value(FunctionStats {
                                operation: testdata::operation("alloc"),
                                calls: u64::MAX,
                                ..Default::default()
                            })
                            .unwrap(),
                            "notes" => json!("a note"),
                            _ => d[field][0].clone(),
                        };
                        d[field] = Value::Array(vec![one; n]);
                    })
                }),
            );
        }
    }
    for n in [bounded::PROGRAMS, bounded::PROGRAMS + 1] {
        add(
            format!("{n} programs"),
            Box::new(move || {
                doc_with(|d| {
                    let one = d["own_cost"]["programs"][0].clone();
                    d["own_cost"]["programs"] = Value::Array(vec![one; n]);
                })
            }),
        );
    }
    for n in [bounded::MODES, bounded::MODES + 1] {
        add(
            format!("{n} modes"),
            Box::new(move || {
                doc_with(|d| {
                    d["modes"] = (0..n)
                        .map(|i| (format!("role{i}"), json!("fentry")))
                        .collect();
                })
            }),
        );
    }
    for n in [bounded::ARG_WORDS, bounded::ARG_WORDS + 1] {
        add(
            format!("{n} command-line words"),
            Box::new(move || {
                let words = format!("[{}]", vec!["\"\""; n].join(","));
                let doc = doc_with(|d| {
                    d["target"]["kind"] = json!("command");
                    d["target"]["command"] = json!("@@WORDS@@");
                });
                String::from_utf8(doc)
                    .unwrap()
                    .replace("\"@@WORDS@@\"", &words)
                    .into_bytes()
            }),
        );
    }
    for (name, bytes, at) in [
        (
            "function",
            bounded::FUNCTION_BYTES,
            "/contention/0/kernel_stack/0/function",
        ),
        (
            "module",
            bounded::PATH_BYTES,
            "/contention/0/user_stack/0/module",
        ),
        ("lock", bounded::NAME_BYTES, "/contention/0/lock"),
        ("comm", bounded::NAME_BYTES, "/target/comm"),
        ("note", bounded::TEXT_BYTES, "/notes/0"),
        ("origin", bounded::TEXT_BYTES, "/scan/origin"),
        ("command word", bounded::ARG_BYTES, "/target/command"),
    ] {
        for n in [bytes, bytes + 1] {
            add(
                format!("{name} of {n} bytes"),
                Box::new(move || {
                    let text = json!("é".repeat(n / 2) + &"x".repeat(n % 2));
                    doc_with(|d| {
                        if name == "command word" {
                            d["target"]["kind"] = json!("command");
                            d["target"]["command"] = json!([text]);
                        } else {
                            *d.pointer_mut(at).unwrap() = text;
                        }
                    })
                }),
            );
        }
    }

    // Overflowing sums: every u64 at u64::MAX, in every site, merged.
    add(
        "u64::MAX everywhere".into(),
        Box::new(|| doc_with(max_numbers)),
    );

    // The largest file read is drawn by `fdprof` itself (below): it takes ~20 s here.
    add(
        "one byte over the size bound".into(),
        Box::new(|| {
            let mut doc = recording_text().into_bytes();
            doc.resize(MAX_BYTES as usize + 1, b' ');
            doc
        }),
    );
    cases
}

/// The test recording as compact JSON.
pub fn recording_text() -> String {
    serde_json::to_string(&testdata::recording()).unwrap()
}

/// A valid recording as close to [`MAX_BYTES`] as sites of full stacks of minimal frames get,
/// every site's stacks distinct from their outermost frame on, so nothing merges: the most
/// frames a file of that size holds, and the most a flamegraph may have to draw.
pub fn biggest() -> Vec<u8> {
    let mut rec = testdata::recording();
    rec.contention.clear();
    let text = serde_json::to_string(&rec).unwrap();
    let (head, tail) = text.split_once("\"contention\":[]").unwrap();
    let frames = vec!["{\"function\":\"\",\"offset\":0}"; bounded::FRAMES - 1].join(",");
    let mut doc = format!("{head}\"contention\":[").into_bytes();
    let mut i = 0;
    while doc.len() + 2 * frames.len() + 400 + tail.len() < MAX_BYTES as usize {
        if i > 0 {
            doc.push(b',');
        }
        doc.extend_from_slice(
            format!(
                "{{\"lock\":\"file_lock\",\"operation\":\"alloc\",\"kernel_stack\":[{frames}],\
                 \"user_stack\":[{frames},{{\"function\":\"u{i}\",\"offset\":0}}],\"count\":1,\
                 \"total_wait_ns\":1,\"max_wait_ns\":1,\
                 \"wait\":{{\"slots\":[0,1],\"count\":1,\"sum\":1,\"max\":1}}}}"
            )
            .as_bytes(),
        );
        i += 1;
    }
    doc.extend_from_slice(format!("]{tail}").as_bytes());
    doc
}
