//! Finds out what the kernel allows by doing it: load an empty program, attach it, detach it.
//! Never guessed from the kernel version.

use std::io;

use aya::{
    Btf, Ebpf, EbpfLoader,
    programs::{
        BtfTracePoint, FEntry, FExit, KProbe, PerfEvent, Program, ProgramError, TracePoint,
        perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use serde::Serialize;

use super::object;

/// The result of one load + attach attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Outcome {
    Works,
    /// The kernel answered with an error at `stage` ("load" or "attach").
    Refused {
        stage: &'static str,
        errno: Option<String>,
        message: String,
    },
    /// The mechanism or the target does not exist on this kernel.
    Unavailable {
        message: String,
    },
}

impl Outcome {
    pub(crate) fn works(&self) -> bool {
        matches!(self, Outcome::Works)
    }

    /// A short human form: `works`, `refused at load: EPERM`, `unavailable: …`.
    pub(crate) fn summary(&self) -> String {
        match self {
            Outcome::Works => "works".into(),
            Outcome::Refused {
                stage,
                errno: Some(e),
                ..
            } => format!("refused at {stage}: {e}"),
            Outcome::Refused { stage, message, .. } => format!("refused at {stage}: {message}"),
            Outcome::Unavailable { message } => format!("unavailable: {message}"),
        }
    }
}

/// Symbolic name of an errno the BPF syscalls return.
pub(crate) fn errno_name(errno: i32) -> String {
    let name = match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::E2BIG => "E2BIG",
        libc::EBADF => "EBADF",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        524 => "ENOTSUPP",
        _ => return format!("errno {errno}"),
    };
    name.to_string()
}

/// The first OS error in an error's source chain.
fn os_error<'a>(err: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>()
            && io.raw_os_error().is_some()
        {
            return Some(io);
        }
        cur = e.source();
    }
    None
}

fn failed(stage: &'static str, err: ProgramError) -> Outcome {
    let message = err.to_string();
    let first_line = message.lines().next().unwrap_or_default().to_string();
    match os_error(&err).and_then(|io| io.raw_os_error()) {
        // A missing kprobe PMU / kprobe_events file, or no such tracepoint or function.
        Some(libc::ENOENT) => Outcome::Unavailable {
            message: format!("ENOENT at {stage} ({first_line})"),
        },
        Some(errno) => Outcome::Refused {
            stage,
            errno: Some(errno_name(errno)),
            message: first_line,
        },
        None => Outcome::Refused {
            stage,
            errno: None,
            message: first_line,
        },
    }
}

/// Runs trials against one kernel BTF, loading the doctor object afresh for each. Without
/// usable BTF, the BTF-typed mechanisms (fentry, fexit, tp_btf) are unavailable and the others
/// are still tried.
pub(crate) struct Trials {
    btf: Result<Btf, String>,
}

impl Trials {
    pub(crate) fn new(btf_path: &std::path::Path) -> Self {
        let btf = Btf::parse_file(btf_path, aya::Endianness::default())
            .map_err(|_| "needs the kernel's BTF, which is unusable (see BTF above)".to_string());
        Self { btf }
    }

    /// Runs `f` on the doctor object's program `name`, BTF-typed: without the kernel's BTF the
    /// mechanism is unavailable.
    fn with_typed(&self, name: &str, f: impl FnOnce(&mut Program, &Btf) -> Outcome) -> Outcome {
        match &self.btf {
            Ok(btf) => self.with_program(name, Some(btf), |p| f(p, btf)),
            Err(e) => Outcome::Unavailable { message: e.clone() },
        }
    }

    /// Runs `f` on the doctor object's program `name`, loaded with `btf` where there is one.
    fn with_program(
        &self,
        name: &str,
        btf: Option<&Btf>,
        f: impl FnOnce(&mut Program) -> Outcome,
    ) -> Outcome {
        let mut ebpf: Ebpf = match EbpfLoader::new().btf(btf).load(object::DOCTOR) {
            Ok(e) => e,
            Err(e) => {
                return Outcome::Refused {
                    stage: "load",
                    errno: None,
                    message: e.to_string(),
                };
            }
        };
        let program = ebpf
            .program_mut(name)
            .unwrap_or_else(|| panic!("doctor object lacks {name}"));
        // Dropping `ebpf` detaches and unloads everything the trial created.
        f(program)
    }

    pub(crate) fn fentry(&self, function: &str) -> Outcome {
        self.with_typed("fdprof_try_fentry", |p, btf| {
            let p: &mut FEntry = p.try_into().expect("fentry program");
            if let Err(e) = p.load(function, btf) {
                return failed("load", e);
            }
            p.attach()
                .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }

    pub(crate) fn fexit(&self, function: &str) -> Outcome {
        self.with_typed("fdprof_try_fexit", |p, btf| {
            let p: &mut FExit = p.try_into().expect("fexit program");
            if let Err(e) = p.load(function, btf) {
                return failed("load", e);
            }
            p.attach()
                .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }

    pub(crate) fn kprobe(&self, function: &str, ret: bool) -> Outcome {
        let name = if ret {
            "fdprof_try_kretprobe"
        } else {
            "fdprof_try_kprobe"
        };
        self.with_program(name, self.btf.as_ref().ok(), |p| {
            let p: &mut KProbe = p.try_into().expect("kprobe program");
            if let Err(e) = p.load() {
                return failed("load", e);
            }
            p.attach(function, 0)
                .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }

    pub(crate) fn tracepoint(&self, category: &str, name: &str) -> Outcome {
        self.with_program("fdprof_try_tracepoint", self.btf.as_ref().ok(), |p| {
            let p: &mut TracePoint = p.try_into().expect("tracepoint program");
            if let Err(e) = p.load() {
                return failed("load", e);
            }
            p.attach(category, name)
                .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }

    pub(crate) fn tp_btf(&self, name: &str) -> Outcome {
        self.with_typed("fdprof_try_tp_btf", |p, btf| {
            let p: &mut BtfTracePoint = p.try_into().expect("tp_btf program");
            if let Err(e) = p.load(name, btf) {
                return failed("load", e);
            }
            p.attach()
                .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }

    /// Whether the kernel has the helper `bpf_get_current_task_btf` (5.11+): a tp_btf program
    /// on `sys_enter` that calls it, loaded, not attached.
    pub(crate) fn task_btf(&self) -> Outcome {
        self.with_typed("fdprof_try_task_btf", |p, btf| {
            let p: &mut BtfTracePoint = p.try_into().expect("tp_btf program");
            p.load("sys_enter", btf)
                .map_or_else(|e| failed("load", e), |_| Outcome::Works)
        })
    }

    pub(crate) fn cpu_clock(&self) -> Outcome {
        self.with_program("fdprof_try_perf_event", self.btf.as_ref().ok(), |p| {
            let p: &mut PerfEvent = p.try_into().expect("perf_event program");
            if let Err(e) = p.load() {
                return failed("load", e);
            }
            p.attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::AllProcessesOneCpu { cpu: 0 },
                SamplePolicy::Frequency(99),
                false,
            )
            .map_or_else(|e| failed("attach", e), |_| Outcome::Works)
        })
    }
}
