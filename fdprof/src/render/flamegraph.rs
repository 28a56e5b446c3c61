//! `fdprof flamegraph`: the folded stacks drawn as an SVG by inferno, frame widths in ns of wait.

use anyhow::{Context, Result, bail};
use inferno::flamegraph::{self, Options};

use super::human::duration;
use crate::analysis::{FlamegraphOptions, Folded, LockFilter, OpFilter};

/// The title drawn at the top of the graph.
pub fn title(graph: &Folded) -> String {
    let (opts, header) = (&graph.options, &graph.header);
    let what = match opts.lock {
        LockFilter::FileLock => "file_lock wait",
        LockFilter::All => "lock wait (all locks)",
    };
    let ops = match opts.op {
        OpFilter::All => String::new(),
        op => format!(" in {}", op.as_str()),
    };
    // The title is one centred line: keep long command lines from running off the picture.
    let target = &header.target.description;
    let target = if target.chars().count() > 60 {
        format!("{}…", target.chars().take(59).collect::<String>())
    } else {
        target.clone()
    };
    format!(
        "fdprof: {what}{ops} — {target} — {} — {} mode",
        duration(header.duration_ns),
        crate::escape::name(&header.mode)
    )
}

/// `op=alloc, lock=file_lock`, for titles and messages.
fn describe_filter(opts: &FlamegraphOptions) -> String {
    format!("op={}, lock={}", opts.op.as_str(), opts.lock.as_str())
}

/// The line under the title: the filter, the weight and the loss.
fn subtitle(graph: &Folded) -> String {
    let d = &graph.drops;
    let drops = if !d.known {
        "drops: unknown".to_string()
    } else if d.none {
        "drops: none".to_string()
    } else {
        format!("drops: {} events lost (see fdprof report)", d.total)
    };
    format!(
        "filter {} · width = wait time, {} in total · {drops}",
        describe_filter(&graph.options),
        duration(graph.total_wait_ns)
    )
}

/// Text that can stand inside an XML comment, which inferno writes the notes into: XML forbids
/// `--` there and a `-` just before the closing `-->`, and a command line (`record -- cmd`) has
/// both. Such hyphens become U+2010 (‐).
fn comment_safe(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let risky = c == '-' && matches!(chars.peek(), Some('-') | None);
        out.push(if risky { '\u{2010}' } else { c });
    }
    out
}

/// The flamegraph as SVG bytes. Fails with one line naming the filter when no wait matches it.
pub fn svg(graph: &Folded) -> Result<Vec<u8>> {
    if graph.stacks.is_empty() {
        bail!(
            "nothing to draw: no lock waits match the filter {} (the recording has {} contention \
             sites with {} of wait in all)",
            describe_filter(&graph.options),
            graph.recording_sites,
            duration(graph.recording_wait_ns)
        );
    }
    let lines: Vec<String> = graph
        .stacks
        .iter()
        .map(|s| format!("{} {}", s.stack, s.wait_ns))
        .collect();

    let mut options = Options::default();
    options.title = title(graph);
    options.subtitle = Some(subtitle(graph));
    options.count_name = "ns".into();
    // Colours from function names only, so the same recording always draws the same SVG.
    options.deterministic = true;
    // The stacks come sorted.
    options.no_sort = true;
    let header = &graph.header;
    options.notes = comment_safe(&format!(
        "fdprof {} flamegraph of {}; kernel {}",
        crate::escape::name(&header.fdprof_version),
        header.target.description,
        crate::escape::name(&header.kernel_release)
    ));

    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .context("cannot draw the flamegraph")?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis;
    use crate::testdata;

    #[test]
    fn titles_name_the_filter() {
        let rec = testdata::recording();
        let opts = FlamegraphOptions::default();
        assert_eq!(
            title(&analysis::folded(&rec, &opts)),
            "fdprof: file_lock wait — pid 4242 (opensock) — 10.0 s — tracepoint mode"
        );
        let alloc_all = FlamegraphOptions {
            op: OpFilter::Alloc,
            lock: LockFilter::All,
            offsets: false,
        };
        let graph = analysis::folded(&rec, &alloc_all);
        assert_eq!(
            title(&graph),
            "fdprof: lock wait (all locks) in alloc — pid 4242 (opensock) — 10.0 s — tracepoint mode"
        );
        assert_eq!(graph.total_wait_ns, 6_000_000);
        assert_eq!(
            subtitle(&graph),
            "filter op=alloc, lock=all · width = wait time, 6.00 ms in total · drops: 3 events \
             lost (see fdprof report)"
        );
    }

    #[test]
    fn notes_never_break_the_comment() {
        assert_eq!(
            comment_safe("record -- ./a --x -"),
            "record \u{2010}- ./a \u{2010}-x \u{2010}"
        );
        assert_eq!(comment_safe("a-b"), "a-b");
    }

    #[test]
    fn svg_is_drawn_and_deterministic() {
        let rec = testdata::recording();
        let graph = analysis::folded(&rec, &FlamegraphOptions::default());
        let a = svg(&graph).unwrap();
        let text = String::from_utf8(a.clone()).unwrap();
        assert!(text.starts_with("<?xml") || text.starts_with("<svg"));
        assert!(text.contains(&title(&graph)));
        assert!(text.contains("alloc_fd"));
        assert!(text.contains("file_close_fd"));
        assert!(
            !text.contains("tcp_v4_rcv"),
            "spinlock waits are filtered out"
        );
        assert_eq!(a, svg(&graph).unwrap());
    }

    #[test]
    fn nothing_to_draw_is_one_clear_line() {
        let mut rec = testdata::recording();
        rec.contention.retain(|c| c.lock != "file_lock");
        let err = svg(&analysis::folded(&rec, &FlamegraphOptions::default())).unwrap_err();
        let msg = format!("{err:#}");
        assert!(!msg.contains('\n'));
        assert!(msg.starts_with("nothing to draw"), "{msg}");
        assert!(msg.contains("op=all, lock=file_lock"), "{msg}");
        // The spinlock waits are still there for --lock all.
        let all = FlamegraphOptions {
            lock: LockFilter::All,
            ..Default::default()
        };
        assert!(svg(&analysis::folded(&rec, &all)).is_ok());
    }
}
