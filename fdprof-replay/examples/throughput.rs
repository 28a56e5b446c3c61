//! Events per second the replay sustains on one core, per model, on a generated opensock trace:
//! once over a long trace held in memory (the event stream comes from DRAM), and over a short
//! trace replayed again and again (in cache: the models' own speed).
//! `cargo run --release -p fdprof-replay --example throughput [fds] [ops] [threads] [model]`
//! (model: an index into the list below, to time one alone)

use std::time::Instant;

use fdprof_replay::event::TraceEvent;
use fdprof_replay::synthetic::{Params, Pattern, generate};
use fdprof_replay::{Limits, ModelKind, Version, replay};

const KINDS: [ModelKind; 5] = [
    ModelKind::Mainline(Version::Linear),
    ModelKind::Mainline(Version::Fb61),
    ModelKind::Mainline(Version::Fb613),
    ModelKind::Viro,
    ModelKind::Fastalloc {
        base: Version::Fb613,
        seed: 1,
    },
];

fn rate<'a>(events: impl Iterator<Item = &'a TraceEvent>, n: usize, kind: ModelKind) -> f64 {
    let t = Instant::now();
    let r = replay(events, kind, Limits::default());
    assert_eq!(r.events, n as u64);
    n as f64 / t.elapsed().as_secs_f64() / 1e6
}

fn main() {
    let arg = |i: usize, default: u64| {
        std::env::args()
            .nth(i)
            .and_then(|a| a.parse().ok())
            .unwrap_or(default)
    };
    let p = Params {
        fds: arg(1, 100_000) as u32,
        ops: arg(2, 5_000_000),
        threads: arg(3, 16) as u32,
        hole: 3,
        seed: 1,
    };
    let only = std::env::args()
        .nth(4)
        .and_then(|a| a.parse::<usize>().ok());
    let long = generate(Pattern::Opensock, &p);
    let short = generate(Pattern::Opensock, &Params { ops: 20_000, ..p });
    println!(
        "opensock, {} fds, {} threads: {} events in memory; {} events replayed {} times",
        p.fds,
        p.threads,
        long.len(),
        short.len(),
        long.len() / short.len()
    );
    println!(
        "{:<36} {:>10} {:>10}  (M events/s)",
        "model", "in memory", "in cache"
    );
    for (i, kind) in KINDS.into_iter().enumerate() {
        if only.is_some_and(|o| o != i) {
            continue;
        }
        let streamed = rate(long.iter(), long.len(), kind);
        let n = long.len() / short.len() * short.len();
        let cached = rate(short.iter().cycle().take(n), n, kind);
        println!(
            "{:<36} {streamed:>10.1} {cached:>10.1}",
            format!("{kind:?}")
        );
    }
}
