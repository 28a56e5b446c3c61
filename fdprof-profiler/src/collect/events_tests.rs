//! The events ring buffer on the real kernel (tracepoint mode here), read as a live view does,
//! against the workload generator's ground truth and the snapshot's counts. Root.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fdprof_common::{
    contention::lock_class,
    counters::{drop, global},
};

use super::events::{EventStream, RawEvent, RawKind};
use super::{Filter, Kernel, Profiler, ProfilerOptions, launch};
use crate::probe::kallsyms::Kallsyms;
use crate::tests::{assert_no_programs_left, kernel_lock, require_root, workload};

fn kernel() -> Kernel {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    Kernel::discover(&Kallsyms::parse(&text)).unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn attach(pid: u32, slow: Duration) -> Profiler {
    let opts = ProfilerOptions {
        filter: Filter::Tgid(pid),
        slow,
        ..ProfilerOptions::default()
    };
    Profiler::attach(&kernel(), opts).unwrap()
}

/// Reads events until the target process has ended (its `Exit { process: true }`), which comes
/// after every other event of a process's threads... except the other threads' own exits,
/// which may be sent a moment later: those are read for a second more (a preempted vCPU can
/// hold one back that long).
async fn until_process_exit(stream: &mut EventStream) -> Vec<RawEvent> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut events = Vec::new();
    let mut ended_at: Option<Instant> = None;
    while ended_at.is_none_or(|t| t.elapsed() < Duration::from_secs(1)) {
        assert!(Instant::now() < deadline, "no process exit event in 30 s");
        if let Ok(batch) =
            tokio::time::timeout(Duration::from_millis(50), stream.next_batch()).await
        {
            events.extend(batch.unwrap());
        }
        if ended_at.is_none()
            && events
                .iter()
                .any(|e| e.what == RawKind::Exit { process: true })
        {
            ended_at = Some(Instant::now());
        }
    }
    assert_eq!(stream.undecoded(), 0);
    events
}

#[test]
fn expansions_are_those_the_snapshot_counts() {
    require_root();
    let _guard = kernel_lock();
    let scenario = ["holes", "-n", "3000", "--ops", "10"];
    // The table size the generator ends with (deterministic).
    let expected = workload::run(&scenario);
    let max_fds = expected["max_fds"].as_u64().unwrap();
    assert!(max_fds >= 3000);

    // Launched held before exec, so the table grows under the probes. Its output (a test
    // harness's, a few lines) stays in the pipe, unread, out of this harness's own.
    let mut launched = launch::launch(
        &launch::Program::resolve(&workload::command(&scenario)).unwrap(),
        launch::Streams::Captured,
    )
    .unwrap();
    let mut profiler = attach(launched.pid, Duration::from_secs(3600));
    let rt = runtime();
    let events = rt.block_on(async {
        let mut stream = profiler.take_events().unwrap().unwrap();
        launched.go().unwrap();
        until_process_exit(&mut stream).await
    });
    let snap = profiler.finish().unwrap();
    while launched.try_wait().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let grown: Vec<(u32, u32, Option<u64>)> = events
        .iter()
        .filter_map(|e| match e.what {
            RawKind::Expansion {
                old_max_fds,
                new_max_fds,
                duration_ns,
            } => Some((old_max_fds, new_max_fds, duration_ns)),
            _ => None,
        })
        .collect();
    assert_eq!(
        snap.drops[(drop::PROBE_EVENTS * drop::COUNT + drop::RINGBUF_FULL) as usize],
        0
    );
    assert_eq!(
        grown.len() as u64,
        snap.globals[global::EXPANSIONS as usize],
        "{grown:?}"
    );
    assert!(grown.len() >= 2, "{grown:?}");
    // One thread: each growth starts where the previous ended, and ends at the final size.
    for (i, &(old, new, duration)) in grown.iter().enumerate() {
        assert!(old < new, "{grown:?}");
        assert_eq!(duration, None, "tracepoint mode has no duration");
        if i > 0 {
            assert_eq!(old, grown[i - 1].1, "{grown:?}");
        }
    }
    assert_eq!(u64::from(grown.last().unwrap().1), max_fds);
    assert!(events.iter().all(|e| e.pid == launched.pid));
    drop(launched);
    assert_no_programs_left();
}

#[test]
fn each_thread_exits_once_and_the_process_once() {
    require_root();
    let _guard = kernel_lock();
    let workload = workload::start(&["open-close", "-t", "2", "--ops", "1000"]);
    let pid = workload.pid;
    let mut profiler = attach(pid, Duration::from_secs(3600));
    // Every thread exists before the signal: the test harness's main one, the generator's (a
    // test's) and its two workers.
    let tids: BTreeSet<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(tids.len(), 4);
    let rt = runtime();
    let events = rt.block_on(async {
        let mut stream = profiler.take_events().unwrap().unwrap();
        workload.go();
        until_process_exit(&mut stream).await
    });
    drop(profiler);
    workload.finish();
    let exits: Vec<(u32, u32, bool)> = events
        .iter()
        .filter_map(|e| match e.what {
            RawKind::Exit { process } => Some((e.pid, e.tid, process)),
            _ => None,
        })
        .collect();
    let exited: BTreeSet<u32> = exits.iter().map(|e| e.1).collect();
    assert_eq!(exits.len(), tids.len(), "{exits:?}");
    assert_eq!(exited, tids, "{exits:?}");
    assert!(exits.iter().all(|e| e.0 == pid));
    assert_eq!(exits.iter().filter(|e| e.2).count(), 1, "{exits:?}");
    assert_no_programs_left();
}

#[test]
fn every_file_lock_wait_is_a_slow_wait_at_one_ns() {
    require_root();
    let _guard = kernel_lock();
    let workload = workload::start(&["opensock", "-t", "2", "-n", "4000", "-d", "2s"]);
    let pid = workload.pid;
    let mut profiler = attach(pid, Duration::from_nanos(1));
    let rt = runtime();
    let events = rt.block_on(async {
        let mut stream = profiler.take_events().unwrap().unwrap();
        workload.go();
        until_process_exit(&mut stream).await
    });
    let snap = profiler.finish().unwrap();
    workload.finish();
    let slow: Vec<&RawEvent> = events
        .iter()
        .filter(|e| {
            matches!(
                e.what,
                RawKind::SlowWait { lock, .. } if lock.class == lock_class::FILE_LOCK
            )
        })
        .collect();
    let contended: u64 = snap
        .contention
        .iter()
        .filter(|(k, _)| k.lock.class == lock_class::FILE_LOCK)
        .map(|(_, c)| c.count)
        .sum();
    let lost = snap.drops[(drop::PROBE_EVENTS * drop::COUNT + drop::RINGBUF_FULL) as usize];
    let unaggregated = snap.drops[(drop::PROBE_CONTENTION * drop::COUNT + drop::MAP_FULL) as usize];
    assert!(contended > 0, "no file_lock contention");
    // Each wait is both aggregated and sent, at the same contention_end: equal unless the ring
    // buffer was full (events lost, counted) or the aggregate map was (waits not aggregated).
    let sent = slow.len() as u64;
    eprintln!("{sent} events, {contended} waits, {lost} lost events, {unaggregated} unaggregated");
    assert!(
        sent + lost >= contended && sent <= contended + unaggregated,
        "{sent} events, {contended} waits, {lost} lost events, {unaggregated} unaggregated"
    );
    if lost == 0 && unaggregated == 0 {
        assert_eq!(sent, contended);
    }
    for e in &slow {
        assert_eq!(e.pid, pid);
        let RawKind::SlowWait {
            wait_ns,
            kernel_stack,
            ..
        } = e.what
        else {
            unreachable!()
        };
        assert!(wait_ns >= 1);
        assert!(kernel_stack.is_some());
    }
    assert_no_programs_left();
}

/// Where tp_btf is refused, each family falls back to classic tracepoints: those programs (the
/// event-sending ones included) must pass the verifier too, and attach.
#[test]
fn classic_tracepoint_fallbacks_load_and_attach() {
    require_root();
    let _guard = kernel_lock();
    // Classic tracepoints are attached through tracefs, which the profiler mounts where it is
    // missing: so does this test, which may be the first to need it since boot.
    crate::probe::tracefs::ensure_mounted();
    {
        let mut ebpf = aya::EbpfLoader::new()
            .load(crate::probe::object::PROFILER)
            .unwrap();
        for family in [
            fdprof_common::probes::Role::LockTracepoints,
            fdprof_common::probes::Role::FdSyscalls,
            fdprof_common::probes::Role::TaskExits,
        ] {
            super::attach::classic(&mut ebpf, family, true)
                .unwrap_or_else(|e| panic!("{family}: {e:#}"));
        }
    }
    assert_no_programs_left();
}
