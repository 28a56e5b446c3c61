//! Loading fdprof's programs with this kernel's offsets and target, and attaching each family in
//! the most direct mode the kernel accepts (tp_btf, else classic tracepoints). Dropping a
//! [`Session`] detaches and unloads everything.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{BtfTracePoint, Program, TracePoint},
};

use aya::maps::Array;
use fdprof_common::{
    fnops,
    probes::{map, setting, target_kind},
};

use super::direct;
use crate::model::recording::ProgramCost;
use crate::probe::{
    btf::Btf as KernelBtf,
    kallsyms::Kallsyms,
    object,
    offsets::KernelOffsets,
    roles::{FUNCTION_ROLES, FoundFunction, FunctionRole, Mode, Role},
    tracefs,
};

/// The kernel functions each direct-probe role resolves to on this kernel.
pub struct KernelFunctions {
    pub roles: Vec<(FunctionRole, Vec<FoundFunction>)>,
}

impl KernelFunctions {
    pub fn resolve(btf: &KernelBtf, kallsyms: &Kallsyms) -> Self {
        Self {
            roles: FUNCTION_ROLES
                .iter()
                .map(|r| (*r, r.resolve(Some(btf), kallsyms)))
                .collect(),
        }
    }

    /// `start` is the first argument of `alloc_fd`, the second of `__alloc_fd(files, …)`.
    fn alloc_start_arg(&self) -> u32 {
        let legacy = self.roles.iter().any(|(r, f)| {
            r.role == Role::Allocate && f.first().is_some_and(|f| f.name == "__alloc_fd")
        });
        u32::from(legacy)
    }
}

/// What is profiled, as the programs' filter sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Filter {
    All,
    Tgid(u32),
    Tid(u32),
}

/// The tracepoint families, attached after the function roles.
const FAMILIES: [Role; 2] = [Role::LockTracepoints, Role::FdSyscalls];

/// What `record` asked for.
#[derive(Debug, Clone, Copy, Default)]
pub struct AttachOptions {
    /// One mode for every direct-probe role; `None` = the most direct that works.
    pub forced: Option<Mode>,
    /// Lock contention only: no fd syscall or fd function probes (the cheapest recording).
    pub lock_only: bool,
}

/// The mode recorded for roles left out by `--lock-only`.
pub const LOCK_ONLY: &str = "off (--lock-only)";

/// Loaded and attached programs.
pub struct Session {
    pub ebpf: Ebpf,
    /// How each role was attached, e.g. `lock_tracepoints` → `tp_btf`.
    pub modes: BTreeMap<String, String>,
    pub notes: Vec<String>,
    pub stats: StatsSampler,
}

/// Kernel BPF run-time statistics (`BPF_ENABLE_STATS`) add two clock reads to every program
/// run: here they doubled what tracing adds to a syscall (+293 ns against +146 ns). They are on
/// for 250 ms of every 10 s only: ns/run comes out exact, totals are those of the sampled
/// windows. Each switch patches kernel text (a static key), so switches stay rare: under qemu
/// TCG, a switch every 100 ms crashed a 6.12 guest.
pub struct StatsSampler {
    on: Option<(OwnedFd, Instant)>,
    window: Duration,
    period: Duration,
    /// Time the statistics were on so far.
    pub sampled: Duration,
}

impl StatsSampler {
    fn new() -> Self {
        Self {
            on: None,
            window: Duration::from_millis(250),
            period: Duration::from_secs(10),
            sampled: Duration::ZERO,
        }
    }

    /// Switches statistics on or off for the moment `elapsed` into the recording.
    pub fn tick(&mut self, elapsed: Duration) {
        let want = elapsed.as_nanos() % self.period.as_nanos() < self.window.as_nanos();
        match (&self.on, want) {
            (None, true) => {
                self.on = aya::sys::enable_stats(aya::sys::Stats::RunTime)
                    .ok()
                    .map(|fd| (fd, Instant::now()));
            }
            (Some(_), false) => self.stop(),
            _ => {}
        }
    }

    /// Switches statistics off (closing the fd is what disables them).
    pub fn stop(&mut self) {
        if let Some((_, since)) = self.on.take() {
            self.sampled += since.elapsed();
        }
    }
}

impl Session {
    /// Loads the programs and attaches them: the direct probes role by role (`forced` picks one
    /// mode, `None` the most direct that works), then the tracepoint families.
    pub fn attach(
        filter: Filter,
        offsets: &KernelOffsets,
        btf: &Btf,
        kernel: &KernelFunctions,
        opts: AttachOptions,
    ) -> Result<Self> {
        let forced = opts.forced;
        let (kind, id) = match filter {
            Filter::All => (target_kind::ALL, 0u32),
            Filter::Tgid(p) => (target_kind::TGID, p),
            Filter::Tid(t) => (target_kind::TID, t),
        };
        let o = *offsets;
        let mut ebpf = EbpfLoader::new()
            .btf(Some(btf))
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
        let mut modes = BTreeMap::new();
        let mut notes = Vec::new();
        for (role, functions) in &kernel.roles {
            if opts.lock_only && role.role != Role::LockSlowpath {
                modes.insert(role.role.name().to_string(), LOCK_ONLY.to_string());
                continue;
            }
            let mode = direct::attach_role(&mut ebpf, btf, role, functions, forced, &mut notes)?;
            if role.role == Role::Allocate && mode != Mode::Tracepoint {
                let mut config: Array<_, u32> =
                    Array::try_from(ebpf.map_mut(map::CONFIG).context("no map CONFIG")?)?;
                config.set(fnops::CONFIG_DIRECT_ALLOC, 1, 0)?;
            }
            let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
            let value = match mode {
                Mode::Tracepoint => "tracepoint".to_string(),
                m => format!("{} ({})", m.name(), names.join(", ")),
            };
            modes.insert(role.role.name().to_string(), value);
        }
        for family in FAMILIES {
            if opts.lock_only && family == Role::FdSyscalls {
                modes.insert(family.name().to_string(), LOCK_ONLY.to_string());
                continue;
            }
            let mode = match attach_tp_btf(&mut ebpf, family, btf) {
                Ok(()) => "tp_btf",
                Err(btf_err) => {
                    notes.extend(tracefs::ensure_mounted());
                    attach_classic(&mut ebpf, family).map_err(|e| {
                        anyhow!(
                            "cannot attach the {} probes: tp_btf: {btf_err:#}; tracepoint: {e:#}",
                            family.name()
                        )
                    })?;
                    notes.push(format!("{}: tp_btf refused ({btf_err:#})", family.name()));
                    "tracepoint"
                }
            };
            modes.insert(family.name().to_string(), mode.to_string());
        }
        Ok(Self {
            ebpf,
            modes,
            notes,
            stats: StatsSampler::new(),
        })
    }

    /// Run time, run count and recursion misses of every attached program.
    pub fn program_costs(&self) -> Vec<ProgramCost> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| {
                let fd = p.fd().ok()?;
                let info = raw_prog_info(fd.as_fd().as_raw_fd())?;
                Some(ProgramCost {
                    name: name.to_string(),
                    run_time_ns: info.0,
                    run_count: info.1,
                    recursion_misses: info.2,
                })
            })
            .collect()
    }
}

// Each family is loaded whole, then attached last to first: the closing probe (exit, end) goes
// in before the opening one, so no entry is recorded whose exit could be missed (a stale entry
// would count as a drop or pair with a later exit). On failure nothing of the family stays.

fn attach_tp_btf(ebpf: &mut Ebpf, family: Role, btf: &Btf) -> Result<()> {
    let programs = family.tp_btf_programs();
    let result = (|| -> Result<()> {
        for (program, tracepoint) in programs {
            let p: &mut BtfTracePoint = program_of(ebpf, program)?.try_into()?;
            p.load(tracepoint, btf)?;
        }
        for (program, _) in programs.iter().rev() {
            let p: &mut BtfTracePoint = program_of(ebpf, program)?.try_into()?;
            p.attach()?;
        }
        Ok(())
    })();
    if result.is_err() {
        for (program, _) in programs {
            if let Some(Program::BtfTracePoint(p)) = ebpf.program_mut(program) {
                let _ = p.unload();
            }
        }
    }
    result
}

fn attach_classic(ebpf: &mut Ebpf, family: Role) -> Result<()> {
    let programs = family.tracepoint_programs();
    let result = (|| -> Result<()> {
        for (program, _, _) in programs {
            let p: &mut TracePoint = program_of(ebpf, program)?.try_into()?;
            p.load()?;
        }
        for (program, category, name) in programs.iter().rev() {
            let p: &mut TracePoint = program_of(ebpf, program)?.try_into()?;
            p.attach(category, name)?;
        }
        Ok(())
    })();
    if result.is_err() {
        for (program, _, _) in programs {
            if let Some(Program::TracePoint(p)) = ebpf.program_mut(program) {
                let _ = p.unload();
            }
        }
    }
    result
}

fn program_of<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program> {
    ebpf.program_mut(name)
        .with_context(|| format!("object lacks {name}"))
}

/// `run_time_ns`, `run_cnt` and `recursion_misses` from `BPF_OBJ_GET_INFO_BY_FD` (aya does not
/// expose recursion misses). Offsets from `struct bpf_prog_info` (stable uapi).
fn raw_prog_info(fd: i32) -> Option<(u64, u64, u64)> {
    const BPF_OBJ_GET_INFO_BY_FD: libc::c_long = 15;
    let mut info = [0u8; 256];
    let mut attr = [0u8; 16];
    attr[0..4].copy_from_slice(&(fd as u32).to_ne_bytes());
    attr[4..8].copy_from_slice(&(info.len() as u32).to_ne_bytes());
    attr[8..16].copy_from_slice(&(info.as_mut_ptr() as u64).to_ne_bytes());
    // SAFETY: attr and info are valid for the sizes given.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            BPF_OBJ_GET_INFO_BY_FD,
            attr.as_mut_ptr(),
            attr.len(),
        )
    };
    if rc != 0 {
        return None;
    }
    let at = |o: usize| u64::from_ne_bytes(info[o..o + 8].try_into().unwrap());
    Some((at(192), at(200), at(208)))
}
