//! The targets named on the command line or in a config file, checked: exactly one kind, and
//! each one something the daemon can follow.

use std::path::PathBuf;

use anyhow::Result;
use fdprof_profiler::collect::cgroups::Cgroup;
use fdprof_profiler::error::{EXIT_USAGE, fatal};

use super::Targets;

/// A comm is at most this many bytes (TASK_COMM_LEN less its NUL): a longer name never matches.
const COMM_MAX: usize = 15;

/// How an error names a bad target: by its value (the command line, which the user typed), or
/// by its key and place (a config file, whose values are never quoted back).
#[derive(Clone, Copy)]
pub(super) enum Shown {
    Value,
    Key,
}

impl Targets {
    /// The one kind of target given (pids, comms, cgroups or all), checked; errors exit with
    /// the usage code.
    pub(super) fn given(
        pids: &[u32],
        comms: &[String],
        cgroups: &[PathBuf],
        all: bool,
        shown: Shown,
    ) -> Result<Targets> {
        let given = usize::from(!pids.is_empty())
            + usize::from(!comms.is_empty())
            + usize::from(!cgroups.is_empty())
            + usize::from(all);
        if given != 1 {
            return Err(fatal(
                EXIT_USAGE,
                "give exactly one of pid, comm, cgroup or all",
            ));
        }
        if all {
            return Ok(Targets::All);
        }
        if !cgroups.is_empty() {
            return cgroups_of(cgroups, shown).map(Targets::Cgroups);
        }
        if !pids.is_empty() {
            if pids.contains(&0) {
                return Err(fatal(EXIT_USAGE, "0 is not a process id"));
            }
            return Ok(Targets::Pids(pids.to_vec()));
        }
        for (i, c) in comms.iter().enumerate() {
            if c.is_empty() || c.len() > COMM_MAX {
                let which = match shown {
                    Shown::Value => format!("{:?}", fdprof_recording::escape::name(c)),
                    Shown::Key => format!("entry {}", i + 1),
                };
                return Err(fatal(
                    EXIT_USAGE,
                    format!("comm {which} can never match: a comm is 1 to {COMM_MAX} bytes"),
                ));
            }
        }
        Ok(Targets::Comms(comms.to_vec()))
    }
}

/// The cgroups at `paths`, each once.
fn cgroups_of(paths: &[PathBuf], shown: Shown) -> Result<Vec<Cgroup>> {
    let mut checked: Vec<Cgroup> = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let c = Cgroup::resolve(path).map_err(|e| match shown {
            Shown::Value => e,
            Shown::Key => fatal(
                EXIT_USAGE,
                format!(
                    "cgroup entry {} is not a cgroup fdprof can follow (a directory under \
                     /sys/fs/cgroup)",
                    i + 1
                ),
            ),
        })?;
        if !checked.contains(&c) {
            checked.push(c);
        }
    }
    Ok(checked)
}
