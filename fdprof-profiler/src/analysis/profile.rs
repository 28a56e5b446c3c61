//! Weighted stacks for the standard profile formats (pprof, speedscope): a recording's lock
//! waits or on-CPU samples as samples over a table of shared frames, each with its values and
//! labels. The exports only lay these out.
//!
//! Frames are function names (offsets dropped, so stacks that differ only in offsets merge) and
//! their module; a frame keeps its recorded address only when asked for (`--raw-addrs`: kernel
//! addresses reveal KASLR's offset), else it has none.

use std::collections::HashMap;

use fdprof_figures::{Drops, Header};
use fdprof_recording::Recording;
use fdprof_recording::recording::Frame as RecordedFrame;

use super::flamegraph::{LockFilter, OpFilter};
use super::stacks::frame_label;

/// What the samples measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProfileKind {
    /// Lock waits: the values are [`ValueType::Contentions`] and [`ValueType::Delay`].
    Contention,
    /// On-CPU samples: the values are [`ValueType::Samples`] and [`ValueType::Cpu`].
    Cpu,
}

/// One value every sample carries (pprof's sample type, speedscope's profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    /// Lock waits counted.
    Contentions,
    /// Time waited, ns.
    Delay,
    /// On-CPU samples counted.
    Samples,
    /// CPU time the samples stand for, ns.
    Cpu,
}

impl ValueType {
    /// The type's name, as Go's mutex and CPU profiles name it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            ValueType::Contentions => "contentions",
            ValueType::Delay => "delay",
            ValueType::Samples => "samples",
            ValueType::Cpu => "cpu",
        }
    }

    pub(crate) fn unit(self) -> ValueUnit {
        match self {
            ValueType::Contentions | ValueType::Samples => ValueUnit::Count,
            ValueType::Delay | ValueType::Cpu => ValueUnit::Nanoseconds,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueUnit {
    Count,
    Nanoseconds,
}

impl ValueUnit {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ValueUnit::Count => "count",
            ValueUnit::Nanoseconds => "nanoseconds",
        }
    }
}

/// Which samples to take and how to name their frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileOptions {
    pub kind: ProfileKind,
    /// Contention only: which operations' waits.
    pub op: OpFilter,
    /// Contention only: which locks' waits.
    pub lock: LockFilter,
    /// Keep the frames' recorded addresses (present only in `--raw-addrs` recordings).
    pub raw_addrs: bool,
    /// Contention only: label each wait with its process (pid and name), samples split by it
    /// (OTLP's `process.*` attributes; pprof readers aggregate by target).
    pub per_process: bool,
}

impl ProfileOptions {
    /// Every operation's and lock's samples of `kind`, frames named, one label set per site.
    pub fn all(kind: ProfileKind) -> Self {
        Self {
            kind,
            op: OpFilter::All,
            lock: LockFilter::All,
            raw_addrs: false,
            per_process: false,
        }
    }
}

/// Where a frame runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Space {
    Kernel,
    User,
}

/// One distinct frame.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ProfileFrame {
    /// The function, as [`frame_label`] shows it (`[unknown]` when unsymbolized or when the
    /// stack could not be taken).
    pub function: String,
    /// The module (`libc.so.6`, a kernel module); `None` for the kernel image and unknowns.
    pub module: Option<String>,
    pub space: Space,
    /// The recorded address, only with [`ProfileOptions::raw_addrs`].
    pub address: Option<u64>,
    /// User frames in a mapped file: the file's build id, where it has one.
    pub build_id: Option<fdprof_figures::BuildId>,
    /// User frames in a mapped file: the address's offset in that file.
    pub file_offset: Option<u64>,
}

impl ProfileFrame {
    /// Whether a symbol named the frame.
    pub fn is_named(&self) -> bool {
        self.function != "[unknown]"
    }
}

/// Labels of a lock wait; none for CPU samples.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WaitLabels {
    /// The fd-table operation (`alloc`, `close`, …).
    pub operation: &'static str,
    /// The lock, as the report names it (`file_lock`, `tasklist_lock`, `spinlock`, …).
    pub lock: String,
    /// The target the wait is of (the daemon's target names).
    pub target: Option<String>,
    /// The container of the waiting process (full id), where it runs in one.
    pub container: Option<String>,
    /// The Kubernetes pod of the waiting process, where known.
    pub pod_uid: Option<String>,
    /// With [`ProfileOptions::per_process`]: the waiting process's pid and name.
    pub process: Option<(u32, String)>,
}

/// Identical stacks with identical labels, merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileSample {
    /// Indices into [`Profile::frames`], innermost (leaf) first.
    pub frames: Vec<usize>,
    /// One value per [`Profile::value_types`].
    pub values: Vec<u64>,
    pub labels: Option<WaitLabels>,
}

/// A recording's samples with what a profile's header names.
#[derive(Debug, Clone)]
pub struct Profile {
    pub header: Header,
    pub drops: Drops,
    pub value_types: Vec<ValueType>,
    /// The type and size of one sampling period: a wait (1) or 1/frequency of CPU time (ns).
    pub period_type: ValueType,
    pub period: u64,
    pub frames: Vec<ProfileFrame>,
    /// In first-seen order of the recording.
    pub samples: Vec<ProfileSample>,
    /// Each value type's sum over the samples (saturating).
    pub totals: Vec<u64>,
    /// The containers the samples' processes ran in, as the report names them (`podman
    /// 3f1e9b2c4d5a`).
    pub containers: Vec<String>,
}

/// Why there is no profile to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoProfile {
    /// `--cpu` on a recording made without `record --cpu`.
    NoCpuSamples,
}

/// The samples of `rec` that pass `opts`. Contention sites with neither a wait nor any time
/// are left out, as in flamegraphs.
pub fn profile(rec: &Recording, opts: &ProfileOptions) -> Result<Profile, NoProfile> {
    targets_profile(rec, &[(None, rec)], opts)
}

/// One profile of several targets' recordings (the daemon's names), each wait labelled with
/// its target's name where one is given; `facts` gives the header and the drops.
pub fn targets_profile(
    facts: &Recording,
    targets: &[(Option<&str>, &Recording)],
    opts: &ProfileOptions,
) -> Result<Profile, NoProfile> {
    let mut builder = Builder::new(opts.raw_addrs);
    let mut containers = std::collections::BTreeSet::new();
    let (value_types, period_type, period) = match opts.kind {
        ProfileKind::Contention => {
            for &(target, rec) in targets {
                add_waits(&mut builder, &mut containers, target, rec, opts);
            }
            (
                vec![ValueType::Contentions, ValueType::Delay],
                ValueType::Contentions,
                1,
            )
        }
        ProfileKind::Cpu => {
            let cpus: Vec<&fdprof_recording::recording::CpuProfile> = targets
                .iter()
                .filter_map(|(_, rec)| rec.cpu.as_ref())
                .filter(|cpu| !cpu.samples.is_empty())
                .collect();
            let first = cpus.first().ok_or(NoProfile::NoCpuSamples)?;
            let period = 1_000_000_000 / first.frequency_hz.max(1);
            for cpu in cpus {
                for site in &cpu.samples {
                    let frames = builder.stack(&site.kernel_stack, &site.user_stack, false);
                    builder.add(
                        frames,
                        None,
                        [site.count, site.count.saturating_mul(period)],
                    );
                }
            }
            (
                vec![ValueType::Samples, ValueType::Cpu],
                ValueType::Cpu,
                period,
            )
        }
    };
    let totals = (0..value_types.len())
        .map(|i| super::sum(builder.samples.iter().map(|s| s.values[i])))
        .collect();
    Ok(Profile {
        containers: containers.into_iter().collect(),
        header: super::header(facts),
        drops: super::drops(facts),
        value_types,
        period_type,
        period,
        frames: builder.frames,
        samples: builder.samples,
        totals,
    })
}

/// `rec`'s waits that pass `opts`, each labelled with `target` and where it ran; the containers
/// they ran in go into `containers`.
fn add_waits(
    builder: &mut Builder,
    containers: &mut std::collections::BTreeSet<String>,
    target: Option<&str>,
    rec: &Recording,
    opts: &ProfileOptions,
) {
    let identity: HashMap<u32, &fdprof_figures::Identity> =
        rec.processes.iter().map(|p| (p.pid, &p.identity)).collect();
    let comms: HashMap<u32, &str> = match opts.per_process {
        true => rec
            .processes
            .iter()
            .map(|p| (p.pid, p.comm.as_str()))
            .collect(),
        false => HashMap::new(),
    };
    for site in &rec.contention {
        let passes = opts.op.matches(site.operation) && opts.lock.matches(site.lock);
        if !passes || (site.count == 0 && site.total_wait_ns == 0) {
            continue;
        }
        let id = site.pid.and_then(|pid| identity.get(&pid));
        let container = id.and_then(|i| i.container.as_ref());
        if let Some(c) = container {
            containers.insert(format!("{} {}", c.runtime.as_str(), c.short_id()));
        }
        let labels = WaitLabels {
            operation: site.operation.name(),
            lock: site.figure_lock().name,
            target: target.map(str::to_string),
            container: container.map(|c| c.id.clone()),
            pod_uid: id.and_then(|i| i.pod_uid.clone()),
            process: opts
                .per_process
                .then(|| wait_process(site.pid, rec, &comms))
                .flatten(),
        };
        let frames = builder.stack(&site.kernel_stack, &site.user_stack, true);
        builder.add(frames, Some(labels), [site.count, site.total_wait_ns]);
    }
}

/// The process a wait of `rec` ran in: its site's, or a single process's recording's (its
/// target), named by its comm or, for a command, its program's file name.
fn wait_process(
    site_pid: Option<u32>,
    rec: &Recording,
    comms: &HashMap<u32, &str>,
) -> Option<(u32, String)> {
    let pid = site_pid.or(rec.target.pid)?;
    // An empty comm is one not read (the process had gone): no name, not an empty one.
    let known = |name: &&str| !name.is_empty();
    let name = comms
        .get(&pid)
        .copied()
        .filter(known)
        .or(rec.target.comm.as_deref().filter(known))
        .or_else(|| rec.target.command.first()?.rsplit('/').next());
    Some((pid, name.unwrap_or_default().to_string()))
}

/// Interns frames and merges samples.
struct Builder {
    raw_addrs: bool,
    frames: Vec<ProfileFrame>,
    frame_index: HashMap<ProfileFrame, usize>,
    samples: Vec<ProfileSample>,
    sample_index: HashMap<(Vec<usize>, Option<WaitLabels>), usize>,
}

impl Builder {
    fn new(raw_addrs: bool) -> Self {
        Self {
            raw_addrs,
            frames: Vec::new(),
            frame_index: HashMap::new(),
            samples: Vec::new(),
            sample_index: HashMap::new(),
        }
    }

    fn frame(&mut self, frame: ProfileFrame) -> usize {
        if let Some(&i) = self.frame_index.get(&frame) {
            return i;
        }
        self.frames.push(frame.clone());
        self.frame_index.insert(frame, self.frames.len() - 1);
        self.frames.len() - 1
    }

    fn unknown(&mut self, space: Space) -> usize {
        self.frame(ProfileFrame {
            function: "[unknown]".into(),
            module: None,
            space,
            address: None,
            build_id: None,
            file_offset: None,
        })
    }

    /// The frame indices of a kernel and a user stack (both innermost first), leaf first.
    /// With `mark_missing` (lock waits, as flamegraphs draw them) a stack not taken is one
    /// `[unknown]` frame; otherwise it is left out (a CPU sample in user mode has no kernel
    /// stack), unless both are missing.
    fn stack(
        &mut self,
        kernel: &[RecordedFrame],
        user: &[RecordedFrame],
        mark_missing: bool,
    ) -> Vec<usize> {
        let mut out = Vec::with_capacity(kernel.len() + user.len());
        for (frames, space) in [(kernel, Space::Kernel), (user, Space::User)] {
            if frames.is_empty() {
                if mark_missing {
                    out.push(self.unknown(space));
                }
                continue;
            }
            for f in frames {
                let frame = ProfileFrame {
                    function: frame_label(f, false),
                    module: f.module.clone(),
                    space,
                    address: if self.raw_addrs { f.address } else { None },
                    build_id: f.build_id.clone(),
                    file_offset: f.file_offset,
                };
                out.push(self.frame(frame));
            }
        }
        if out.is_empty() {
            out.push(self.unknown(Space::User));
        }
        out
    }

    fn add(&mut self, frames: Vec<usize>, labels: Option<WaitLabels>, values: [u64; 2]) {
        let key = (frames, labels);
        match self.sample_index.get(&key) {
            Some(&i) => {
                let sample = &mut self.samples[i];
                for (sum, v) in sample.values.iter_mut().zip(values) {
                    *sum = sum.saturating_add(v);
                }
            }
            None => {
                let (frames, labels) = key.clone();
                self.samples.push(ProfileSample {
                    frames,
                    values: values.to_vec(),
                    labels,
                });
                self.sample_index.insert(key, self.samples.len() - 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{self, cpu_recording};

    fn contention(lock: LockFilter) -> ProfileOptions {
        ProfileOptions {
            kind: ProfileKind::Contention,
            op: OpFilter::All,
            lock,
            raw_addrs: false,
            per_process: false,
        }
    }

    #[test]
    fn waits_merge_by_function_and_keep_their_labels() {
        let rec = testdata::recording();
        let p = profile(&rec, &contention(LockFilter::All)).unwrap();
        // The two alloc sites differ only in alloc_fd's offset: one sample.
        assert_eq!(p.samples.len(), 3);
        assert_eq!(p.samples[0].values, [591, 6_000_000]);
        let labels = p.samples[0].labels.as_ref().unwrap();
        assert_eq!(
            (labels.operation, labels.lock.as_str()),
            ("alloc", "file_lock")
        );
        assert_eq!(p.totals, [1001, 11_000_000]);
        let leaf = &p.frames[p.samples[0].frames[0]];
        assert_eq!(leaf.function, "__pv_queued_spin_lock_slowpath");
        assert_eq!(leaf.space, Space::Kernel);
        // The spinlock wait has no user stack: an unknown user frame, as flamegraphs draw it.
        let last = p.samples[2].frames.last().unwrap();
        assert_eq!(p.frames[*last].function, "[unknown]");
        assert_eq!(p.frames[*last].space, Space::User);
        // Frames are shared: `_raw_spin_lock` is one frame.
        assert_eq!(
            p.frames
                .iter()
                .filter(|f| f.function == "_raw_spin_lock")
                .count(),
            1
        );
    }

    #[test]
    fn filters_are_those_of_flamegraphs() {
        let rec = testdata::recording();
        let p = profile(&rec, &contention(LockFilter::FileLock)).unwrap();
        assert_eq!(p.totals, [991, 10_000_000]);
        let close = ProfileOptions {
            op: OpFilter::Close,
            ..contention(LockFilter::All)
        };
        assert_eq!(profile(&rec, &close).unwrap().totals, [400, 4_000_000]);
    }

    #[test]
    fn addresses_are_kept_only_when_asked() {
        let mut rec = testdata::recording();
        rec.contention[0].kernel_stack[0].address = Some(0xffff_ffff_8100_0000);
        let without = profile(&rec, &contention(LockFilter::All)).unwrap();
        assert!(without.frames.iter().all(|f| f.address.is_none()));
        let with = ProfileOptions {
            raw_addrs: true,
            per_process: false,
            ..contention(LockFilter::All)
        };
        let with = profile(&rec, &with).unwrap();
        assert!(
            with.frames
                .iter()
                .any(|f| f.address == Some(0xffff_ffff_8100_0000))
        );
    }

    #[test]
    fn cpu_samples_weigh_one_period_each() {
        let opts = ProfileOptions {
            kind: ProfileKind::Cpu,
            ..contention(LockFilter::All)
        };
        let p = profile(&cpu_recording(), &opts).unwrap();
        assert_eq!(p.period, 10_101_010);
        assert_eq!(p.totals, [10, 101_010_100]);
        // A sample taken in user mode has only its user frames.
        assert_eq!(p.samples[1].frames.len(), 1);
        assert!(p.samples.iter().all(|s| s.labels.is_none()));
        assert_eq!(
            profile(&testdata::recording(), &opts).unwrap_err(),
            NoProfile::NoCpuSamples
        );
    }
}
