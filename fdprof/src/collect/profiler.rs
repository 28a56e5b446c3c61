//! The profiler: attach once, in the most direct mode the kernel allows per role; take a
//! snapshot of what the programs aggregated at any moment; finish, leaving nothing loaded.
//! `record` takes one snapshot at the end; a live view takes one per interval and shows the
//! difference between the last two.

use std::collections::BTreeMap;
use std::time::Instant;

use anyhow::{Context, Result, anyhow};
use aya::{Ebpf, EbpfLoader, maps::Array};
use fdprof_common::{
    fnops,
    probes::{Mode, Role, map, setting, target_kind},
};

use super::{
    attach::{self, Attachment},
    direct,
    kernel::Kernel,
    snapshot::{self, Snapshot},
    stats::{self, StatsSampler},
};
use crate::probe::{object, tracefs};

/// What is profiled, as the programs' filter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Tgid(u32),
    Tid(u32),
}

/// How to attach.
#[derive(Debug, Clone, Copy)]
pub struct ProfilerOptions {
    pub filter: Filter,
    /// One mode for every function role; `None` = the most direct that works.
    pub forced: Option<Mode>,
    /// Lock contention only: no fd syscall or fd function probes (the cheapest recording).
    pub lock_only: bool,
}

impl Default for ProfilerOptions {
    fn default() -> Self {
        Self {
            filter: Filter::All,
            forced: None,
            lock_only: false,
        }
    }
}

/// Attached programs. Dropping a `Profiler` (or [`Profiler::finish`]) detaches and unloads
/// everything.
pub struct Profiler {
    ebpf: Ebpf,
    attachments: BTreeMap<Role, Attachment>,
    notes: Vec<String>,
    lock_only: bool,
    stats: StatsSampler,
    attached_at: Instant,
}

impl Profiler {
    /// Loads the programs and attaches them: the function roles one by one, then the tracepoint
    /// families.
    pub fn attach(kernel: &Kernel, opts: ProfilerOptions) -> Result<Self> {
        let (kind, id) = match opts.filter {
            Filter::All => (target_kind::ALL, 0u32),
            Filter::Tgid(p) => (target_kind::TGID, p),
            Filter::Tid(t) => (target_kind::TID, t),
        };
        let o = kernel.offsets;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(&kernel.btf))
            .override_global(setting::TARGET_KIND, &kind, true)
            .override_global(setting::TARGET_ID, &id, true)
            .override_global(setting::OFF_TASK_FILES, &o.task_struct_files, true)
            .override_global(setting::OFF_FILES_NEXT_FD, &o.files_struct_next_fd, true)
            .override_global(setting::OFF_FILES_FDT, &o.files_struct_fdt, true)
            .override_global(
                setting::OFF_FILES_FILE_LOCK,
                &o.files_struct_file_lock,
                true,
            )
            .override_global(setting::OFF_FDT_MAX_FDS, &o.fdtable_max_fds, true)
            .override_global(setting::OFF_FDT_OPEN_FDS, &o.fdtable_open_fds, true)
            .override_global(setting::ALLOC_START_ARG, &kernel.alloc_start_arg(), true)
            .load(object::PROFILER)
            .context("cannot load fdprof's eBPF object")?;
        let mut attachments = BTreeMap::new();
        let mut notes = Vec::new();
        for (role, functions) in &kernel.functions {
            if opts.lock_only && role.role != Role::LockSlowpath {
                attachments.insert(role.role, Attachment::Off);
                continue;
            }
            let how = direct::attach_role(
                &mut ebpf,
                &kernel.btf,
                role,
                functions,
                opts.forced,
                &mut notes,
            )?;
            if role.role == Role::Allocate && how.is_direct() {
                let mut config: Array<_, u32> =
                    Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
                config.set(fnops::CONFIG_DIRECT_ALLOC, 1, 0)?;
            }
            attachments.insert(role.role, how);
        }
        for family in [Role::LockTracepoints, Role::FdSyscalls] {
            if opts.lock_only && family == Role::FdSyscalls {
                attachments.insert(family, Attachment::Off);
                continue;
            }
            let how = match attach::tp_btf(&mut ebpf, family, &kernel.btf) {
                Ok(()) => Attachment::TpBtf,
                Err(btf_err) => {
                    notes.extend(tracefs::ensure_mounted());
                    attach::classic(&mut ebpf, family).map_err(|e| {
                        anyhow!(
                            "cannot attach the {} probes: tp_btf: {btf_err:#}; tracepoint: {e:#}",
                            family.name()
                        )
                    })?;
                    notes.push(format!("{}: tp_btf refused ({btf_err:#})", family.name()));
                    Attachment::ClassicTracepoint
                }
            };
            attachments.insert(family, how);
        }
        Ok(Self {
            ebpf,
            attachments,
            notes,
            lock_only: opts.lock_only,
            stats: StatsSampler::new(),
            attached_at: Instant::now(),
        })
    }

    /// How each role was attached.
    pub fn attachments(&self) -> &BTreeMap<Role, Attachment> {
        &self.attachments
    }

    /// The profile's mode: that of the allocator, the role the product is about; with
    /// `--lock-only`, that of the lock slow path.
    pub fn mode(&self) -> Mode {
        let lead = if self.lock_only {
            Role::LockSlowpath
        } else {
            Role::Allocate
        };
        self.attachments
            .get(&lead)
            .map_or(Mode::Tracepoint, Attachment::mode)
    }

    /// What attaching changed or could not do (fallbacks, tracefs mounted).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Keeps the run-time statistics sampler going; call it every few tens of ms.
    pub fn tick(&mut self) {
        self.stats.tick(self.attached_at.elapsed());
    }

    /// Everything aggregated since attach: per-CPU sums of the maps, the stacks they refer to
    /// and the programs' costs.
    pub fn snapshot(&self) -> Result<Snapshot> {
        let mut snap = snapshot::read(&self.ebpf)?;
        snap.programs = stats::program_costs(&self.ebpf);
        snap.elapsed = self.attached_at.elapsed();
        snap.stats_window = self.stats.sampled_so_far();
        Ok(snap)
    }

    /// Takes the last snapshot, with the statistics sampler stopped so its window is final,
    /// then detaches and unloads every program.
    pub fn finish(mut self) -> Result<Snapshot> {
        self.stats.stop();
        self.snapshot()
    }
}
