//! The on-CPU profile (`record --cpu`): the sampler's counts with their stacks symbolized, and
//! profiles added together (stack ids are per profiler, so samples are matched by frames).

use std::cmp::Reverse;
use std::collections::HashMap;

use fdprof_recording::recording::{CpuProfile, CpuSite, Frame};

use super::build::Symbolizers;
use super::rows::{Rows, sorted_samples};
use crate::collect::Snapshot;

/// The profile of `snap`'s samples; `None` when the run did not sample.
pub(crate) fn profile(snap: &Snapshot, sym: &mut Symbolizers) -> Option<CpuProfile> {
    let samples = snap.cpu.as_ref()?;
    let mut kernel: HashMap<i32, Vec<Frame>> = HashMap::new();
    // By (stack id, process): one id can be the same addresses in two processes.
    let mut user: HashMap<(i32, u32), Vec<Frame>> = HashMap::new();
    let mut sites = Vec::with_capacity(samples.counts.len());
    for (key, count) in &samples.counts {
        let kernel_stack = kernel
            .entry(key.kernel_stack)
            .or_insert_with(|| {
                samples
                    .stacks
                    .get(&key.kernel_stack)
                    .map(|ips| sym.kernel_frames(ips))
                    .unwrap_or_default()
            })
            .clone();
        let pid = (key.tgid != 0).then_some(key.tgid);
        let user_stack = user
            .entry((key.user_stack, key.tgid))
            .or_insert_with(|| sym.user_frames_of(samples.stacks.get(&key.user_stack), pid))
            .clone();
        sites.push(CpuSite {
            kernel_stack,
            user_stack,
            count: *count,
        });
    }
    let mut profile = CpuProfile {
        event: samples.event,
        frequency_hz: samples.frequency_hz,
        samples: Vec::new(),
    };
    add_sites(&mut profile.samples, &sites);
    Some(profile)
}

/// Adds `other`'s samples into `into`: sites with the same frames (function, offset and
/// module; not raw addresses, which differ between processes) add their counts.
pub(crate) fn add(into: &mut Option<CpuProfile>, other: Option<&CpuProfile>) {
    let Some(other) = other else { return };
    match into {
        None => *into = Some(other.clone()),
        Some(profile) => {
            let CpuProfile {
                event: _,
                frequency_hz: _,
                samples,
            } = other;
            add_sites(&mut profile.samples, samples);
        }
    }
}

/// Keeps the `max` stack pairs with the most samples; the others lose their stacks and are
/// folded into one stack-less site, so every sample stays counted (a daemon's running total
/// stays bounded). Returns how many sites were folded.
pub(crate) fn bound(profile: &mut Option<CpuProfile>, max: usize) -> usize {
    let Some(p) = profile else { return 0 };
    if p.samples.len() <= max {
        return 0;
    }
    // Sorted by samples: the tail goes.
    p.samples.sort_by_key(|s| Reverse(s.count));
    let folded = p.samples.split_off(max);
    let rest = CpuSite {
        kernel_stack: Vec::new(),
        user_stack: Vec::new(),
        count: folded.iter().fold(0, |n, s| n.saturating_add(s.count)),
    };
    add_sites(&mut p.samples, &[rest]);
    folded.len()
}

/// Merges `other` into `into` by frames, most samples first.
fn add_sites(into: &mut Vec<CpuSite>, other: &[CpuSite]) {
    let mut rows = Rows::new(std::mem::take(into));
    for site in other {
        rows.add(site);
    }
    *into = sorted_samples(rows);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::frame;
    use fdprof_recording::recording::CpuEvent;

    fn site(function: &str, address: Option<u64>, count: u64) -> CpuSite {
        let mut f = frame(function, 0x10, None);
        f.address = address;
        CpuSite {
            kernel_stack: vec![f],
            user_stack: vec![frame("main", 0x4, Some("/srv/app"))],
            count,
        }
    }

    fn profile(samples: Vec<CpuSite>) -> CpuProfile {
        CpuProfile {
            event: CpuEvent::CpuClock,
            frequency_hz: 99,
            samples,
        }
    }

    /// Samples at the same frames add up whatever their raw addresses (another process's);
    /// others are kept apart; the sum is ordered by samples.
    #[test]
    fn profiles_add_by_frames() {
        let mut into = None;
        add(&mut into, None);
        assert!(into.is_none());
        add(
            &mut into,
            Some(&profile(vec![site("alloc_fd", Some(1), 2)])),
        );
        add(
            &mut into,
            Some(&profile(vec![
                site("file_close_fd", None, 1),
                site("alloc_fd", Some(2), 5),
            ])),
        );
        let p = into.unwrap();
        let rows: Vec<(&str, u64)> = p
            .samples
            .iter()
            .map(|s| (s.kernel_stack[0].function.as_str(), s.count))
            .collect();
        assert_eq!(rows, [("alloc_fd", 7), ("file_close_fd", 1)]);
        // The first site's raw address is kept.
        assert_eq!(p.samples[0].kernel_stack[0].address, Some(1));
    }

    /// Bounding keeps the sites with the most samples and every sample.
    #[test]
    fn bound_folds_the_least_sampled_stacks() {
        let mut p = Some(profile(vec![
            site("a", None, 5),
            site("b", None, 1),
            site("c", None, 2),
            site("d", None, 9),
        ]));
        assert_eq!(bound(&mut p, 4), 0);
        assert_eq!(bound(&mut p, 2), 2);
        let rows: Vec<(Option<&str>, u64)> = p
            .as_ref()
            .unwrap()
            .samples
            .iter()
            .map(|s| (s.kernel_stack.first().map(|f| f.function.as_str()), s.count))
            .collect();
        assert_eq!(rows, [(Some("d"), 9), (Some("a"), 5), (None, 3)]);
    }
}
