//! `fdprof flamegraph`: the folded stacks drawn as an SVG by inferno, frame widths in ns of wait.

use std::collections::BTreeMap;

use anyhow::{Context, Result};
use inferno::flamegraph::{self, Options};

use super::human::duration;
use crate::analysis::{Folded, LockFilter, OpFilter, Weight};

/// Frames drawn at most. Each costs ~200 bytes of SVG and more could not be told apart: past
/// this, frames too narrow to keep the count under it are left out, as inferno leaves out
/// those under 0.01% of the width already.
const MAX_DRAWN: usize = 50_000;
/// Characters of a frame name drawn, tooltip included (the folded stacks keep names whole).
const LABEL_CHARS: usize = 256;

/// The title drawn at the top of the graph.
pub(crate) fn title(graph: &Folded) -> String {
    let (opts, header) = (&graph.options, &graph.header);
    let what = match (graph.weight, opts.lock) {
        (Weight::Samples, _) => "on-CPU samples",
        (Weight::WaitNs, LockFilter::FileLock) => "file_lock wait",
        (Weight::WaitNs, LockFilter::All) => "lock wait (all locks)",
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
        header.mode
    )
}

/// `op=alloc, lock=file_lock`, for titles and messages.
fn describe_filter(graph: &Folded) -> String {
    let opts = &graph.options;
    match graph.weight {
        Weight::Samples => format!("op={}", opts.op.as_str()),
        Weight::WaitNs => format!("op={}, lock={}", opts.op.as_str(), opts.lock.as_str()),
    }
}

/// A weight as people read it: a duration of wait, or a number of samples.
fn amount(graph: &Folded, weight: u64) -> String {
    match graph.weight {
        Weight::WaitNs => duration(weight),
        Weight::Samples => format!("{weight} samples"),
    }
}

/// inferno's name for the unit of the weights.
fn count_name(graph: &Folded) -> String {
    match graph.weight {
        Weight::WaitNs => "ns",
        Weight::Samples => "samples",
    }
    .into()
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
        "filter {} · width = {}, {} in total · {drops}",
        describe_filter(graph),
        match graph.weight {
            Weight::WaitNs => "wait time",
            Weight::Samples => "samples",
        },
        amount(graph, graph.total_weight)
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
        return Err(nothing_to_draw(graph));
    }
    let stacks = short_stacks(graph);
    let shift = fitting_shift(total(&stacks));
    let weighted: Vec<(&str, u64)> = stacks
        .iter()
        .map(|(stack, &ns)| (stack.as_str(), ns >> shift))
        .collect();
    let min_width = min_width(&weighted, Options::default().min_width);
    let lines: Vec<String> = weighted
        .iter()
        .map(|(stack, ns)| format!("{stack} {ns}"))
        .collect();

    let mut options = Options::default();
    options.title = title(graph);
    options.subtitle = Some(subtitle(graph));
    options.count_name = count_name(graph);
    // Colours from function names only, so the same recording always draws the same SVG.
    options.deterministic = true;
    // The stacks come sorted.
    options.no_sort = true;
    options.min_width = min_width;
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

/// The error for a graph with no stack: one line naming the filter.
fn nothing_to_draw(graph: &Folded) -> anyhow::Error {
    match graph.weight {
        Weight::WaitNs => anyhow::anyhow!(
            "nothing to draw: no lock waits match the filter {} (the recording has {} \
             contention sites with {} of wait in all)",
            describe_filter(graph),
            graph.recording_sites,
            amount(graph, graph.recording_weight)
        ),
        Weight::Samples => anyhow::anyhow!(
            "nothing to draw: no on-CPU samples match the filter {} (the recording has {})",
            describe_filter(graph),
            amount(graph, graph.recording_weight)
        ),
    }
}

/// The graph's stacks with long names cut for drawing; stacks that become the same merge.
fn short_stacks(graph: &Folded) -> BTreeMap<String, u64> {
    let mut stacks: BTreeMap<String, u64> = BTreeMap::new();
    for s in &graph.stacks {
        let weight = stacks.entry(short_labels(&s.stack)).or_default();
        *weight = weight.saturating_add(s.weight);
    }
    stacks
}

fn total(stacks: &BTreeMap<String, u64>) -> u128 {
    stacks.values().map(|&ns| u128::from(ns)).sum()
}

/// inferno adds the weights up in a u64: the halvings that make a `total` fit.
fn fitting_shift(total: u128) -> u32 {
    (128 - total.leading_zeros()).saturating_sub(64)
}

/// Two-column folded stacks (`stack old_ns new_ns`, sorted): inferno's differential form of
/// `new` against `old`.
pub fn diff_folded(new: &Folded, old: &Folded) -> Result<String> {
    if new.stacks.is_empty() {
        return Err(nothing_to_draw(new));
    }
    let (new, old) = (short_stacks(new), short_stacks(old));
    let shift = fitting_shift(total(&new).max(total(&old)));
    let lines = |stacks: &BTreeMap<String, u64>| -> String {
        stacks
            .iter()
            .map(|(stack, ns)| format!("{stack} {}\n", ns >> shift))
            .collect()
    };
    let mut out = Vec::new();
    let (old, new) = (lines(&old), lines(&new));
    inferno::differential::from_readers(
        Default::default(),
        old.as_bytes(),
        new.as_bytes(),
        &mut out,
    )
    .context("cannot compare the stacks")?;
    let text = String::from_utf8(out).context("cannot compare the stacks")?;
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    Ok(lines.iter().map(|l| format!("{l}\n")).collect())
}

/// A differential flamegraph: `new`'s waits, each frame coloured by how its wait changed since
/// `old` (red: more, blue: less, by the same filter). Where `new` has none, `old`'s waits, all
/// blue: what went away.
pub fn diff_svg(new: &Folded, old: &Folded) -> Result<Vec<u8>> {
    let gone = new.stacks.is_empty() && !old.stacks.is_empty();
    let mut options = Options::default();
    let lines = if gone {
        // Drawn in the old profile's shape: its deltas negated back to "less".
        options.negate_differentials = true;
        diff_folded(old, new)?
    } else {
        diff_folded(new, old)?
    };
    options.title = format!("{} — differential", title(new));
    options.subtitle = Some(if gone {
        format!(
            "{} · none of the {} of {} is left: all blue",
            subtitle(new),
            amount(old, old.total_weight),
            old.header.target.description
        )
    } else {
        format!(
            "{} · red: more than in {} ({}), blue: less",
            subtitle(new),
            old.header.target.description,
            amount(old, old.total_weight)
        )
    });
    options.count_name = count_name(new);
    options.deterministic = true;
    options.no_sort = true;
    options.notes = comment_safe(&format!(
        "fdprof {} differential flamegraph of {} against {}",
        crate::escape::name(&new.header.fdprof_version),
        new.header.target.description,
        old.header.target.description
    ));
    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.lines(), &mut svg)
        .context("cannot draw the differential flamegraph")?;
    Ok(svg)
}

/// A folded stack with every frame name cut to [`LABEL_CHARS`].
fn short_labels(stack: &str) -> String {
    let frames: Vec<String> = stack
        .split(';')
        .map(|f| match f.char_indices().nth(LABEL_CHARS) {
            Some((end, _)) => format!("{}…", &f[..end]),
            None => f.to_string(),
        })
        .collect();
    frames.join(";")
}

/// inferno's `min_width` (a share of the width, in %) for these sorted, weighted stacks:
/// `default`, unless the graph would have more than [`MAX_DRAWN`] frames that wide; then the
/// width that leaves out the narrowest frames (all as narrow as the widest of those left out).
fn min_width(stacks: &[(&str, u64)], default: f64) -> f64 {
    // Each frame's width, merged as inferno merges them: a frame spans the consecutive stacks
    // that share the path to it.
    let mut widths: Vec<u64> = Vec::new();
    let mut open: Vec<(&str, u64)> = Vec::new();
    let mut time = 0u64;
    for &(stack, weight) in stacks {
        let frames: Vec<&str> = stack.split(';').collect();
        let shared = open
            .iter()
            .zip(&frames)
            .take_while(|((open, _), frame)| open == *frame)
            .count();
        for (_, start) in open.drain(shared..) {
            widths.push(time - start);
        }
        open.extend(frames[shared..].iter().map(|&f| (f, time)));
        time = time.saturating_add(weight);
    }
    widths.extend(open.iter().map(|&(_, start)| time - start));
    if widths.len() <= MAX_DRAWN || time == 0 {
        return default;
    }
    // The widest frame left out; inferno leaves out frames narrower than min_width.
    let (_, &mut cut, _) = widths.select_nth_unstable_by(MAX_DRAWN, |a, b| b.cmp(a));
    default.max((cut as f64 + 1.0) * 100.0 / time as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{self, FlamegraphOptions};
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
        assert_eq!(graph.total_weight, 6_000_000);
        assert_eq!(
            subtitle(&graph),
            "filter op=alloc, lock=all · width = wait time, 6.00 ms in total · drops: 3 events \
             lost (see fdprof report)"
        );
    }

    /// Waits of `ns` at two sites whose innermost frames are `a` and `b`.
    fn two_sites(ns: u64, a: &str, b: &str) -> fdprof_recording::Recording {
        let mut rec = testdata::recording();
        rec.contention.truncate(2);
        for (site, name) in rec.contention.iter_mut().zip([a, b]) {
            site.kernel_stack[0].function = name.into();
            site.total_wait_ns = ns;
        }
        rec
    }

    fn svg_of(rec: &fdprof_recording::Recording) -> String {
        let graph = analysis::folded(rec, &FlamegraphOptions::default());
        String::from_utf8(svg(&graph).unwrap()).unwrap()
    }

    #[test]
    fn weights_beyond_u64_are_scaled() {
        let text = svg_of(&two_sites(u64::MAX, "a", "b"));
        assert!(text.contains("fg:w=\"9223372036854775807\""), "halved");
    }

    #[test]
    fn names_ending_in_a_number_are_not_a_second_count() {
        // inferno would read `f 9223372036854775809` as a differential count and overflow.
        let text = svg_of(&two_sites(5, "f 9223372036854775809", "g 1.5"));
        assert!(text.contains("f_9223372036854775809"));
    }

    #[test]
    fn huge_graphs_leave_out_narrow_frames() {
        let names: Vec<String> = (0..9000).map(|i| format!("op;{i};a;b;c;d;e")).collect();
        // 54001 frames: the 6000 of weight 2 and the root are drawn, those of weight 1 not.
        let stacks: Vec<(&str, u64)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.as_str(), if i < 1000 { 2 } else { 1 }))
            .collect();
        assert_eq!(min_width(&stacks, 0.01), 2.0 * 100.0 / 10_000.0);
        // 3001 frames: inferno's default.
        assert_eq!(min_width(&stacks[..500], 0.01), 0.01);
    }

    #[test]
    fn long_names_are_cut_in_the_svg() {
        let long = "x".repeat(LABEL_CHARS + 1);
        assert_eq!(
            short_labels(&format!("op;{long};y")),
            format!("op;{}…;y", "x".repeat(LABEL_CHARS))
        );
        assert_eq!(short_labels("op;y"), "op;y");
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
    fn differential_graphs_colour_what_grew() {
        let old = testdata::recording();
        let mut new = testdata::recording();
        new.contention[0].total_wait_ns *= 10;
        let opts = FlamegraphOptions::default();
        let (old, new) = (analysis::folded(&old, &opts), analysis::folded(&new, &opts));
        let folded = diff_folded(&new, &old).unwrap();
        let grown = folded
            .lines()
            .find(|l| l.ends_with(" 6000000 33000000"))
            .unwrap_or_else(|| panic!("no grown stack in:\n{folded}"));
        assert!(grown.starts_with("alloc;"), "{grown}");
        let svg = String::from_utf8(diff_svg(&new, &old).unwrap()).unwrap();
        assert!(svg.contains("differential"));
        assert!(svg.contains("rgb(255,"), "a red frame");
        assert_eq!(svg.as_bytes(), diff_svg(&new, &old).unwrap().as_slice());
    }

    #[test]
    fn nothing_to_draw_is_one_clear_line() {
        let mut rec = testdata::recording();
        rec.contention.retain(|c| c.lock.name() != "file_lock");
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
