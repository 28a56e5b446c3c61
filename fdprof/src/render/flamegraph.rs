//! `fdprof flamegraph`: the folded stacks drawn as an SVG by inferno, frame widths in ns of wait.

use anyhow::{Context, Result, bail};
use inferno::flamegraph::{self, Options};

use super::folded::{FlamegraphOptions, LockFilter, OpFilter, folded_stacks};
use super::human::duration;
use crate::model::recording::Recording;

/// The title drawn at the top of the graph.
pub fn title(rec: &Recording, opts: &FlamegraphOptions) -> String {
    let what = match opts.lock {
        LockFilter::FileLock => "file_lock wait",
        LockFilter::All => "lock wait (all locks)",
    };
    let ops = match opts.op {
        OpFilter::All => String::new(),
        op => format!(" in {op}"),
    };
    // The title is one centred line: keep long command lines from running off the picture.
    let target = rec.target.describe();
    let target = if target.chars().count() > 60 {
        format!("{}…", target.chars().take(59).collect::<String>())
    } else {
        target
    };
    format!(
        "fdprof: {what}{ops} — {target} — {} — {} mode",
        duration(rec.duration_ns),
        rec.mode
    )
}

/// The line under the title: the filter, the weight and the loss.
fn subtitle(rec: &Recording, opts: &FlamegraphOptions, total_ns: u64) -> String {
    let drops = match (rec.drops.is_empty(), rec.total_drops()) {
        (true, _) => "drops: unknown".to_string(),
        (false, 0) => "drops: none".to_string(),
        (false, n) => format!("drops: {n} events lost (see fdprof report)"),
    };
    format!(
        "filter {} · width = wait time, {} in total · {drops}",
        opts.describe_filter(),
        duration(total_ns)
    )
}

/// The flamegraph as SVG bytes. Fails with one line naming the filter when no wait matches it.
pub fn svg(rec: &Recording, opts: &FlamegraphOptions) -> Result<Vec<u8>> {
    let stacks = folded_stacks(rec, opts);
    if stacks.is_empty() {
        let all = rec
            .contention
            .iter()
            .fold(0u64, |sum, c| sum.saturating_add(c.total_wait_ns));
        bail!(
            "nothing to draw: no lock waits match the filter {} (the recording has {} contention \
             sites with {} of wait in all)",
            opts.describe_filter(),
            rec.contention.len(),
            duration(all)
        );
    }
    let total_ns: u64 = stacks.values().sum();
    let lines: Vec<String> = stacks
        .iter()
        .map(|(stack, ns)| format!("{stack} {ns}"))
        .collect();

    let mut options = Options::default();
    options.title = title(rec, opts);
    options.subtitle = Some(subtitle(rec, opts, total_ns));
    options.count_name = "ns".into();
    // Colours from function names only, so the same recording always draws the same SVG.
    options.deterministic = true;
    // Lines come sorted from the BTreeMap.
    options.no_sort = true;
    options.notes = format!(
        "fdprof {} flamegraph of {}; kernel {}",
        rec.fdprof_version,
        rec.target.describe(),
        rec.kernel_release
    );

    let mut svg = Vec::new();
    flamegraph::from_lines(&mut options, lines.iter().map(String::as_str), &mut svg)
        .context("cannot draw the flamegraph")?;
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testdata;

    #[test]
    fn titles_name_the_filter() {
        let rec = testdata::recording();
        let opts = FlamegraphOptions::default();
        assert_eq!(
            title(&rec, &opts),
            "fdprof: file_lock wait — pid 4242 (opensock) — 10.0 s — tracepoint mode"
        );
        let alloc_all = FlamegraphOptions {
            op: OpFilter::Alloc,
            lock: LockFilter::All,
            offsets: false,
        };
        assert_eq!(
            title(&rec, &alloc_all),
            "fdprof: lock wait (all locks) in alloc — pid 4242 (opensock) — 10.0 s — tracepoint mode"
        );
        assert_eq!(
            subtitle(&rec, &alloc_all, 6_000_000),
            "filter op=alloc, lock=all · width = wait time, 6.00 ms in total · drops: 3 events \
             lost (see fdprof report)"
        );
    }

    #[test]
    fn svg_is_drawn_and_deterministic() {
        let rec = testdata::recording();
        let opts = FlamegraphOptions::default();
        let a = svg(&rec, &opts).unwrap();
        let text = String::from_utf8(a.clone()).unwrap();
        assert!(text.starts_with("<?xml") || text.starts_with("<svg"));
        assert!(text.contains(&title(&rec, &opts)));
        assert!(text.contains("alloc_fd"));
        assert!(text.contains("file_close_fd"));
        assert!(
            !text.contains("tcp_v4_rcv"),
            "spinlock waits are filtered out"
        );
        assert_eq!(a, svg(&rec, &opts).unwrap());
    }

    #[test]
    fn nothing_to_draw_is_one_clear_line() {
        let mut rec = testdata::recording();
        rec.contention.retain(|c| c.lock != "file_lock");
        let err = svg(&rec, &FlamegraphOptions::default()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(!msg.contains('\n'));
        assert!(msg.starts_with("nothing to draw"), "{msg}");
        assert!(msg.contains("op=all, lock=file_lock"), "{msg}");
        // The spinlock waits are still there for --lock all.
        let all = FlamegraphOptions {
            lock: LockFilter::All,
            ..Default::default()
        };
        assert!(svg(&rec, &all).is_ok());
    }
}
