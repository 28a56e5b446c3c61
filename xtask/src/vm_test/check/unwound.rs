//! The `unwound` steps: the chain program, static and built without frame pointers, must walk
//! whole in the guest: its on-CPU samples everywhere, its `file_lock` waits wherever there are
//! any. Before 5.19 the slow-path probe (direct modes) gives them, copying its sites' stacks
//! too, and must; the lock tracepoints of the 6.x guests see no contention under emulation
//! (their opensock rows say `tracepoint-seen file_lock waits 0` too), and the host's tests
//! judge theirs.

use serde_json::Value;

use super::super::guest::{self, GuestOutput};
use super::super::row::{Row, failure};

/// The chain as a stack lists it, outermost first, from the thread's function in.
const CHAIN: [&str; 12] = [
    "worker", "chain_01", "chain_02", "chain_03", "chain_04", "chain_05", "chain_06", "chain_07",
    "chain_08", "chain_09", "chain_10", "leaf",
];

/// Whether frames (outermost first) carry the whole chain with a frame outward of it (the C
/// library's thread start) and no truncation.
fn whole<'a>(frames: impl IntoIterator<Item = &'a str>) -> bool {
    let frames: Vec<&str> = frames.into_iter().collect();
    let Some(at) = frames.iter().position(|&f| f == "worker") else {
        return false;
    };
    at > 0
        && frames[at..].starts_with(&CHAIN)
        && !frames.iter().any(|f| f.starts_with("[truncated"))
}

/// (whole, all) of the on-CPU samples' folded lines (`op;outer;…;inner COUNT`).
fn samples(folded: &str) -> (u64, u64) {
    let (mut good, mut all) = (0, 0);
    for line in folded.lines() {
        let Some((stack, n)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<u64>() else { continue };
        all += n;
        // The first frame names the operation.
        if whole(stack.split(';').skip(1)) {
            good += n;
        }
    }
    (good, all)
}

/// (whole, all) of the report's `file_lock` stacks, by wait count.
fn waits(report: &Value) -> (u64, u64) {
    let (mut good, mut all) = (0, 0);
    for s in report["top_stacks"].as_array().into_iter().flatten() {
        if s["lock"] != "file_lock" {
            continue;
        }
        let n = s["count"].as_u64().unwrap_or(0);
        all += n;
        let user = s["user_stack"].as_array().into_iter().flatten().rev();
        if whole(user.filter_map(|f| f["function"].as_str())) {
            good += n;
        }
    }
    (good, all)
}

pub(super) fn row(out: &GuestOutput, kernel: &str, mode: &str) -> Row {
    let mut row = Row::failed(kernel, mode, "unwound-chain");
    let Some(step) = out.steps.get(&guest::unwound_step(mode)) else {
        row.figures = "no result from the guest".into();
        return row;
    };
    if step.rc != 0 {
        row.figures = failure("record --cpu of the chain", step);
        return row;
    }
    let Some((report, folded)) = step.stdout.split_once("@@folded") else {
        row.figures = "no folded samples".into();
        return row;
    };
    let Ok(report) = serde_json::from_str::<Value>(report.trim()) else {
        row.figures = "report --json printed no JSON".into();
        return row;
    };
    let (cpu_whole, cpu_all) = samples(folded);
    let cpu = cpu_whole as f64 / cpu_all.max(1) as f64;
    let mode_of = |role: &str| report["modes"][role].as_str().unwrap_or("off").to_string();
    let tracepoints = mode_of("lock_tracepoints") != "off";
    let slow_path = ["fentry", "kprobe"]
        .iter()
        .any(|m| mode_of("lock_slowpath").starts_with(m));
    // Where the slow-path probe is the waits' source, it must have seen some.
    let expect_waits = !tracepoints && slow_path;
    let (wait_whole, wait_all) = waits(&report);
    let wait = wait_whole as f64 / wait_all.max(1) as f64;
    let waits_pass = match wait_all {
        0 => !expect_waits,
        _ => wait >= 0.95,
    };
    row.pass = cpu_all >= 20 && cpu >= 0.9 && waits_pass;
    row.figures = format!(
        "on-CPU samples whole {cpu_whole}/{cpu_all} ({:.0}%); file_lock waits {}",
        cpu * 100.0,
        match (wait_all, tracepoints) {
            (0, true) => "none seen by the lock tracepoints here".to_string(),
            (0, false) if !slow_path =>
                "none here (no lock tracepoints, no slow-path probe)".into(),
            (_, true) => format!("whole {wait_whole}/{wait_all} ({:.0}%)", wait * 100.0),
            (_, false) => format!(
                "(slow-path probe) whole {wait_whole}/{wait_all} ({:.0}%)",
                wait * 100.0
            ),
        }
    );
    row
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_chain_has_a_frame_outward_and_no_truncation() {
        let chain = CHAIN.join(";");
        assert_eq!(
            samples(&format!("other;clone3;start_thread;{chain} 7\n")),
            (7, 7)
        );
        assert_eq!(samples(&format!("other;{chain} 3\n")), (0, 3));
        assert_eq!(
            samples(&format!("other;[truncated: no unwind info];{chain} 2\n")),
            (0, 2)
        );
        assert_eq!(samples("other;__close 5\n"), (0, 5));
    }
}
