//! Whether the programs linked at attach still run: each has a link in the kernel's list of
//! links. Tracing, raw tracepoint and perf-event links have no detach, so nothing outside the
//! daemon takes them while it holds them: this catches a relink of its own that failed and left
//! a family out, or a kernel that dropped one. Listing the kernel's links needs CAP_SYS_ADMIN;
//! without it nothing is checked.

use std::collections::{BTreeMap, BTreeSet};
use std::io::ErrorKind;

use aya::{
    Ebpf,
    programs::{links::LinkError, loaded_links},
};
use fdprof_common::probes::Role;

use super::Profiler;

/// The programs to find linked: program id → its name, and whether it is one of the fd
/// syscall programs, linked only while full tracing is on.
#[derive(Debug, Default)]
pub(super) struct Linked(BTreeMap<u32, (String, bool)>);

impl Linked {
    /// The programs linked now, and with `switched` the fd syscall programs (linked for a
    /// window of full tracing, or at rest not yet).
    pub(super) fn at_attach(ebpf: &Ebpf, switched: bool) -> Self {
        let Some(linked) = linked_programs() else {
            return Self::default();
        };
        let fd_syscalls: BTreeSet<&str> = Role::FdSyscalls
            .tp_btf_programs()
            .iter()
            .map(|(name, _)| *name)
            .chain(Role::FdSyscalls.tracepoint_programs().iter().map(|p| p.0))
            .collect();
        let programs = ebpf.programs().filter_map(|(name, p)| {
            let id = p.info().ok()?.id();
            let switches = fd_syscalls.contains(name);
            (linked.contains(&id) || (switched && switches))
                .then(|| (id, (name.to_string(), switches)))
        });
        Self(programs.collect())
    }
}

impl Profiler {
    /// The programs linked at attach that no link in the kernel runs now (the fd syscall
    /// programs only while full tracing is on); none when the kernel's links cannot be listed.
    pub fn unlinked(&self) -> Vec<String> {
        let Some(linked) = linked_programs() else {
            return Vec::new();
        };
        let full = self.full_tracing();
        self.linked
            .0
            .iter()
            .filter(|&(id, &(_, switches))| (full || !switches) && !linked.contains(id))
            .map(|(_, (name, _))| name.clone())
            .collect()
    }
}

/// The ids of the programs some link in the kernel runs; `None` when listing is refused.
fn linked_programs() -> Option<BTreeSet<u32>> {
    let mut ids = BTreeSet::new();
    for link in loaded_links() {
        match link {
            Ok(link) => {
                ids.insert(link.program_id());
            }
            // Closed between its id and its fd.
            Err(LinkError::SyscallError(e)) if e.io_error.kind() == ErrorKind::NotFound => {}
            Err(_) => return None,
        }
    }
    Some(ids)
}
