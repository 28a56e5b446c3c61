//! dashboards/: the files beside the daemon that put it in front of other tools, each checked
//! against the metrics and profiles `fdprof daemon` serves and, where installed, by the tool
//! that reads it (a real Prometheus, promtool, systemd-analyze):
//! - [`grafana`]: the Grafana dashboard's variables, panels and queries;
//! - [`prometheus`]: the scrape config and the alerting rules;
//! - [`systemd`]: the example systemd unit;
//! - [`parca`] and [`pyroscope`]: the continuous profilers' scrapes of the daemon's profiles;
//! - [`promql`]: the reader of PromQL expressions the dashboard's and the rules' checks share.

mod grafana;
mod parca;
mod prometheus;
mod promql;
mod pyroscope;
mod systemd;

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common;

/// Every series the daemon serves, as PromQL names it (counters with `_total`, histograms by
/// their `_bucket`, `_sum` and `_count` series), and whether it has a `target` label.
const SERIES: &[(&str, bool)] = &[
    ("fdprof_fd_allocations_total", true),
    ("fdprof_fd_closes_total", true),
    ("fdprof_lock_contentions_total", true),
    ("fdprof_lock_wait_seconds_bucket", true),
    ("fdprof_lock_wait_seconds_sum", true),
    ("fdprof_lock_wait_seconds_count", true),
    ("fdprof_lock_wait_source", true),
    ("fdprof_alloc_scan_bits_bucket", true),
    ("fdprof_alloc_scan_bits_sum", true),
    ("fdprof_alloc_scan_bits_count", true),
    ("fdprof_fd_table_size", true),
    ("fdprof_fd_table_expansions_total", true),
    ("fdprof_events_dropped_total", false),
    ("fdprof_program_run_seconds_total", false),
    ("fdprof_build_info", false),
    ("fdprof_targets", false),
    ("fdprof_collector_cpu_seconds_total", false),
];

/// Paths the daemon serves profiles at (Go's net/http/pprof convention).
const PROFILE_PATHS: [&str; 2] = ["/debug/pprof/mutex", "/debug/pprof/profile"];

/// Whether the daemon serves `metric` at all.
fn is_served(metric: &str) -> bool {
    SERIES.iter().any(|(name, _)| *name == metric)
}

/// Whether `metric`, which the daemon must serve, has a `target` label.
fn has_target_label(metric: &str) -> bool {
    SERIES
        .iter()
        .find(|(name, _)| *name == metric)
        .unwrap_or_else(|| panic!("{metric} is not a metric fdprof daemon serves"))
        .1
}

/// A file of the workspace, by its path from the workspace's root.
fn workspace_file(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// Runs `promtool ARGS` in `dir`, failing with its output unless it succeeds.
fn promtool(dir: &Path, args: &[&str]) {
    let out = common::run(Command::new("promtool").args(args).current_dir(dir));
    assert!(
        out.status.success(),
        "promtool {} failed ({}):\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
