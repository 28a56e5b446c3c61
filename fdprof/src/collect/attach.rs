//! Attaching the two tracepoint families (tp_btf, else classic tracepoints), and the rollback
//! every family shares.

use anyhow::{Context, Result};
use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, Program, TracePoint},
};
use fdprof_common::probes::Role;

pub use fdprof_common::probes::Attachment;

// Each family is loaded whole, then attached last to first: the closing probe (exit, end) goes
// in before the opening one, so no entry is recorded whose exit could be missed (a stale entry
// would count as a drop or pair with a later exit). On failure nothing of the family stays.

/// Attaches a tracepoint family as tp_btf programs.
pub fn tp_btf(ebpf: &mut Ebpf, family: Role, btf: &Btf) -> Result<()> {
    let programs = family.tp_btf_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (program, tracepoint) in programs {
            let p: &mut BtfTracePoint = program_of(ebpf, program)?.try_into()?;
            p.load(tracepoint, btf)?;
        }
        for (program, _) in programs.iter().rev() {
            let p: &mut BtfTracePoint = program_of(ebpf, program)?.try_into()?;
            p.attach()?;
        }
        Ok(())
    })
}

/// Attaches a tracepoint family as classic tracepoints.
pub fn classic(ebpf: &mut Ebpf, family: Role) -> Result<()> {
    let programs = family.tracepoint_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (program, _, _) in programs {
            let p: &mut TracePoint = program_of(ebpf, program)?.try_into()?;
            p.load()?;
        }
        for (program, category, name) in programs.iter().rev() {
            let p: &mut TracePoint = program_of(ebpf, program)?.try_into()?;
            p.attach(category, name)?;
        }
        Ok(())
    })
}

/// Runs `attach`; if it fails, unloads (and so detaches) every one of `programs`.
pub fn with_rollback(
    ebpf: &mut Ebpf,
    programs: &[&str],
    attach: impl FnOnce(&mut Ebpf) -> Result<()>,
) -> Result<()> {
    let result = attach(ebpf);
    if result.is_err() {
        for name in programs {
            if let Some(p) = ebpf.program_mut(name) {
                let _ = match p {
                    Program::FEntry(p) => p.unload(),
                    Program::FExit(p) => p.unload(),
                    Program::KProbe(p) => p.unload(),
                    Program::TracePoint(p) => p.unload(),
                    Program::BtfTracePoint(p) => p.unload(),
                    _ => Ok(()),
                };
            }
        }
    }
    result
}

/// The program `name` of the object.
pub fn program_of<'a>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut Program> {
    ebpf.program_mut(name)
        .with_context(|| format!("the eBPF object lacks {name}"))
}
