//! `fdprof daemon`'s `/metrics`: the typed figures of every target as metric samples, encoded at
//! scrape time by one prometheus-client [`Collector`]. Nothing is counted here: ns become
//! seconds and each log2 slot of the kernel becomes one classic bucket, nothing else.
//!
//! Log2 slot `s` holds `[2^(s-1), 2^s - 1]` (slot 0 holds 0) and a Prometheus bucket counts
//! `(previous le, le]`, so the bucket of slot `s` has `le = 2^s - 1` exactly; values are whole
//! ns (or bits), so no value lies between two slots' bounds.

use std::fmt;

use fdprof_figures::{Histogram, Report, Syscall};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeLabelValue,
    EncodeMetric, LabelValueEncoder, NoLabelSet,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::{Registry, Unit};

/// `Content-Type` of [`encode`]'s output, what Prometheus asks for first.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of [`encode_text`]'s output, for scrapers that do not accept OpenMetrics.
pub const TEXT_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The last log2 slot with a bucket of its own in `fdprof_lock_wait_seconds`: 2^35 ns ≈ 34 s.
pub(crate) const WAIT_SLOTS: u32 = 35;
/// The last log2 slot with a bucket of its own in `fdprof_alloc_scan_bits`: 2^21 bits, past
/// the default `fs.nr_open` of 2^20.
pub(crate) const SCAN_SLOTS: u32 = 21;

const NS_PER_SECOND: f64 = 1e9;

/// The label set of a family's only series.
const NO_LABELS: [(&str, &str); 0] = [];

/// What one scrape exposes.
#[derive(Debug, Clone, Default)]
pub struct Exposition {
    /// Each target's running-total report, by target name (e.g. the comm `nginx`).
    pub targets: Vec<(String, Report)>,
    /// All targets merged: its drops, programs' run time and collector CPU time are the daemon's.
    pub daemon: Report,
    /// Processes attached now.
    pub attached: usize,
    /// Whether the fd syscalls were traced at the last interval's end.
    pub full_tracing: bool,
    /// Time they were traced, over the daemon's life.
    pub full_tracing_ns: u64,
    /// The HTTP server's own figures.
    pub http: HttpFigures,
    /// Captures written (`--capture-on`), by target and rule.
    pub captures: Vec<(String, &'static str, u64)>,
    /// The push to an OTLP receiver, when there is one (`--otlp-endpoint`).
    pub otlp: Option<OtlpFigures>,
}

/// What the daemon's OTLP push has done since it started.
#[derive(Debug, Clone, Copy, Default)]
pub struct OtlpFigures {
    /// Requests the receiver took.
    pub sent: u64,
    pub sent_bytes: u64,
    /// Attempts that failed (each retry counts).
    pub failed: u64,
    /// Requests never sent: past the queue's bound, refused for good, or left at shutdown.
    pub dropped: u64,
    /// Profiles the receiver took but rejected.
    pub rejected_profiles: u64,
    /// Requests waiting now.
    pub queued: u64,
}

/// What the daemon's HTTP server counts of its connections.
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpFigures {
    /// Connections open now.
    pub open: u64,
    /// Refused, or closed to make room, at `--max-connections`.
    pub refused_limit: u64,
    /// Closed for sending no whole request in time.
    pub refused_timeout: u64,
    /// Long-lived requests (the stream, pprof's `seconds=`) answered 503 at their own bound.
    pub refused_long_lived: u64,
}

/// The daemon's one collector: `scrape` builds the [`Exposition`] at each scrape (under the
/// daemon's lock), and it is encoded once the closure has returned.
pub struct MetricsCollector {
    scrape: Box<dyn Fn() -> Exposition + Send + Sync>,
}

impl MetricsCollector {
    pub fn new(scrape: impl Fn() -> Exposition + Send + Sync + 'static) -> Self {
        MetricsCollector {
            scrape: Box::new(scrape),
        }
    }

    /// A registry holding only this collector, to encode with
    /// `prometheus_client::encoding::text::encode` (OpenMetrics) or `prometheus_text::encode`.
    pub fn into_registry(self) -> Registry {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        registry
    }
}

impl fmt::Debug for MetricsCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MetricsCollector").finish_non_exhaustive()
    }
}

impl Collector for MetricsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        write(&(self.scrape)(), &mut encoder)
    }
}

#[cfg(test)]
/// `e` as OpenMetrics text, ending with `# EOF`.
pub(crate) fn encode(e: Exposition) -> String {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry_of(e))
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
/// `e` in the Prometheus text format 0.0.4 (what `promtool check metrics` reads).
pub(crate) fn encode_text(e: Exposition) -> String {
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry_of(e))
        .expect("writing to a String cannot fail");
    out
}

#[cfg(test)]
fn registry_of(e: Exposition) -> Registry {
    MetricsCollector::new(move || e.clone()).into_registry()
}

/// A series' labels, `[(name, value); N]`. Their values are names fdprof did not choose (comms,
/// cgroup paths, container ids, symbols): every one is escaped here, once, as it is encoded.
trait Labels {
    type Escaped: EncodeLabelSet;
    fn escaped(self) -> Self::Escaped;
}

impl<S: AsRef<str>, const N: usize> Labels for [(&'static str, S); N] {
    type Escaped = [(&'static str, Escaped<S>); N];
    fn escaped(self) -> Self::Escaped {
        self.map(|(name, value)| (name, Escaped(value)))
    }
}

/// A label value with its control characters (ESC, CR, DEL, …) written as `\x1b`: the
/// encoder escapes only `\`, `"` and a line feed, and a raw ESC would reach the terminal of
/// whoever curls `/metrics`. A line feed is left to the encoder's own `\n`. Backslashes are
/// doubled first, so a comm with a typed `\x1b` and one with an ESC stay two series.
struct Escaped<S>(S);

impl<S: AsRef<str>> EncodeLabelValue for Escaped<S> {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> fmt::Result {
        fmt::Write::write_str(encoder, &crate::escape::unambiguous(self.0.as_ref()))
    }
}

/// Writes metric families: each one's descriptor, then all its series.
struct Families<'e, 'a> {
    encoder: &'e mut DescriptorEncoder<'a>,
}

impl Families<'_, '_> {
    fn counters<L: Labels, V: EncodeCounterValue>(
        &mut self,
        name: &str,
        help: &str,
        unit: Option<&Unit>,
        series: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, unit, MetricType::Counter)?;
        for (labels, value) in series {
            ConstCounter::new(value).encode(family.encode_family(&labels.escaped())?)?;
        }
        Ok(())
    }

    fn gauges<L: Labels, V: EncodeGaugeValue>(
        &mut self,
        name: &str,
        help: &str,
        series: impl IntoIterator<Item = (L, V)>,
    ) -> fmt::Result {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            ConstGauge::new(value).encode(family.encode_family(&labels.escaped())?)?;
        }
        Ok(())
    }

    /// `series`: labels, the log2 histogram, its sum and count in the exposed unit.
    fn histograms<'h, L: Labels>(
        &mut self,
        name: &str,
        help: &str,
        unit: &Unit,
        last_slot: u32,
        scale: f64,
        series: impl IntoIterator<Item = (L, &'h Histogram, f64, u64)>,
    ) -> fmt::Result {
        let mut family =
            self.encoder
                .encode_descriptor(name, help, Some(unit), MetricType::Histogram)?;
        for (labels, histogram, sum, count) in series {
            let buckets = buckets(histogram, last_slot, scale);
            family
                .encode_family(&labels.escaped())?
                .encode_histogram::<NoLabelSet>(sum, count, &buckets, None)?;
        }
        Ok(())
    }
}

/// The upper bound of log2 slot `slot`, `2^slot - 1`, divided by `scale`.
pub(crate) fn slot_le(slot: u32, scale: f64) -> f64 {
    ((1u64 << slot) - 1) as f64 / scale
}

/// One bucket per slot `0..=last_slot`, then +Inf with the slots above: `(le, count in the
/// bucket alone)`, as prometheus-client adds them up.
fn buckets(histogram: &Histogram, last_slot: u32, scale: f64) -> Vec<(f64, u64)> {
    let mut buckets: Vec<(f64, u64)> = (0..=last_slot)
        .map(|slot| (slot_le(slot, scale), 0))
        .chain([(f64::INFINITY, 0)])
        .collect();
    for b in &histogram.buckets {
        let slot = fdprof_common::log2_slot(b.low).min(last_slot + 1) as usize;
        buckets[slot].1 += b.count;
    }
    buckets
}

fn seconds(ns: u64) -> f64 {
    ns as f64 / NS_PER_SECOND
}

/// Every family, each once, its series for every target.
fn write(e: &Exposition, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let mut out = Families { encoder };
    fd_tables(e, &mut out)?;
    processes::write(e, &mut out)?;
    containers::write(e, &mut out)?;
    daemon(e, &mut out)
}

/// Each target's fd syscalls, lock waits, scans and table.
fn fd_tables(e: &Exposition, out: &mut Families) -> fmt::Result {
    // Syscalls, the scan and the table are not recorded with --lock-only: no series then,
    // rather than zeros.
    let fd_activity = || e.targets.iter().filter(|(_, r)| r.fd_activity_recorded);
    // One series per target and syscall, of one of the syscall's figures.
    let by_syscall = |figure: fn(&Syscall) -> u64| {
        fd_activity().flat_map(move |(target, r)| {
            r.syscalls.iter().map(move |s| {
                let labels = [("target", target.as_str()), ("syscall", s.name.as_str())];
                (labels, figure(s))
            })
        })
    };
    out.counters(
        "fdprof_fd_allocations",
        "fds taken with alloc_fd (not dup2/dup3), by the syscall that took them.",
        None,
        by_syscall(|s| s.allocs),
    )?;
    out.counters(
        "fdprof_fd_closes",
        "fds removed from the table, by the syscall that closed them.",
        None,
        by_syscall(|s| s.fds_closed),
    )?;
    locks(e, out)?;
    out.histograms(
        "fdprof_alloc_scan",
        "Distance alloc_fd searched past next_fd for the lowest free fd (buckets: log2 slots).",
        &Unit::Other("bits".into()),
        SCAN_SLOTS,
        1.0,
        fd_activity().map(|(target, r)| {
            let bits = &r.scan.bits;
            (
                [("target", target.as_str())],
                bits,
                bits.sum as f64,
                bits.count,
            )
        }),
    )?;
    out.gauges(
        "fdprof_fd_table_size",
        "The largest fdt->max_fds seen: the fd table's size in fds.",
        fd_activity().map(|(target, r)| ([("target", target.as_str())], r.table.max_fds_max)),
    )?;
    out.counters(
        "fdprof_fd_table_expansions",
        "Syscalls during which the fd table grew.",
        None,
        fd_activity().map(|(target, r)| ([("target", target.as_str())], r.table.expansions)),
    )
}

/// Each target's lock waits by lock and operation: their count and their time.
fn locks(e: &Exposition, out: &mut Families) -> fmt::Result {
    out.gauges(
        "fdprof_lock_wait_source",
        "1 for what saw each target's lock waits: lock_tracepoints (every lock), \
         slow_path (spinlocks only) or unavailable (no lock wait series: none measured).",
        e.targets.iter().map(|(target, r)| {
            let labels = [
                ("target", target.as_str()),
                ("source", r.contention.source.name()),
            ];
            (labels, 1)
        }),
    )?;
    out.counters(
        "fdprof_lock_contentions",
        "Lock waits, by lock (named as the report names it) and the fd-table operation that waited.",
        None,
        e.targets.iter().flat_map(|(target, r)| {
            r.contention.by_lock_operation.iter().map(move |row| {
                let labels = [
                    ("target", target.as_str()),
                    ("lock", row.lock.name.as_str()),
                    ("operation", row.operation.name()),
                ];
                (labels, row.count)
            })
        }),
    )?;
    out.histograms(
        "fdprof_lock_wait",
        "Lock wait time, by lock and fd-table operation (buckets: the kernel's log2 slots).",
        &Unit::Seconds,
        WAIT_SLOTS,
        NS_PER_SECOND,
        e.targets.iter().flat_map(|(target, r)| {
            r.contention.by_lock_operation.iter().map(move |row| {
                let labels = [
                    ("target", target.as_str()),
                    ("lock", row.lock.name.as_str()),
                    ("operation", row.operation.name()),
                ];
                (labels, &row.wait, seconds(row.total_wait_ns), row.count)
            })
        }),
    )
}

/// The daemon's own figures: steal, drops, its cost, its connections and captures.
fn daemon(e: &Exposition, out: &mut Families) -> fmt::Result {
    out.counters(
        "fdprof_steal",
        "Time the hypervisor ran something else while this machine's vCPUs were runnable \
         (/proc/stat, all CPUs, since the daemon started).",
        Some(&Unit::Seconds),
        e.daemon
            .steal
            .iter()
            .map(|s| (NO_LABELS, seconds(s.steal_ns))),
    )?;
    out.counters(
        "fdprof_events_dropped",
        "Events lost, by probe and reason: every other figure is a lower bound while it grows.",
        None,
        e.daemon.drops.counters.iter().map(|d| {
            let labels = [("probe", d.probe.as_str()), ("reason", d.reason.as_str())];
            (labels, d.count)
        }),
    )?;
    out.counters(
        "fdprof_program_run",
        "Run time of each fdprof eBPF program (kernel statistics, in sampled windows).",
        Some(&Unit::Seconds),
        // None while no window of the statistics was measured: not measured is not 0.
        e.daemon
            .own_cost
            .programs
            .iter()
            .filter(|_| e.daemon.own_cost.stats_window_ns > 0)
            .map(|p| ([("program", p.name.as_str())], seconds(p.run_time_ns))),
    )?;
    out.counters(
        "fdprof_collector_cpu",
        "CPU time (user + system) fdprof's collector spent.",
        Some(&Unit::Seconds),
        [(NO_LABELS, seconds(e.daemon.own_cost.collector_cpu_ns))],
    )?;
    out.gauges(
        "fdprof_targets",
        "Processes attached now.",
        [(NO_LABELS, e.attached as u64)],
    )?;
    out.gauges(
        "fdprof_full_tracing",
        "1 while the fd syscalls are traced (--tier full, or a window of full tracing), as at \
         the last interval's end; 0 at rest, when no fd syscall figure moves.",
        [(NO_LABELS, u64::from(e.full_tracing))],
    )?;
    out.counters(
        "fdprof_full_tracing",
        "Time the fd syscalls were traced (every window of full tracing; all of it under --tier \
         full): the fd syscall, scan and table counters count only then, so their rate while \
         traced is rate(counter) / rate(this).",
        Some(&Unit::Seconds),
        [(NO_LABELS, seconds(e.full_tracing_ns))],
    )?;
    http(e, out)?;
    if let Some(o) = &e.otlp {
        otlp(o, out)?;
    }
    out.counters(
        "fdprof_captures",
        "Captures written by the flight recorder (--capture-on), by target and rule.",
        None,
        e.captures
            .iter()
            .map(|(target, rule, n)| ([("target", target.as_str()), ("rule", *rule)], *n)),
    )?;
    out.gauges(
        "fdprof_build_info",
        "The fdprof serving these metrics; always 1.",
        [([("version", env!("CARGO_PKG_VERSION"))], 1u64)],
    )
}

/// The daemon's HTTP server: its connections, and what it refused.
fn http(e: &Exposition, out: &mut Families) -> fmt::Result {
    out.gauges(
        "fdprof_http_connections",
        "HTTP connections open now.",
        [(NO_LABELS, e.http.open)],
    )?;
    out.counters(
        "fdprof_http_connections_refused",
        "HTTP connections refused or closed by the daemon: at --max-connections (reason limit), \
         or for sending no whole request in time (reason timeout).",
        None,
        [
            ([("reason", "limit")], e.http.refused_limit),
            ([("reason", "timeout")], e.http.refused_timeout),
        ],
    )?;
    out.counters(
        "fdprof_http_requests_refused",
        "HTTP requests answered 503: long-lived ones (the stream, pprof's seconds=) past their \
         own bound, a quarter of --max-connections (reason long_lived).",
        None,
        [([("reason", "long_lived")], e.http.refused_long_lived)],
    )?;
    Ok(())
}

/// The push to an OTLP receiver.
fn otlp(o: &OtlpFigures, out: &mut Families) -> fmt::Result {
    out.counters(
        "fdprof_otlp_requests",
        "OTLP requests the receiver took (one an interval per profile kind with samples).",
        None,
        [(NO_LABELS, o.sent)],
    )?;
    out.counters(
        "fdprof_otlp_sent",
        "Bytes of the OTLP requests the receiver took.",
        Some(&Unit::Bytes),
        [(NO_LABELS, o.sent_bytes)],
    )?;
    out.counters(
        "fdprof_otlp_request_failures",
        "OTLP attempts that failed: no connection, no answer in time, or not a success; each \
         retry counts.",
        None,
        [(NO_LABELS, o.failed)],
    )?;
    out.counters(
        "fdprof_otlp_requests_dropped",
        "OTLP requests never sent: the oldest past --otlp-queue, one refused for good, or left \
         at shutdown.",
        None,
        [(NO_LABELS, o.dropped)],
    )?;
    out.counters(
        "fdprof_otlp_rejected_profiles",
        "Profiles the OTLP receiver took but said it rejected (partial success).",
        None,
        [(NO_LABELS, o.rejected_profiles)],
    )?;
    out.gauges(
        "fdprof_otlp_queued_requests",
        "OTLP requests waiting to be sent.",
        [(NO_LABELS, o.queued)],
    )
}

mod containers;
mod processes;
#[cfg(test)]
mod tests;
