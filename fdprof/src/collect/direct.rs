//! Attaching the direct probes (fentry/fexit, else kprobe/kretprobe) on the fd-table functions
//! and the spinlock slow path, role by role, falling back to tracepoint mode where the kernel
//! refuses both.

use anyhow::{Context, Result, anyhow, bail};
use aya::{
    Btf, Ebpf,
    programs::{FEntry, FExit, KProbe},
};

use super::attach::{Attachment, program_of, with_rollback};
use crate::probe::roles::{FoundFunction, FunctionRole, Mode, Role};

fn attach_fentry(
    ebpf: &mut Ebpf,
    btf: &Btf,
    role: Role,
    functions: &[FoundFunction],
) -> Result<()> {
    let pairs = role.fentry_programs();
    let used: Vec<&str> = pairs
        .iter()
        .take(functions.len())
        .flat_map(|(entry, exit)| [*entry, *exit])
        .collect();
    with_rollback(ebpf, &used, |ebpf| {
        // Exit before entry, as for the tracepoint families (see attach.rs).
        for (f, (entry, exit)) in functions.iter().zip(pairs) {
            let p: &mut FEntry = program_of(ebpf, entry)?.try_into()?;
            p.load(&f.name, btf)
                .with_context(|| format!("fentry {}", f.name))?;
            let p: &mut FExit = program_of(ebpf, exit)?.try_into()?;
            p.load(&f.name, btf)
                .with_context(|| format!("fexit {}", f.name))?;
            p.attach()?;
            let p: &mut FEntry = program_of(ebpf, entry)?.try_into()?;
            p.attach()?;
        }
        Ok(())
    })
}

fn attach_kprobe(ebpf: &mut Ebpf, role: Role, functions: &[FoundFunction]) -> Result<()> {
    let (entry, exit) = role
        .kprobe_programs()
        .context("no kprobe programs for role")?;
    with_rollback(ebpf, &[entry, exit], |ebpf| {
        for name in [entry, exit] {
            let p: &mut KProbe = program_of(ebpf, name)?.try_into()?;
            p.load()?;
        }
        // The return probe first, as for the tracepoint families (see attach.rs).
        for name in [exit, entry] {
            let p: &mut KProbe = program_of(ebpf, name)?.try_into()?;
            for f in functions {
                p.attach(&f.name, 0)
                    .with_context(|| format!("{name} on {}", f.name))?;
            }
        }
        Ok(())
    })
}

/// Attaches one role in the requested mode (`None` = most direct that works), and says how:
/// [`Attachment::Tracepoint`] leaves the role to the tracepoint programs.
pub fn attach_role(
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
            Mode::Fentry => attach_fentry(ebpf, btf, role.role, functions),
            _ => attach_kprobe(ebpf, role.role, functions),
        };
        match result {
            Ok(()) => {
                return Ok(Attachment::Direct {
                    mode,
                    functions: names.iter().map(|n| n.to_string()).collect(),
                });
            }
            Err(e) => errors.push(format!("{}: {}", mode.name(), short(&e))),
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

/// The kernel's answer in a few words: the errno of the failing call, else the first line.
fn short(e: &anyhow::Error) -> String {
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(errno) = io.raw_os_error()
        {
            return crate::probe::trial::errno_name(errno);
        }
    }
    let text = format!("{e:#}");
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(120).collect()
}
