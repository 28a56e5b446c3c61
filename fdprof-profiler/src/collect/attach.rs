//! Attaching the two tracepoint families (tp_btf, else classic tracepoints), and the rollback
//! every family shares.

use aya::{
    Btf, Ebpf,
    programs::{
        BtfTracePoint, Program, TracePoint, tp_btf::BtfTracePointLinkId,
        trace_point::TracePointLinkId,
    },
};
use fdprof_common::probes::Role;

use super::refusal::{ProbeError, program};

pub(crate) use fdprof_common::probes::Attachment;

// Each family is loaded whole, then attached last to first: the closing probe (exit, end) goes
// in before the opening one, so no entry is recorded whose exit could be missed (a stale entry
// would count as a drop or pair with a later exit). On failure nothing of the family stays.

/// A tracepoint family's links, closing probe first: dropped and made again while its
/// programs stay loaded (the daemon's full tracing, switched on for a window).
#[derive(Debug, Default)]
pub(crate) struct Links(Vec<Link>);

#[derive(Debug)]
enum Link {
    TpBtf(&'static str, BtfTracePointLinkId),
    Classic(&'static str, TracePointLinkId),
}

/// Loads a tracepoint family as tp_btf programs and, with `link`, attaches them.
pub(crate) fn tp_btf(
    ebpf: &mut Ebpf,
    family: Role,
    btf: &Btf,
    link: bool,
) -> Result<Links, ProbeError> {
    let programs = family.tp_btf_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (name, tracepoint) in programs {
            let what = || format!("tp_btf {tracepoint}");
            let p: &mut BtfTracePoint = program(ebpf, name)?;
            p.load(tracepoint, btf)
                .map_err(|e| ProbeError::load(what(), e))?;
        }
        match link {
            true => relink(ebpf, family, true),
            false => Ok(Links::default()),
        }
    })
}

/// Loads a tracepoint family as classic tracepoints and, with `link`, attaches them.
pub(crate) fn classic(ebpf: &mut Ebpf, family: Role, link: bool) -> Result<Links, ProbeError> {
    let programs = family.tracepoint_programs();
    let names: Vec<&str> = programs.iter().map(|(p, _, _)| *p).collect();
    with_rollback(ebpf, &names, |ebpf| {
        for (name, category, tracepoint) in programs {
            let p: &mut TracePoint = program(ebpf, name)?;
            p.load()
                .map_err(|e| ProbeError::load(format!("tracepoint {category}:{tracepoint}"), e))?;
        }
        match link {
            true => relink(ebpf, family, false),
            false => Ok(Links::default()),
        }
    })
}

/// Attaches a loaded family, closing probe first, as tp_btf programs or classic tracepoints
/// (as it was loaded). On failure none of its links stays.
pub(crate) fn relink(ebpf: &mut Ebpf, family: Role, tp_btf: bool) -> Result<Links, ProbeError> {
    let mut links = Links::default();
    let made = match tp_btf {
        true => family
            .tp_btf_programs()
            .iter()
            .rev()
            .try_for_each(|(name, tracepoint)| {
                let id = program::<BtfTracePoint>(ebpf, name)?
                    .attach()
                    .map_err(|e| ProbeError::attach(format!("tp_btf {tracepoint}"), e))?;
                links.0.push(Link::TpBtf(name, id));
                Ok(())
            }),
        false => family.tracepoint_programs().iter().rev().try_for_each(
            |(name, category, tracepoint)| {
                let id = program::<TracePoint>(ebpf, name)?
                    .attach(category, tracepoint)
                    .map_err(|e| {
                        ProbeError::attach(format!("tracepoint {category}:{tracepoint}"), e)
                    })?;
                links.0.push(Link::Classic(name, id));
                Ok(())
            },
        ),
    };
    match made {
        Ok(()) => Ok(links),
        Err(e) => {
            let _ = unlink(ebpf, links);
            Err(e)
        }
    }
}

/// Drops a family's links, opening probe first (a syscall in flight still meets its exit);
/// its programs stay loaded.
pub(crate) fn unlink(ebpf: &mut Ebpf, links: Links) -> Result<(), ProbeError> {
    for link in links.0.into_iter().rev() {
        let (name, detached) = match link {
            Link::TpBtf(name, id) => (name, program::<BtfTracePoint>(ebpf, name)?.detach(id)),
            Link::Classic(name, id) => (name, program::<TracePoint>(ebpf, name)?.detach(id)),
        };
        detached.map_err(|e| ProbeError::attach(format!("detach {name}"), e))?;
    }
    Ok(())
}

/// Runs `attach`; if it fails, unloads (and so detaches) every one of `programs`.
pub(crate) fn with_rollback<T, E>(
    ebpf: &mut Ebpf,
    programs: &[&str],
    attach: impl FnOnce(&mut Ebpf) -> Result<T, E>,
) -> Result<T, E> {
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
