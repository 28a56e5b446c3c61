//! `fdprof export` and `flamegraph --diff` on real recordings, read by the real tools: Go's
//! `go tool pprof`, the schema the `speedscope` npm package ships (checked by Python's
//! jsonschema) and inferno's differential flamegraph.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::common::*;
use serde_json::Value;

/// `fdprof record -o OUT -- fdprof workload opensock -t THREADS -d 2s`.
fn record_opensock(threads: &str, name: &str) -> PathBuf {
    require_root();
    let _guard = kernel_lock();
    let out = tmp(name);
    let recorded = run(fdprof()
        .arg("record")
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_fdprof"))
        .args(["workload", "opensock", "-t", threads, "-d", "2s"])
        .stdout(Stdio::null()));
    assert!(recorded.status.success(), "record failed");
    assert_no_programs_left();
    out
}

/// Two threads contending on their file_lock, in both the allocator and the close path,
/// recorded once for every test here (the scheduler decides how often they collide: a few
/// tries at most).
fn two_threads() -> &'static Path {
    static REC: OnceLock<PathBuf> = OnceLock::new();
    REC.get_or_init(|| {
        for _ in 0..4 {
            let rec = record_opensock("2", "opensock-t2.data");
            let report = run(fdprof().args(["report", "--json"]).arg(&rec));
            let report: Value = serde_json::from_slice(&report.stdout).unwrap();
            let waited = |op: &str| {
                report["contention"]["by_lock_operation"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| r["lock_kind"] == "file_lock" && r["operation"] == op)
            };
            if waited("alloc") && waited("close") {
                return rec;
            }
        }
        panic!("opensock -t 2 never waited for its file_lock in both alloc and close in 4 runs");
    })
}

fn export(rec: &Path, args: &[&str], out: &Path) {
    let done = run(fdprof()
        .arg("export")
        .arg(rec)
        .args(args)
        .arg("-o")
        .arg(out));
    assert!(
        done.status.success(),
        "export {args:?} failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
}

#[test]
fn pprof_lock_profile_is_read_by_go_tool_pprof() {
    let rec = two_threads();
    let file = tmp("t2.pb.gz");
    export(rec, &["--format", "pprof"], &file);

    let top = go_pprof(&["-top", "-sample_index=delay", "-nodecount=1000"], &file);
    assert!(top.contains("Type: delay"), "{top}");
    assert!(top.contains(" alloc_fd\n"), "no alloc_fd in:\n{top}");
    assert!(
        ["file_close_fd", "close_fd", "__close_fd"]
            .iter()
            .any(|f| top.contains(&format!(" {f}\n"))),
        "no close function in:\n{top}"
    );

    // The total delay is the report's total wait, to the nanosecond.
    let raw = go_pprof(&["-raw"], &file);
    assert!(raw.contains("contentions/count delay/nanoseconds"), "{raw}");
    let report = run(fdprof().args(["report", "--json"]).arg(rec));
    assert!(report.status.success());
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let contention = &report["contention"];
    let totals = raw_totals(&raw);
    assert_eq!(
        totals,
        [
            contention["count"].as_u64().unwrap(),
            contention["total_wait_ns"].as_u64().unwrap()
        ]
    );
    assert!(totals[1] > 0, "no lock wait recorded");
    assert!(raw.contains("lock:[file_lock] operation:[alloc]"), "{raw}");
    // No kernel address leaves the machine.
    assert!(!raw.contains("0xffff"), "{raw}");

    // --lock file_lock keeps only the target's own lock.
    let file_lock = tmp("t2-file-lock.pb.gz");
    export(
        rec,
        &["--format", "pprof", "--lock", "file_lock"],
        &file_lock,
    );
    let totals = raw_totals(&go_pprof(&["-raw"], &file_lock));
    assert_eq!(totals[1], contention["file_lock_wait_ns"].as_u64().unwrap());
}

#[test]
fn pprof_cpu_profile_is_read_by_go_tool_pprof() {
    let rec = tmp("cpu.data");
    std::fs::write(
        &rec,
        serde_json::to_vec(&fdprof_recording::testdata::cpu_recording()).unwrap(),
    )
    .unwrap();
    let file = tmp("cpu.pb.gz");
    export(&rec, &["--format", "pprof", "--cpu"], &file);
    let raw = go_pprof(&["-raw"], &file);
    assert!(raw.contains("PeriodType: cpu nanoseconds"), "{raw}");
    assert!(raw.contains("samples/count cpu/nanoseconds"), "{raw}");
    // 10 samples at 99 Hz.
    assert_eq!(raw_totals(&raw), [10, 10 * (1_000_000_000 / 99)]);
    let top = go_pprof(&["-top", "-sample_index=cpu"], &file);
    assert!(
        top.contains(" alloc_fd\n") && top.contains(" main\n"),
        "{top}"
    );
}

#[test]
fn kernel_addresses_leave_only_when_asked_twice() {
    let mut rec = fdprof_recording::testdata::recording();
    rec.raw_addrs = true;
    rec.contention[0].kernel_stack[0].address = Some(0xffff_ffff_8123_4567);
    let file = tmp("raw-addrs.data");
    std::fs::write(&file, serde_json::to_vec(&rec).unwrap()).unwrap();
    let (plain, raw) = (tmp("plain.pb.gz"), tmp("raw.pb.gz"));
    export(&file, &["--format", "pprof"], &plain);
    export(&file, &["--format", "pprof", "--raw-addrs"], &raw);
    assert!(!go_pprof(&["-raw"], &plain).contains("0xffffffff81234567"));
    assert!(go_pprof(&["-raw"], &raw).contains("0xffffffff81234567"));
    // Written as every fdprof file is: 0600.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&raw).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
}

/// The schema shipped by the `speedscope` npm package, installed once under the target dir.
fn speedscope_schema() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("speedscope-npm");
    let schema = dir.join("node_modules/speedscope/dist/release/file-format-schema.json");
    if !schema.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let installed = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg("speedscope@1")
            .status()
            .unwrap_or_else(|e| {
                panic!("cannot run npm ({e}): install npm (cargo xtask bootstrap)")
            });
        assert!(installed.success(), "npm install speedscope failed");
    }
    assert!(schema.exists(), "speedscope ships no {}", schema.display());
    schema
}

/// Python's jsonschema on `doc`: `Ok` or the validator's message. Debian's python3, whose
/// jsonschema the bootstrap installs, not whichever python3 comes first on PATH.
fn validate(schema: &Path, doc: &Path) -> Result<(), String> {
    const CHECK: &str = "import json, sys, jsonschema\n\
        schema = json.load(open(sys.argv[1]))\n\
        jsonschema.validators.validator_for(schema).check_schema(schema)\n\
        try:\n    jsonschema.validate(json.load(open(sys.argv[2])), schema)\n\
        except jsonschema.ValidationError as e:\n    sys.exit(e.message)\n";
    let out = run(Command::new("/usr/bin/python3")
        .args(["-c", CHECK])
        .arg(schema)
        .arg(doc));
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

#[test]
fn speedscope_files_follow_speedscopes_schema() {
    let schema = speedscope_schema();
    let file = tmp("t2.speedscope.json");
    export(two_threads(), &["--format", "speedscope"], &file);
    assert_eq!(validate(&schema, &file), Ok(()));
    let doc: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    let names: Vec<&str> = doc["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["unit"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["none", "nanoseconds"]);

    // The validator does reject what breaks the schema.
    let mut broken = doc.clone();
    broken["profiles"][0]["unit"] = "fortnights".into();
    let broken_file = tmp("broken.speedscope.json");
    std::fs::write(&broken_file, serde_json::to_vec(&broken).unwrap()).unwrap();
    assert!(validate(&schema, &broken_file).is_err());

    // A CPU profile too.
    let rec = tmp("cpu-speedscope.data");
    std::fs::write(
        &rec,
        serde_json::to_vec(&fdprof_recording::testdata::cpu_recording()).unwrap(),
    )
    .unwrap();
    let cpu = tmp("cpu.speedscope.json");
    export(&rec, &["--format", "speedscope", "--cpu"], &cpu);
    assert_eq!(validate(&schema, &cpu), Ok(()));
}

#[test]
fn folded_export_is_flamegraphs_folded() {
    let rec = two_threads();
    let file = tmp("t2.folded");
    export(rec, &["--format", "folded", "--lock", "file_lock"], &file);
    let flamegraph = run(fdprof()
        .arg("flamegraph")
        .arg(rec)
        .args(["--folded", "-o", "-"]));
    assert!(flamegraph.status.success());
    let exported = std::fs::read(&file).unwrap();
    assert!(!exported.is_empty());
    assert_eq!(exported, flamegraph.stdout);

    // On-CPU samples too: the same lines as `flamegraph --cpu --folded`.
    let cpu_rec = tmp("cpu-folded.data");
    std::fs::write(
        &cpu_rec,
        serde_json::to_vec(&fdprof_recording::testdata::cpu_recording()).unwrap(),
    )
    .unwrap();
    let cpu_file = tmp("cpu.folded");
    export(&cpu_rec, &["--format", "folded", "--cpu"], &cpu_file);
    let flamegraph = run(fdprof()
        .arg("flamegraph")
        .arg(&cpu_rec)
        .args(["--cpu", "--folded", "-o", "-"]));
    assert!(flamegraph.status.success());
    let exported = std::fs::read(&cpu_file).unwrap();
    assert!(!exported.is_empty());
    assert_eq!(exported, flamegraph.stdout);
}

/// An SVG frame: its name, its place (fg:x, fg:w in ns; y, up is smaller) and fill.
struct Drawn {
    name: String,
    x: u64,
    w: u64,
    y: f64,
    fill: String,
}

fn drawn_frames(svg: &str) -> Vec<Drawn> {
    const FG: &str = "http://github.com/jonhoo/inferno";
    let doc = parse_svg(svg);
    doc.descendants()
        .filter(|n| n.has_tag_name("rect") && n.attribute((FG, "w")).is_some())
        .map(|rect| {
            let title = rect
                .parent()
                .unwrap()
                .children()
                .find(|c| c.has_tag_name("title"))
                .and_then(|t| t.text())
                .unwrap_or_default();
            Drawn {
                name: title.split(" (").next().unwrap().to_string(),
                x: rect.attribute((FG, "x")).unwrap().parse().unwrap(),
                w: rect.attribute((FG, "w")).unwrap().parse().unwrap(),
                y: rect.attribute("y").unwrap().parse().unwrap(),
                fill: rect.attribute("fill").unwrap().to_string(),
            }
        })
        .collect()
}

/// Whether `child` is drawn right on top of `parent`.
fn on_top_of(child: &Drawn, parent: &Drawn) -> bool {
    child.y < parent.y
        && parent.y - child.y < 20.0
        && child.x >= parent.x
        && child.x + child.w <= parent.x + parent.w
}

#[test]
fn differential_flamegraph_shows_the_slow_path_grow() {
    let old = record_opensock("1", "opensock-t1.data");
    let new = two_threads();
    let file = tmp("diff.svg");
    let drawn = run(fdprof()
        .arg("flamegraph")
        .arg(new)
        .arg("--diff")
        .arg(&old)
        .arg("-o")
        .arg(&file));
    assert!(
        drawn.status.success(),
        "{}",
        String::from_utf8_lossy(&drawn.stderr)
    );
    let svg = std::fs::read_to_string(&file).unwrap();
    let frames = drawn_frames(&svg);
    // inferno colours a frame that grew red (rgb(255,c,c)) and one that shrank blue.
    let grew = |f: &Drawn| f.fill.starts_with("rgb(255,") && f.fill != "rgb(255,255,255)";
    let found = frames.iter().filter(|a| a.name == "alloc_fd").any(|alloc| {
        frames
            .iter()
            .filter(|l| l.name == "_raw_spin_lock" && on_top_of(l, alloc))
            .any(|lock| {
                frames.iter().any(|slow| {
                    slow.name.contains("spin_lock_slowpath") && on_top_of(slow, lock) && grew(slow)
                })
            })
    });
    assert!(
        found,
        "no grown slow path on _raw_spin_lock under alloc_fd in {}",
        file.display()
    );
    assert!(svg.contains("differential"));
}

/// Runs `fdprof ARGS` expecting failure; returns its one line of error.
fn one_line_error(args: &[&std::ffi::OsStr]) -> String {
    let out = run(fdprof().args(args));
    assert!(!out.status.success(), "{args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn bad_input_is_one_clear_line() {
    let os = |s: &str| std::ffi::OsString::from(s);
    // A recording without CPU samples.
    let rec = tmp("no-cpu.data");
    std::fs::write(
        &rec,
        serde_json::to_vec(&fdprof_recording::testdata::recording()).unwrap(),
    )
    .unwrap();
    let out = tmp("no-cpu.pb.gz");
    let err = one_line_error(&[
        "export".as_ref(),
        rec.as_os_str(),
        "--format".as_ref(),
        "pprof".as_ref(),
        "--cpu".as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
    ]);
    assert!(err.contains("has no on-CPU samples"), "{err}");
    assert!(!out.exists());

    // Corrupt recordings, refused as `report` refuses them.
    let bad = tmp("truncated.data");
    std::fs::write(
        &bad,
        b"{\"format\": \"fdprof-recording\", \"version\": 2, \"kern",
    )
    .unwrap();
    for format in ["pprof", "speedscope", "folded"] {
        let err = one_line_error(&[
            "export".as_ref(),
            bad.as_os_str(),
            "--format".as_ref(),
            format.as_ref(),
            "-o".as_ref(),
            os("-").as_os_str(),
        ]);
        let report = one_line_error(&["report".as_ref(), bad.as_os_str()]);
        assert_eq!(err, report);
        assert!(err.contains("truncated or corrupt"), "{err}");
    }

    // -o through a symbolic link.
    let target = tmp("victim");
    std::fs::write(&target, "keep").unwrap();
    let link = tmp("link.pb.gz");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = one_line_error(&[
        "export".as_ref(),
        rec.as_os_str(),
        "--format".as_ref(),
        "pprof".as_ref(),
        "-o".as_ref(),
        link.as_os_str(),
    ]);
    assert!(err.contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
}

/// `export --format otlp` is one request the official Python package reads: its waits and
/// wait time are the report's exactly, all of them the workload's own process (its pid, as the
/// recording's target names it), the resource this host, every dictionary table with its zero
/// entry first.
#[test]
fn otlp_export_is_read_by_opentelemetry_proto_with_the_reports_totals() {
    let rec = two_threads();
    let out = tmp("opensock-t2.otlp.pb");
    export(rec, &["--format", "otlp"], &out);
    let got = crate::common::otlp::decode(&[&out]);
    let report = run(fdprof().args(["report", "--json"]).arg(rec));
    let report: Value = serde_json::from_slice(&report.stdout).unwrap();
    let contention = &report["contention"];
    assert_eq!(got["totals"]["contentions/count"], contention["count"]);
    assert_eq!(
        got["totals"]["delay/nanoseconds"],
        contention["total_wait_ns"]
    );
    let pid = report["target"]["pid"]
        .as_u64()
        .expect("a recording of one command");
    let by_pid = got["by_pid"].as_object().unwrap();
    assert_eq!(
        by_pid.keys().collect::<Vec<_>>(),
        [&pid.to_string()],
        "{got}"
    );
    assert_eq!(got["names"][pid.to_string()], "fdprof");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(got["resource"]["host.name"], host.trim());
    assert_eq!(got["zero_first"], true);
}
