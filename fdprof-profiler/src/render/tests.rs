//! Folded stacks and flamegraph SVGs on the hand-built recordings of [`crate::testdata`], and
//! what every sink makes of hostile names.

use fdprof_recording::Recording;

use crate::analysis::{self, FlamegraphOptions, LockFilter, OpFilter, ReportOptions};
use crate::testdata;

fn folded(rec: &Recording, opts: &FlamegraphOptions) -> String {
    super::folded(&analysis::folded(rec, opts))
}

fn svg(rec: &Recording, opts: &FlamegraphOptions) -> anyhow::Result<Vec<u8>> {
    super::svg(&analysis::folded(rec, opts))
}

fn text(rec: &Recording, opts: &ReportOptions) -> String {
    super::text(&analysis::report(rec, opts))
}

/// Parses an SVG as XML (inferno writes the SVG 1.1 doctype, so DTDs are allowed), failing the
/// test when it is not well-formed.
fn parse_svg(svg: &str) -> roxmltree::Document<'_> {
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    roxmltree::Document::parse_with_options(svg, opts).expect("the SVG is well-formed XML")
}

#[test]
fn folded_lines_are_exact_and_merged() {
    let rec = testdata::command_recording();
    let folded = folded(&rec, &FlamegraphOptions::default());
    assert_eq!(
        folded,
        "alloc;main;socket;__sys_socket;alloc_fd;_raw_spin_lock;native_queued_spin_lock_slowpath 3000000\n\
         close;main;close;__x64_sys_close;file_close_fd;_raw_spin_lock;native_queued_spin_lock_slowpath 2000000\n"
    );
}

#[test]
fn folded_filters_and_offsets() {
    let rec = testdata::command_recording();
    let all_locks = FlamegraphOptions {
        lock: LockFilter::All,
        ..Default::default()
    };
    let lines = folded(&rec, &all_locks);
    assert_eq!(lines.lines().count(), 3);
    assert!(
        lines.ends_with("other;[unknown];do_epoll_ctl;__mutex_lock 5000000\n"),
        "{lines}"
    );

    let close = FlamegraphOptions {
        op: OpFilter::Close,
        ..Default::default()
    };
    let lines = folded(&rec, &close);
    assert_eq!(lines.lines().count(), 1);
    assert!(lines.starts_with("close;"));

    let alloc_offsets = FlamegraphOptions {
        op: OpFilter::Alloc,
        lock: LockFilter::FileLock,
        offsets: true,
    };
    assert_eq!(
        folded(&rec, &alloc_offsets),
        "alloc;main+0x99;socket+0x7;__sys_socket+0x5a;alloc_fd+0x1f;_raw_spin_lock+0x30;native_queued_spin_lock_slowpath+0x20 1800000\n\
         alloc;main+0x99;socket+0x7;__sys_socket+0x5a;alloc_fd+0x2a;_raw_spin_lock+0x30;native_queued_spin_lock_slowpath+0x20 1200000\n"
    );
}

#[test]
fn svg_has_title_and_fails_clearly_when_empty() {
    let rec = testdata::command_recording();
    let opts = FlamegraphOptions::default();
    let svg_text = String::from_utf8(svg(&rec, &opts).unwrap()).unwrap();
    assert!(
        svg_text.starts_with("<?xml") || svg_text.starts_with("<svg"),
        "{}",
        &svg_text[..80]
    );
    let title = "fdprof: file_lock wait — `server -t 2` (pid 77) — 2.50 s — fentry mode";
    assert_eq!(
        super::flamegraph::title(&analysis::folded(&rec, &opts)),
        title
    );
    assert!(svg_text.contains(title));
    assert!(svg_text.contains("file_close_fd"));
    assert!(svg_text.contains("op=all, lock=file_lock"));
    assert!(svg_text.trim_end().ends_with("</svg>"));
    parse_svg(&svg_text);

    let mut quiet = rec.clone();
    quiet.contention.retain(|c| c.operation.name() != "alloc");
    let alloc = FlamegraphOptions {
        op: OpFilter::Alloc,
        ..Default::default()
    };
    let err = format!("{:#}", svg(&quiet, &alloc).unwrap_err());
    assert!(err.starts_with("nothing to draw"), "{err}");
    assert!(err.contains("op=alloc, lock=file_lock"), "{err}");
    assert!(!err.contains('\n'));
}

#[test]
fn a_written_recording_renders_the_same() {
    let rec = testdata::command_recording();
    let dir = std::env::temp_dir().join(format!("fdprof-render-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("rec.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&rec).unwrap()).unwrap();
    let back = Recording::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let opts = ReportOptions::default();
    assert_eq!(text(&back, &opts), text(&rec, &opts));
    assert_eq!(
        analysis::report(&back, &opts),
        analysis::report(&rec, &opts)
    );
    let f = FlamegraphOptions::default();
    assert_eq!(folded(&back, &f), folded(&rec, &f));
}

/// Names a target chose (comm, command line) and symbols from a recording never reach a
/// terminal raw, and never make the SVG ill-formed: `--` of a command line lands in the SVG's
/// notes comment, control characters are not allowed in XML at all.
#[test]
fn hostile_names_are_escaped_everywhere() {
    let hostile = "\x1b]0;pwn\x07\x1b[2J";
    let mut rec = testdata::command_recording();
    rec.target.comm = Some(hostile.into());
    rec.target.command = vec![
        "./srv".into(),
        "--flag".into(),
        "--".into(),
        format!("{hostile}-"),
        "a&b<c>\"d\"".into(),
    ];
    rec.kernel_release = format!("6.18{hostile}");
    rec.notes.push(format!("note {hostile}"));
    rec.contention[0].kernel_stack[2].function = format!("alloc_fd{hostile}\u{202e}");
    rec.contention[0].user_stack[0].module = Some(format!("/tmp/{hostile}.so"));
    let raw_control = |s: &str| s.chars().any(|c| c.is_control() && c != '\n');

    let text = crate::escape::text(&text(&rec, &ReportOptions::default())).into_owned();
    assert!(!raw_control(&text) && !text.contains('\u{202e}'), "{text}");
    assert!(
        text.contains("alloc_fd\\x1b]0;pwn\\x07\\x1b[2J\\u{202e}"),
        "{text}"
    );
    let json = serde_json::to_string(&analysis::report(&rec, &ReportOptions::default())).unwrap();
    assert!(!raw_control(&json));

    for lock in [LockFilter::FileLock, LockFilter::All] {
        let opts = FlamegraphOptions {
            lock,
            ..Default::default()
        };
        let lines = folded(&rec, &opts);
        assert!(!raw_control(&lines), "{lines}");
        let svg_text = String::from_utf8(svg(&rec, &opts).unwrap()).unwrap();
        assert!(!raw_control(&svg_text));
        let doc = parse_svg(&svg_text);
        let title = doc
            .descendants()
            .find(|n| n.attribute("id") == Some("title"))
            .and_then(|n| n.text())
            .unwrap();
        assert!(title.contains("\\x1b]0;pwn"), "{title}");
    }
}
