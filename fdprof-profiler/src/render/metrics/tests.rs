//! The exposition of the hand-built recordings of [`crate::testdata`], read back sample by sample
//! and checked against the figures, and the real `promtool check metrics`.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use fdprof_common::probes::{Attachment, Role};
use fdprof_figures::{Histogram, Report};
use fdprof_recording::Recording;

use super::{
    Exposition, HttpFigures, MetricsCollector, SCAN_SLOTS, WAIT_SLOTS, encode, encode_text, slot_le,
};
use crate::analysis::{self, ReportOptions};
use crate::testdata;

/// One sample line: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A quoted label value from just after its opening `"`: the value unescaped and the rest
/// after its closing `"`.
fn label_value(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return (value, &text[at + 1..]),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some('n') => value.push('\n'),
                other => panic!("bad escape {other:?} in {text:?}"),
            },
            '\n' => panic!("a raw newline in a label value: {text:?}"),
            c => value.push(c),
        }
    }
    panic!("unterminated label value: {text:?}")
}

/// Every sample of an exposition, in order; comment lines skipped.
fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .map(|line| {
            let name_end = line.find(['{', ' ']).expect("a sample line");
            let name = line[..name_end].to_string();
            let mut rest = &line[name_end..];
            let mut labels = BTreeMap::new();
            if let Some(inner) = rest.strip_prefix('{') {
                rest = inner;
                while !rest.starts_with('}') {
                    let (key, after) = rest.split_once("=\"").expect("key=\"value\"");
                    let (value, after) = label_value(after);
                    assert!(labels.insert(key.to_string(), value).is_none(), "{line}");
                    rest = after.strip_prefix(',').unwrap_or(after);
                }
                rest = &rest[1..];
            }
            let value = rest.strip_prefix(' ').expect("a space before the value");
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("a number: {line}")),
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|&(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The value of the one sample named `name` with exactly `pairs` as labels.
fn value(samples: &[Sample], name: &str, pairs: &[(&str, &str)]) -> f64 {
    let wanted = labels(pairs);
    let found: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.name == name && s.labels == wanted)
        .collect();
    assert_eq!(found.len(), 1, "one {name} {wanted:?}, found {found:?}");
    found[0].value
}

/// `(le, cumulative count)` of the series `name_bucket` with `pairs` besides `le`.
fn buckets(samples: &[Sample], name: &str, pairs: &[(&str, &str)]) -> Vec<(f64, u64)> {
    let wanted = labels(pairs);
    samples
        .iter()
        .filter(|s| s.name == format!("{name}_bucket"))
        .filter_map(|s| {
            let mut rest = s.labels.clone();
            let le = rest.remove("le")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (rest == wanted).then_some((le, s.value as u64))
        })
        .collect()
}

fn report(rec: &Recording) -> Report {
    analysis::report(rec, &ReportOptions::default())
}

/// Two targets from the fixtures; the daemon's figures are the first one's.
fn exposition() -> Exposition {
    let mut opensock = report(&testdata::recording());
    // Run times measured in sampled windows (a recording made without them has none).
    opensock.own_cost.stats_window_ns = 250_000_000;
    Exposition {
        targets: vec![
            ("opensock".into(), opensock.clone()),
            ("server".into(), report(&testdata::command_recording())),
        ],
        daemon: opensock,
        attached: 3,
        full_tracing: true,
        full_tracing_ns: 12_500_000_000,
        http: HttpFigures {
            open: 2,
            refused_limit: 5,
            refused_timeout: 7,
            refused_long_lived: 3,
        },
        captures: vec![("opensock".into(), "shared-table", 2)],
        otlp: None,
    }
}

/// Checks one histogram series against the figures: the fixed bucket set, every cumulative
/// count that of the log2 slots up to its bound, monotone, +Inf equal to the count.
fn check_histogram(
    samples: &[Sample],
    name: &str,
    pairs: &[(&str, &str)],
    histogram: &Histogram,
    last_slot: u32,
    scale: f64,
) {
    let got = buckets(samples, name, pairs);
    let les: Vec<f64> = got.iter().map(|&(le, _)| le).collect();
    let mut want_les: Vec<f64> = (0..=last_slot).map(|s| slot_le(s, scale)).collect();
    want_les.push(f64::INFINITY);
    assert_eq!(les, want_les, "{name} {pairs:?}");
    for (&(le, cumulative), slot) in got.iter().zip(0..) {
        let want: u64 = histogram
            .buckets
            .iter()
            .filter(|b| slot > last_slot || b.high as f64 / scale <= le)
            .map(|b| b.count)
            .sum();
        assert_eq!(cumulative, want, "{name} {pairs:?} le {le}");
    }
    assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "{name} monotone");
    let count = value(samples, &format!("{name}_count"), pairs);
    assert_eq!(got.last().unwrap().1 as f64, count, "{name} +Inf = count");
    assert_eq!(count, histogram.count as f64);
}

#[test]
fn counters_and_gauges_equal_the_figures() {
    let e = exposition();
    let text = encode(e.clone());
    let s = samples(&text);
    for (target, r) in &e.targets {
        assert!(!r.syscalls.is_empty());
        for sc in &r.syscalls {
            let pairs = [("target", target.as_str()), ("syscall", sc.name.as_str())];
            let allocs = value(&s, "fdprof_fd_allocations_total", &pairs);
            assert_eq!(allocs, sc.allocs as f64);
            let closes = value(&s, "fdprof_fd_closes_total", &pairs);
            assert_eq!(closes, sc.fds_closed as f64);
        }
        for row in &r.contention.by_lock_operation {
            let pairs = [
                ("target", target.as_str()),
                ("lock", row.lock.name()),
                ("operation", row.operation.name()),
            ];
            let count = value(&s, "fdprof_lock_contentions_total", &pairs);
            assert_eq!(count, row.count as f64);
            let sum = value(&s, "fdprof_lock_wait_seconds_sum", &pairs);
            assert_eq!(sum, row.total_wait_ns as f64 / 1e9);
        }
        let t = [("target", target.as_str())];
        assert_eq!(
            value(&s, "fdprof_fd_table_size", &t),
            r.table.max_fds_max as f64
        );
        assert_eq!(
            value(&s, "fdprof_fd_table_expansions_total", &t),
            r.table.expansions as f64
        );
        assert_eq!(
            value(&s, "fdprof_alloc_scan_bits_sum", &t),
            r.scan.bits.sum as f64
        );
    }
    // The fixture has the figures these checks rely on.
    let opensock = &e.targets[0].1;
    assert_eq!(opensock.syscalls[0].allocs, 591);
    assert_eq!(opensock.table.max_fds_max, 1024);
    for d in &e.daemon.drops.counters {
        let pairs = [("probe", d.probe.as_str()), ("reason", d.reason.as_str())];
        let dropped = value(&s, "fdprof_events_dropped_total", &pairs);
        assert_eq!(dropped, d.count as f64);
    }
    assert_eq!(e.daemon.drops.total, 3);
    for p in &e.daemon.own_cost.programs {
        let run = value(
            &s,
            "fdprof_program_run_seconds_total",
            &[("program", &p.name)],
        );
        assert_eq!(run, p.run_time_ns as f64 / 1e9);
    }
    assert_eq!(
        value(
            &s,
            "fdprof_program_run_seconds_total",
            &[("program", "contention_begin")]
        ),
        0.002
    );
    assert_eq!(value(&s, "fdprof_collector_cpu_seconds_total", &[]), 0.03);
    assert_eq!(value(&s, "fdprof_targets", &[]), 3.0);
    assert_eq!(value(&s, "fdprof_full_tracing", &[]), 1.0);
    assert_eq!(value(&s, "fdprof_full_tracing_seconds_total", &[]), 12.5);
    assert_eq!(value(&s, "fdprof_http_connections", &[]), 2.0);
    let refused = "fdprof_http_connections_refused_total";
    assert_eq!(value(&s, refused, &[("reason", "limit")]), 5.0);
    assert_eq!(value(&s, refused, &[("reason", "timeout")]), 7.0);
    let long_lived = [("reason", "long_lived")];
    assert_eq!(
        value(&s, "fdprof_http_requests_refused_total", &long_lived),
        3.0
    );
    let captures = [("target", "opensock"), ("rule", "shared-table")];
    assert_eq!(value(&s, "fdprof_captures_total", &captures), 2.0);
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(value(&s, "fdprof_build_info", &version), 1.0);
}

/// Where the kernel's run-time statistics never ran (refused without CAP_SYS_ADMIN), the
/// programs' run times are not measured: no series, rather than zeros.
#[test]
fn unmeasured_run_times_have_no_series() {
    let mut e = exposition();
    e.daemon.own_cost.stats_window_ns = 0;
    let text = encode(e);
    assert!(
        !text.contains("fdprof_program_run_seconds_total{"),
        "{text}"
    );
}

#[test]
fn histogram_buckets_are_the_log2_slots() {
    let e = exposition();
    let s = samples(&encode(e.clone()));
    let mut series = 0;
    for (target, r) in &e.targets {
        for row in &r.contention.by_lock_operation {
            let pairs = [
                ("target", target.as_str()),
                ("lock", row.lock.name()),
                ("operation", row.operation.name()),
            ];
            let name = "fdprof_lock_wait_seconds";
            check_histogram(&s, name, &pairs, &row.wait, WAIT_SLOTS, 1e9);
            assert_eq!(row.wait.count, row.count);
            series += 1;
        }
        let pairs = [("target", target.as_str())];
        let name = "fdprof_alloc_scan_bits";
        check_histogram(&s, name, &pairs, &r.scan.bits, SCAN_SLOTS, 1.0);
    }
    assert!(series >= 6, "{series} wait series");
    // opensock's scans: 590 of distance 0, one of 4000 bits (slot 12: 2048..=4095).
    let scan = buckets(&s, "fdprof_alloc_scan_bits", &[("target", "opensock")]);
    assert_eq!(scan[0], (0.0, 590));
    assert_eq!(scan[11], (2047.0, 590));
    assert_eq!(scan[12], (4095.0, 591));
}

/// A recording whose only lock wait lasted `ns`.
fn one_wait(ns: u64) -> Recording {
    let mut rec = testdata::recording();
    let first = rec.contention.swap_remove(0);
    let stacks = (first.kernel_stack, first.user_stack);
    rec.contention = vec![testdata::site(
        "file_lock",
        "alloc",
        stacks.0,
        stacks.1,
        &[(ns, 1)],
    )];
    rec
}

#[test]
fn a_wait_of_2_to_the_k_ns_is_in_the_bucket_of_its_log2_slot() {
    let pairs = [
        ("target", "t"),
        ("lock", "file_lock"),
        ("operation", "alloc"),
    ];
    for k in 0..WAIT_SLOTS {
        let e = Exposition {
            targets: vec![("t".into(), report(&one_wait(1 << k)))],
            ..Default::default()
        };
        let got = buckets(&samples(&encode(e)), "fdprof_lock_wait_seconds", &pairs);
        let at = |le_ns: u64| {
            got.iter()
                .find(|&&(le, _)| le == le_ns as f64 / 1e9)
                .unwrap_or_else(|| panic!("a bucket le = {le_ns} ns"))
                .1
        };
        // Slot k+1 is [2^k, 2^(k+1) - 1]: the wait is above le = 2^k - 1 ns, not above
        // le = 2^(k+1) - 1 ns.
        assert_eq!(at((1 << k) - 1), 0, "2^{k} ns");
        assert_eq!(at((1 << (k + 1)) - 1), 1, "2^{k} ns");
    }
    // The largest value of a slot is still in it: 2^k - 1 ns is at or below le = 2^k - 1 ns.
    for k in 1..=WAIT_SLOTS {
        let e = Exposition {
            targets: vec![("t".into(), report(&one_wait((1 << k) - 1)))],
            ..Default::default()
        };
        let got = buckets(&samples(&encode(e)), "fdprof_lock_wait_seconds", &pairs);
        let slot = k as usize;
        assert_eq!(got[slot], (slot_le(k, 1e9), 1), "2^{k} - 1 ns");
        assert_eq!(got[slot - 1].1, 0, "2^{k} - 1 ns");
    }
    // Past the last slot: only +Inf.
    let e = Exposition {
        targets: vec![("t".into(), report(&one_wait(1 << WAIT_SLOTS)))],
        ..Default::default()
    };
    let got = buckets(&samples(&encode(e)), "fdprof_lock_wait_seconds", &pairs);
    assert_eq!(got[WAIT_SLOTS as usize].1, 0);
    assert_eq!(*got.last().unwrap(), (f64::INFINITY, 1));
}

#[test]
fn openmetrics_families_are_whole_and_eof_is_last() {
    let text = encode(exposition());
    assert!(text.ends_with("\n# EOF\n"), "{text}");
    assert_eq!(text.matches("# EOF").count(), 1);
    let types: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .collect();
    let mut names: Vec<&str> = types.iter().map(|t| t.split(' ').next().unwrap()).collect();
    let all = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), all, "a family described twice: {types:?}");
    for want in [
        "fdprof_fd_allocations counter",
        "fdprof_fd_closes counter",
        "fdprof_lock_contentions counter",
        "fdprof_lock_wait_seconds histogram",
        "fdprof_alloc_scan_bits histogram",
        "fdprof_fd_table_size gauge",
        "fdprof_fd_table_expansions counter",
        "fdprof_events_dropped counter",
        "fdprof_program_run_seconds counter",
        "fdprof_collector_cpu_seconds counter",
        "fdprof_targets gauge",
        "fdprof_full_tracing gauge",
        "fdprof_full_tracing_seconds counter",
        "fdprof_http_connections gauge",
        "fdprof_http_connections_refused counter",
        "fdprof_http_requests_refused counter",
        "fdprof_captures counter",
        "fdprof_build_info gauge",
    ] {
        assert!(types.contains(&want), "# TYPE {want} in {types:?}");
    }
    assert!(text.contains("# UNIT fdprof_lock_wait_seconds seconds\n"));
    assert!(text.contains("# UNIT fdprof_alloc_scan_bits bits\n"));
    // Every series of a family sits under its descriptor, once.
    let s = samples(&text);
    let mut seen = s.clone();
    seen.dedup_by(|a, b| a.name == b.name && a.labels == b.labels);
    assert_eq!(seen.len(), s.len());
}

#[test]
fn lock_only_targets_have_no_fd_activity_series() {
    let mut rec = testdata::recording();
    rec.probes.insert(Role::FdSyscalls, Attachment::Off);
    let r = report(&rec);
    assert!(!r.fd_activity_recorded);
    let e = Exposition {
        targets: vec![("locks".into(), r)],
        ..Default::default()
    };
    let s = samples(&encode(e));
    let names: Vec<&str> = s
        .iter()
        .filter(|s| s.labels.contains_key("target"))
        .map(|s| s.name.as_str())
        .collect();
    assert!(
        names.iter().all(|n| n.starts_with("fdprof_lock_")),
        "{names:?}"
    );
    assert!(!names.is_empty());
}

/// The daemon's way: one registered collector whose closure reads the state at each scrape.
#[test]
fn the_collector_reads_the_state_at_each_scrape() {
    let state = Arc::new(Mutex::new(exposition()));
    let shared = Arc::clone(&state);
    let registry = MetricsCollector::new(move || shared.lock().unwrap().clone()).into_registry();
    let scrape = || {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        samples(&out)
    };
    assert_eq!(value(&scrape(), "fdprof_targets", &[]), 3.0);
    state.lock().unwrap().attached = 1;
    state.lock().unwrap().targets.truncate(1);
    let s = scrape();
    assert_eq!(value(&s, "fdprof_targets", &[]), 1.0);
    assert!(
        s.iter()
            .all(|s| s.labels.get("target").is_none_or(|t| t == "opensock"))
    );
}

/// Names from figures are untrusted bytes: quotes, backslashes, newlines.
const HOSTILE: &str = "ev\"il\\ comm\nx} 1\n# EOF";

fn hostile_exposition() -> Exposition {
    let mut e = exposition();
    e.targets[1].0 = HOSTILE.into();
    e.daemon.drops.counters[0].probe = HOSTILE.into();
    e.daemon.own_cost.programs[0].name = HOSTILE.into();
    e
}

#[test]
fn hostile_names_are_escaped_in_both_formats() {
    for text in [
        encode(hostile_exposition()),
        encode_text(hostile_exposition()),
    ] {
        let s = samples(&text);
        let server = report(&testdata::command_recording());
        let sc = &server.syscalls[0];
        let pairs = [("target", HOSTILE), ("syscall", sc.name.as_str())];
        assert_eq!(
            value(&s, "fdprof_fd_allocations_total", &pairs),
            sc.allocs as f64
        );
        let pairs = [("probe", HOSTILE), ("reason", "ringbuf_full")];
        assert_eq!(value(&s, "fdprof_events_dropped_total", &pairs), 3.0);
        let pairs = [("program", HOSTILE)];
        assert_eq!(value(&s, "fdprof_program_run_seconds_total", &pairs), 0.002);
        assert!(
            text.contains(r#"target="ev\"il\\ comm\nx} 1\n# EOF""#),
            "{text}"
        );
    }
}

#[test]
fn control_characters_in_label_values_are_escaped_once() {
    let mut e = exposition();
    e.targets[1].0 = "a\x1b]0;pwn\x07b\rc".into();
    e.daemon.own_cost.programs[0].name = "\x1b[2J".into();
    for text in [encode(e.clone()), encode_text(e.clone())] {
        assert!(
            !text.bytes().any(|b| b.is_ascii_control() && b != b'\n'),
            "{text:?}"
        );
        let s = samples(&text);
        let sc = &report(&testdata::command_recording()).syscalls[0];
        let pairs = [
            ("target", r"a\x1b]0;pwn\x07b\x0dc"),
            ("syscall", sc.name.as_str()),
        ];
        assert_eq!(
            value(&s, "fdprof_fd_allocations_total", &pairs),
            sc.allocs as f64
        );
        assert!(text.contains(r#"program="\\x1b[2J""#), "{text}");
    }
}

const PROMTOOL: &str = "/usr/bin/promtool";

/// `promtool check metrics` on `text`: its exit status and what it printed.
fn promtool_check(text: &str) -> (bool, String) {
    let mut child = Command::new(PROMTOOL)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("{PROMTOOL}: {e} (`cargo xtask bootstrap` installs Debian's prometheus)")
        });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said.into_owned())
}

/// promlint reads `_bits` as a data size and asks for bytes; here bits are positions in the fd
/// bitmap (one a fd), the name the brief fixed. Its only complaint.
const PROMTOOL_BITS_LINT: &str =
    "fdprof_alloc_scan_bits use base unit \"bytes\" instead of \"bits\"";

/// The real parser and linter Prometheus ships: it reads the text format 0.0.4, which the same
/// collector writes; it fails without promtool.
#[test]
fn promtool_accepts_the_exposition() {
    let text = encode_text(hostile_exposition());
    let (_, said) = promtool_check(&text);
    assert_eq!(said.trim(), PROMTOOL_BITS_LINT, "promtool on\n{text}");
    // The same check fails on a label value with a raw newline.
    let broken = text.replacen(r"comm\nx", "comm\nx", 1);
    assert_ne!(broken, text);
    let (ok, said) = promtool_check(&broken);
    assert!(!ok && said.contains("parsing error"), "promtool: {said}");
}

/// A system-wide target of `n` processes (pid 1 has the hostile comm and the most wait),
/// and the daemon's steal.
fn system_wide_exposition(n: u32) -> Exposition {
    let mut all = report(&testdata::recording());
    all.processes = (1..=n)
        .map(|pid| fdprof_figures::Process {
            pid,
            comm: if pid == 1 {
                HOSTILE.into()
            } else {
                format!("p{pid}")
            },
            file_lock_wait_ns: u64::from(n - pid) * 1_000_000,
            file_lock_count: u64::from(n - pid),
            fd_syscalls: u64::from(pid),
            allocations: u64::from(pid),
            syscalls: vec![fdprof_figures::Syscall {
                name: "socket".into(),
                calls: u64::from(pid),
                allocs: u64::from(pid),
                ..Default::default()
            }],
            table: Some(fdprof_figures::Table {
                max_fds_max: 64,
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let mut e = exposition();
    e.targets = vec![("all".into(), all)];
    e.daemon.steal = Some(fdprof_figures::Steal {
        steal_ns: 1_500_000_000,
        ..Default::default()
    });
    e
}

#[test]
fn per_process_series_are_bounded_and_labelled_by_pid_and_comm() {
    use super::processes::PROCESS_SERIES;
    // The bound `daemon --help` and docs/daemon.md state (and the daemon's test reads back).
    assert_eq!(PROCESS_SERIES, 20);
    let n = PROCESS_SERIES as u32 + 5;
    for text in [
        encode(system_wide_exposition(n)),
        encode_text(system_wide_exposition(n)),
    ] {
        let s = samples(&text);
        let pids: Vec<&str> = s
            .iter()
            .filter(|s| s.name == "fdprof_process_fd_syscalls_total")
            .map(|s| s.labels["pid"].as_str())
            .collect();
        // The first K by file_lock wait: pids 1..=K; the rest have no series of their own.
        let want: Vec<String> = (1..=PROCESS_SERIES).map(|p| p.to_string()).collect();
        assert_eq!(pids, want);
        let first = [("pid", "1"), ("comm", HOSTILE)];
        assert_eq!(value(&s, "fdprof_process_fd_syscalls_total", &first), 1.0);
        assert_eq!(
            value(&s, "fdprof_process_fd_allocations_total", &first),
            1.0
        );
        let wait = value(&s, "fdprof_process_file_lock_wait_seconds_total", &first);
        assert_eq!(wait, f64::from(n - 1) * 1e-3);
        let second = [("pid", "2"), ("comm", "p2")];
        assert_eq!(
            value(&s, "fdprof_process_file_lock_contentions_total", &second),
            f64::from(n - 2)
        );
        assert_eq!(value(&s, "fdprof_process_fd_table_size", &second), 64.0);
        assert_eq!(
            value(&s, "fdprof_processes", &[("target", "all")]),
            f64::from(n)
        );
        assert_eq!(value(&s, "fdprof_steal_seconds_total", &[]), 1.5);
    }
    // promtool reads it, with no complaint beyond the one it always has.
    let (_, said) = promtool_check(&encode_text(system_wide_exposition(n)));
    assert_eq!(said.trim(), PROMTOOL_BITS_LINT);
}
