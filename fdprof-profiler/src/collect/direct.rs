//! Attaching the direct probes (fentry/fexit, else kprobe/kretprobe) on the fd-table functions
//! and the spinlock slow path, role by role, falling back to tracepoint mode where the kernel
//! refuses both.

use anyhow::{Result, anyhow, bail};
use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, KProbe},
};

use super::attach::{Attachment, with_rollback};
use super::refusal::{ProbeError, program};
use crate::probe::roles::{FoundFunction, FunctionRole, Mode, Role, SYSCALL_ROLE};

/// Each function with its fentry/fexit pair: the pair of its candidate's position where the
/// role has one pair per candidate (the fd syscalls, the slow path's two forms), else the i-th
/// pair for the i-th function found.
fn fentry_pairs<'a>(
    role: &FunctionRole,
    functions: &'a [FoundFunction],
) -> Vec<(&'a FoundFunction, (&'static str, &'static str))> {
    let pairs = role.role.fentry_programs();
    if pairs.len() == role.candidates.len() {
        functions
            .iter()
            .filter_map(|f| {
                let i = role.candidates.iter().position(|c| *c == f.name)?;
                Some((f, pairs[i]))
            })
            .collect()
    } else {
        functions.iter().zip(pairs.iter().copied()).collect()
    }
}

fn attach_fentry(
    ebpf: &mut Ebpf,
    btf: &Btf,
    role: &FunctionRole,
    functions: &[FoundFunction],
) -> Result<(), ProbeError> {
    let pairs = fentry_pairs(role, functions);
    let used: Vec<&str> = pairs
        .iter()
        .flat_map(|(_, (entry, exit))| [*entry, *exit])
        .collect();
    with_rollback(ebpf, &used, |ebpf| {
        // Exit before entry, as for the tracepoint families (see attach.rs).
        for (f, (entry, exit)) in pairs {
            let (fentry, fexit) = (format!("fentry {}", f.name), format!("fexit {}", f.name));
            let p: &mut FEntry = program(ebpf, entry)?;
            p.load(&f.name, btf)
                .map_err(|e| ProbeError::load(&fentry, e))?;
            let p: &mut FExit = program(ebpf, exit)?;
            p.load(&f.name, btf)
                .map_err(|e| ProbeError::load(&fexit, e))?;
            p.attach().map_err(|e| ProbeError::attach(&fexit, e))?;
            let p: &mut FEntry = program(ebpf, entry)?;
            p.attach().map_err(|e| ProbeError::attach(&fentry, e))?;
        }
        Ok(())
    })
}

fn attach_kprobe(
    ebpf: &mut Ebpf,
    role: Role,
    functions: &[FoundFunction],
) -> Result<(), ProbeError> {
    let (entry, exit) = role
        .kprobe_programs()
        .ok_or_else(|| ProbeError::Unavailable {
            what: format!("kprobes for {}", role.name()),
            message: "fdprof has no kprobe programs for it".into(),
        })?;
    with_rollback(ebpf, &[entry, exit], |ebpf| {
        for name in [entry, exit] {
            let p: &mut KProbe = program(ebpf, name)?;
            p.load().map_err(|e| ProbeError::load(name, e))?;
        }
        // The return probe first, as for the tracepoint families (see attach.rs).
        for name in [exit, entry] {
            let p: &mut KProbe = program(ebpf, name)?;
            for f in functions {
                p.attach(&f.name, 0)
                    .map_err(|e| ProbeError::attach(format!("{name} on {}", f.name), e))?;
            }
        }
        Ok(())
    })
}

/// Attaches one role in the requested mode (`None` = most direct that works), and says how:
/// [`Attachment::Tracepoint`] leaves the role to the tracepoint programs.
pub(crate) fn attach_role(
    ebpf: &mut Ebpf,
    btf: &Btf,
    role: &FunctionRole,
    functions: &[FoundFunction],
    forced: Option<Mode>,
    notes: &mut Vec<String>,
) -> Result<Attachment> {
    if functions.is_empty() {
        if matches!(forced, Some(Mode::Fentry | Mode::Kprobe)) && role.role == Role::Allocate {
            bail!(
                "none of {} exists in this kernel",
                role.candidates.join(", ")
            );
        }
        return Ok(Attachment::Tracepoint);
    }
    let names: Vec<&str> = functions.iter().map(|f| f.name.as_str()).collect();
    let tries: &[Mode] = match forced {
        None => &[Mode::Fentry, Mode::Kprobe],
        Some(Mode::Fentry) => &[Mode::Fentry],
        Some(Mode::Kprobe) => &[Mode::Kprobe],
        Some(Mode::Tracepoint) => &[],
    };
    let mut errors = Vec::new();
    for &mode in tries {
        let result = match mode {
            Mode::Fentry => attach_fentry(ebpf, btf, role, functions),
            _ => attach_kprobe(ebpf, role.role, functions),
        };
        match result {
            Ok(()) => {
                return Ok(Attachment::Direct {
                    mode,
                    functions: names.iter().map(|n| n.to_string()).collect(),
                });
            }
            Err(e) => errors.push(format!("{}: {}", mode.name(), e.short())),
        }
    }
    if let Some(mode @ (Mode::Fentry | Mode::Kprobe)) = forced {
        return Err(anyhow!(
            "cannot attach {} ({}) in {} mode: {}",
            role.role.name(),
            names.join(", "),
            mode.name(),
            errors.join("; ")
        ));
    }
    if !errors.is_empty() {
        notes.push(format!(
            "{} ({}): direct probes refused, tracepoint mode ({})",
            role.role.name(),
            names.join(", "),
            errors.join("; ")
        ));
    }
    Ok(Attachment::Tracepoint)
}

/// Attaches the fd syscalls' own functions (`functions`, those of [`SYSCALL_ROLE`] present) in
/// `mode`, the allocator's, so that no raw syscall tracepoint is needed. `None`: refused, the
/// syscall tracepoints are to be attached instead (an error where the mode is `forced`).
pub(crate) fn attach_syscalls(
    ebpf: &mut Ebpf,
    btf: &Btf,
    functions: &[FoundFunction],
    mode: Mode,
    forced: bool,
    notes: &mut Vec<String>,
) -> Result<Option<Attachment>> {
    let role = &SYSCALL_ROLE;
    let result = match (functions.is_empty(), mode) {
        (true, _) => Err(ProbeError::Unavailable {
            what: "the fd syscalls' functions".into(),
            message: "none of the syscall functions is in this kernel".into(),
        }),
        (false, Mode::Fentry) => each_fentry(ebpf, btf, role, functions)
            .map(|refused| kprobe_where_refused(ebpf, role.role, refused, notes)),
        (false, _) => each_kprobe(ebpf, role.role, functions),
    };
    let refused = match result {
        Ok(refused) => refused,
        Err(e) => {
            let why = format!(
                "cannot attach the fd syscalls' functions in {} mode: {e}",
                mode.name(),
            );
            if forced {
                bail!(why);
            }
            notes.push(format!("{}: {why}; raw syscall tracepoints", role.role));
            return Ok(None);
        }
    };
    let missing: Vec<&str> = role
        .candidates
        .iter()
        .filter(|c| !functions.iter().any(|f| f.name == **c))
        .copied()
        .collect();
    if !missing.is_empty() {
        notes.push(format!(
            "{}: not in this kernel, not counted: {}",
            role.role,
            missing.join(", ")
        ));
    }
    if !refused.is_empty() {
        let why: Vec<String> = refused.iter().map(|(_, e)| e.to_string()).collect();
        notes.push(format!(
            "{}: refused in {}, not counted: {}",
            role.role,
            match mode {
                Mode::Fentry => "fentry and kprobe mode",
                _ => "kprobe mode",
            },
            why.join("; ")
        ));
    }
    Ok(Some(Attachment::Direct {
        mode,
        functions: functions
            .iter()
            .filter(|f| !refused.iter().any(|(name, _)| *name == f.name))
            .map(|f| f.name.clone())
            .collect(),
    }))
}

/// The fd syscalls' functions one by one in fentry mode: a function the kernel refuses (a
/// syscall whose BTF has no argument, say) is left out and returned; an error only when every
/// one is refused.
fn each_fentry(
    ebpf: &mut Ebpf,
    btf: &Btf,
    role: &FunctionRole,
    functions: &[FoundFunction],
) -> Result<Refused, ProbeError> {
    let mut refused = Vec::new();
    for f in functions {
        if let Err(e) = attach_fentry(ebpf, btf, role, std::slice::from_ref(f)) {
            refused.push((f.name.clone(), e));
        }
    }
    all_refused(refused, functions.len())
}

/// The functions fentry refused, tried in kprobe mode (5.10's BTF gives some syscall
/// functions the prototype of their `sys_ni` stub, a pointer to an undefined struct, which its
/// verifier refuses to read): those refused there too are returned.
fn kprobe_where_refused(
    ebpf: &mut Ebpf,
    role: Role,
    refused: Refused,
    notes: &mut Vec<String>,
) -> Refused {
    if refused.is_empty() {
        return refused;
    }
    let functions: Vec<FoundFunction> = refused
        .iter()
        .map(|(name, _)| FoundFunction {
            name: name.clone(),
            btf: true,
            kallsyms: true,
        })
        .collect();
    let again = match each_kprobe(ebpf, role, &functions) {
        Ok(again) => again,
        Err(_) => return refused,
    };
    let moved: Vec<&str> = refused
        .iter()
        .filter(|(name, _)| !again.iter().any(|(n, _)| n == name))
        .map(|(name, _)| name.as_str())
        .collect();
    if !moved.is_empty() {
        let why = refused.first().map(|(_, e)| e.short()).unwrap_or_default();
        notes.push(format!(
            "{role}: fentry refused on {} ({why}): kprobe on them",
            moved.join(", ")
        ));
    }
    again
}

/// As [`each_fentry`], with the one kprobe/kretprobe pair attached to each function.
fn each_kprobe(
    ebpf: &mut Ebpf,
    role: Role,
    functions: &[FoundFunction],
) -> Result<Refused, ProbeError> {
    let (entry, exit) = role
        .kprobe_programs()
        .ok_or_else(|| ProbeError::Unavailable {
            what: format!("kprobes for {}", role.name()),
            message: "fdprof has no kprobe programs for it".into(),
        })?;
    with_rollback(ebpf, &[entry, exit], |ebpf| {
        for name in [entry, exit] {
            let p: &mut KProbe = program(ebpf, name)?;
            p.load().map_err(|e| ProbeError::load(name, e))?;
        }
        let mut refused = Vec::new();
        for f in functions {
            // The return probe first, as for the tracepoint families (see attach.rs); taken
            // off again if the entry probe is refused.
            let p: &mut KProbe = program(ebpf, exit)?;
            let exit_link = match p.attach(&f.name, 0) {
                Ok(link) => link,
                Err(e) => {
                    let e = ProbeError::attach(format!("{exit} on {}", f.name), e);
                    refused.push((f.name.clone(), e));
                    continue;
                }
            };
            let p: &mut KProbe = program(ebpf, entry)?;
            if let Err(e) = p.attach(&f.name, 0) {
                let e = ProbeError::attach(format!("{entry} on {}", f.name), e);
                refused.push((f.name.clone(), e));
                let p: &mut KProbe = program(ebpf, exit)?;
                let _ = p.detach(exit_link);
            }
        }
        all_refused(refused, functions.len())
    })
}

/// The functions refused, each with the kernel's answer.
type Refused = Vec<(String, ProbeError)>;

/// `refused`, unless it holds all `of` the functions: then the first refusal, as the error.
fn all_refused(mut refused: Refused, of: usize) -> Result<Refused, ProbeError> {
    if refused.len() < of {
        return Ok(refused);
    }
    Err(refused.remove(0).1)
}

/// Where `files->file_lock` is taken: the allocator and close functions found for their roles,
/// and the expansion path that drops and takes it again inside the allocator (where it is not
/// inlined into it).
fn locking_functions(functions: &[(FunctionRole, Vec<FoundFunction>)]) -> Vec<String> {
    let of = |role: Role| {
        functions
            .iter()
            .filter(move |(r, _)| r.role == role)
            .flat_map(|(_, found)| found.iter().map(|f| f.name.clone()))
    };
    of(Role::Allocate)
        .chain(of(Role::Close))
        // Before 5.11 `pick_file` takes the lock for close itself; later it is called with it
        // held, and has no such call.
        .chain(["expand_files", "expand_fdtable", "pick_file"].map(String::from))
        .collect()
}

/// `record --trace` in a direct mode: a kprobe just after each call to `_raw_spin_lock` in the
/// functions that take `file_lock` to allocate and close, so that each traced operation has a
/// moment inside the lock. `Off` (with a note) where the kernel's text cannot be read or the
/// kprobes are refused: the replay then orders by entry and exit, as in tracepoint mode.
pub(crate) fn attach_locked_sections(
    ebpf: &mut Ebpf,
    functions: &[(FunctionRole, Vec<FoundFunction>)],
    notes: &mut Vec<String>,
) -> Attachment {
    let names = locking_functions(functions);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let result = crate::probe::text::calls_in(&names, "_raw_spin_lock").and_then(|sites| {
        let allocator = functions
            .iter()
            .find(|(r, _)| r.role == Role::Allocate)
            .and_then(|(_, found)| found.first())
            .map(|f| f.name.as_str());
        if !sites
            .iter()
            .any(|(f, _)| Some(f.trim_end_matches(".cold")) == allocator)
        {
            bail!("no call to _raw_spin_lock found in the allocator");
        }
        let mut attached = Vec::new();
        let kp = fdprof_common::probes::program::KP_LOCKED;
        with_rollback(ebpf, &[kp], |ebpf| {
            let p: &mut KProbe = program(ebpf, kp)?;
            p.load().map_err(|e| ProbeError::load(kp, e))?;
            for (function, offsets) in &sites {
                for &offset in offsets {
                    let site = format!("{function}+{offset:#x}");
                    p.attach(function.as_str(), offset)
                        .map_err(|e| ProbeError::attach(format!("kprobe {site}"), e))?;
                    attached.push(site);
                }
            }
            Ok::<(), ProbeError>(())
        })?;
        Ok(attached)
    });
    match result {
        Ok(functions) => Attachment::Direct {
            mode: Mode::Kprobe,
            functions,
        },
        Err(e) => {
            notes.push(format!(
                "{}: no probe inside file_lock ({}): the trace orders each table's operations \
                 by syscall entry and exit, overlapping ones ambiguous",
                Role::LockedSections.name(),
                short(&e)
            ));
            Attachment::Off
        }
    }
}

/// The kernel's answer in a few words, where the error is a probe's; else its first line.
fn short(e: &anyhow::Error) -> String {
    if let Some(refused) = e.downcast_ref::<ProbeError>() {
        return refused.short();
    }
    let text = format!("{e:#}");
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(120).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::roles::FUNCTION_ROLES;

    fn found(name: &str) -> FoundFunction {
        FoundFunction {
            name: name.into(),
            btf: true,
            kallsyms: true,
        }
    }

    fn pairs_of(role: &FunctionRole, names: &[&str]) -> Vec<(String, &'static str)> {
        let functions: Vec<FoundFunction> = names.iter().map(|n| found(n)).collect();
        fentry_pairs(role, &functions)
            .into_iter()
            .map(|(f, (entry, _))| (f.name.clone(), entry))
            .collect()
    }

    /// A fentry program is bound to its function: with syscall functions missing, each one
    /// present still gets the pair of its own syscall.
    #[test]
    fn each_function_gets_its_own_pair() {
        let got = pairs_of(&SYSCALL_ROLE, &["__x64_sys_openat", "__x64_sys_close"]);
        assert_eq!(
            got,
            [
                ("__x64_sys_openat".into(), "fdprof_fes_1"),
                ("__x64_sys_close".into(), "fdprof_fes_32"),
            ]
        );
        let role = |r: Role| FUNCTION_ROLES.iter().find(|f| f.role == r).unwrap();
        let pv = "__pv_queued_spin_lock_slowpath";
        let got = pairs_of(role(Role::LockSlowpath), &[pv]);
        assert_eq!(got, [(pv.into(), "fdprof_fe_spin2")]);
        let got = pairs_of(role(Role::Allocate), &["__alloc_fd"]);
        assert_eq!(got, [("__alloc_fd".into(), "fdprof_fe_alloc")]);
    }

    /// Reports name a role's few functions, and count the syscall functions.
    #[test]
    fn many_functions_are_counted_not_listed() {
        let direct = |names: &[&str]| Attachment::Direct {
            mode: Mode::Fentry,
            functions: names.iter().map(|n| n.to_string()).collect(),
        };
        assert_eq!(direct(&["alloc_fd"]).to_string(), "fentry (alloc_fd)");
        let all = direct(&fdprof_common::probes::SYSCALL_FUNCTIONS);
        assert_eq!(all.to_string(), "fentry (36 syscall functions)");
        // And a recording holding every syscall function reads back; twice as many does not.
        let json = serde_json::to_string(&all).unwrap();
        assert_eq!(serde_json::from_str::<Attachment>(&json).unwrap(), all);
        let names: Vec<&str> = fdprof_common::probes::SYSCALL_FUNCTIONS.repeat(2);
        let json = serde_json::to_string(&direct(&names)).unwrap();
        assert!(serde_json::from_str::<Attachment>(&json).is_ok());
        let json = serde_json::to_string(&direct(&[names.as_slice(), &["x"]].concat())).unwrap();
        assert!(serde_json::from_str::<Attachment>(&json).is_err());
    }
}
