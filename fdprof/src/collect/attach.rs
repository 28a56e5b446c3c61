//! Attaching the two tracepoint families (tp_btf, else classic tracepoints), and the rollback
//! every family shares.

use aya::{
    Btf, Ebpf,
    programs::{BtfTracePoint, Program, TracePoint},
};
use fdprof_common::probes::Role;

use super::refusal::{ProbeError, program};

pub(crate) use fdprof_common::probes::Attachment;

// Each family is loaded whole, then attached last to first: the closing probe (exit, end) goes
// in before the opening one, so no entry is recorded whose exit could be missed (a stale entry
// would count as a drop or pair with a later exit). On failure nothing of the family stays.

/// Attaches a tracepoint family as tp_btf programs.
pub(crate) fn tp_btf(ebpf: &mut Ebpf, family: Role, btf: &Btf) -> Result<(), ProbeError> {
    let programs = family.tp_btf_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (name, tracepoint) in programs {
            let what = || format!("tp_btf {tracepoint}");
            let p: &mut BtfTracePoint = program(ebpf, name)?;
            p.load(tracepoint, btf)
                .map_err(|e| ProbeError::load(what(), e))?;
        }
        for (name, tracepoint) in programs.iter().rev() {
            let p: &mut BtfTracePoint = program(ebpf, name)?;
            p.attach()
                .map_err(|e| ProbeError::attach(format!("tp_btf {tracepoint}"), e))?;
        }
        Ok(())
    })
}

/// Attaches a tracepoint family as classic tracepoints.
pub fn classic(ebpf: &mut Ebpf, family: Role) -> Result<(), ProbeError> {
    let programs = family.tracepoint_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (name, category, tracepoint) in programs {
            let p: &mut TracePoint = program(ebpf, name)?;
            p.load()
                .map_err(|e| ProbeError::load(format!("tracepoint {category}:{tracepoint}"), e))?;
        }
        for (name, category, tracepoint) in programs.iter().rev() {
            let p: &mut TracePoint = program(ebpf, name)?;
            p.attach(category, tracepoint).map_err(|e| {
                ProbeError::attach(format!("tracepoint {category}:{tracepoint}"), e)
            })?;
        }
        Ok(())
    })
}

/// Runs `attach`; if it fails, unloads (and so detaches) every one of `programs`.
pub(crate) fn with_rollback<E>(
    ebpf: &mut Ebpf,
    programs: &[&str],
    attach: impl FnOnce(&mut Ebpf) -> Result<(), E>,
) -> Result<(), E> {
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
