//! Why a probe could not be put in place, as the attach code decides on it: refused by the
//! kernel at load (the verifier, a missing privilege) or at attach, or not available in this
//! kernel at all. Each mode's attach returns one; the caller falls back to the next mode or, where
//! the mode was asked for, stops with it.

use std::fmt;

use aya::programs::{Program, ProgramError};

/// Where the kernel said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Load,
    Attach,
}

impl Stage {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Stage::Load => "load",
            Stage::Attach => "attach",
        }
    }
}

#[derive(Debug)]
pub(crate) enum ProbeError {
    /// The kernel refused `what` at `stage`: its errno, and the verifier's reason at load.
    Refused {
        what: String,
        stage: Stage,
        errno: Option<i32>,
        verifier: Option<String>,
        message: String,
    },
    /// `what` is not in this kernel (no such function, tracepoint or PMU: ENOENT) or not in
    /// fdprof's eBPF object.
    Unavailable { what: String, message: String },
}

impl ProbeError {
    /// `what` failed to load.
    pub(crate) fn load(what: impl Into<String>, e: ProgramError) -> Self {
        Self::of(what.into(), Stage::Load, e)
    }

    /// `what` loaded, and failed to attach.
    pub(crate) fn attach(what: impl Into<String>, e: ProgramError) -> Self {
        Self::of(what.into(), Stage::Attach, e)
    }

    fn of(what: String, stage: Stage, e: ProgramError) -> Self {
        let message = e.to_string().lines().next().unwrap_or_default().to_string();
        if let ProgramError::LoadError {
            io_error,
            verifier_log,
        } = &e
        {
            return ProbeError::Refused {
                what,
                stage,
                errno: io_error.raw_os_error(),
                verifier: verifier_reason(&verifier_log.to_string()),
                message,
            };
        }
        match os_errno(&e) {
            Some(libc::ENOENT) => ProbeError::Unavailable { what, message },
            errno => ProbeError::Refused {
                what,
                stage,
                errno,
                verifier: None,
                message,
            },
        }
    }

    /// The kernel's answer in a few words: the errno (with the verifier's reason where it
    /// refused the program), else the first line of the error.
    pub(crate) fn short(&self) -> String {
        match self {
            ProbeError::Refused {
                errno: Some(errno),
                verifier,
                ..
            } => {
                let name = crate::probe::trial::errno_name(*errno);
                match verifier {
                    Some(reason) => format!("{name} (verifier: {})", crate::escape::name(reason)),
                    None => name,
                }
            }
            ProbeError::Refused { message, .. } | ProbeError::Unavailable { message, .. } => {
                message.chars().take(120).collect()
            }
        }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Refused { what, stage, .. } => {
                write!(f, "{what}: refused at {}: {}", stage.name(), self.short())
            }
            ProbeError::Unavailable { what, .. } => {
                write!(f, "{what}: not in this kernel ({})", self.short())
            }
        }
    }
}

impl std::error::Error for ProbeError {}

/// The program `name` of the object as a `T` (`FEntry`, `KProbe`, …); unavailable if the
/// object lacks it.
pub(crate) fn program<'a, T>(ebpf: &'a mut aya::Ebpf, name: &str) -> Result<&'a mut T, ProbeError>
where
    &'a mut T: TryFrom<&'a mut Program, Error = ProgramError>,
{
    let program = ebpf
        .program_mut(name)
        .ok_or_else(|| ProbeError::Unavailable {
            what: name.to_string(),
            message: "the eBPF object lacks it".into(),
        })?;
    program.try_into().map_err(|e| ProbeError::load(name, e))
}

/// The verifier's reason: the last line before its statistics, at most 160 characters.
fn verifier_reason(log: &str) -> Option<String> {
    const STATISTICS: [&str; 4] = [
        "processed ",
        "verification time",
        "stack depth",
        "max_states_per_insn",
    ];
    log.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .rfind(|l| !STATISTICS.iter().any(|s| l.starts_with(s)))
        .map(|r| r.chars().take(160).collect())
}

/// The first OS errno in an error's source chain.
fn os_errno(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(errno) = io.raw_os_error()
        {
            return Some(errno);
        }
        cur = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_answer_is_told_by_stage_and_errno() {
        let eperm = ProbeError::attach(
            "fentry alloc_fd",
            ProgramError::SyscallError(aya::sys::SyscallError {
                call: "bpf_link_create",
                io_error: std::io::Error::from_raw_os_error(libc::EPERM),
            }),
        );
        assert!(matches!(
            eperm,
            ProbeError::Refused {
                stage: Stage::Attach,
                errno: Some(libc::EPERM),
                ..
            }
        ));
        assert_eq!(
            eperm.to_string(),
            "fentry alloc_fd: refused at attach: EPERM"
        );
        let missing = ProbeError::attach(
            "kprobe alloc_fd",
            ProgramError::SyscallError(aya::sys::SyscallError {
                call: "perf_event_open",
                io_error: std::io::Error::from_raw_os_error(libc::ENOENT),
            }),
        );
        assert!(
            matches!(missing, ProbeError::Unavailable { .. }),
            "{missing}"
        );
        assert_eq!(
            verifier_reason("0: R1 ok\ninvalid mem access 'scalar'\nprocessed 12 insns\n")
                .as_deref(),
            Some("invalid mem access 'scalar'")
        );
    }
}
