//! `/proc/kallsyms`: the kernel's symbols. Large (a few MB), read whole and unbounded: the
//! kernel writes it, and its readers need every line; each caller reads it once and parses it.

use anyhow::{Context, Result};

/// The text of `/proc/kallsyms` now.
pub(crate) fn kallsyms() -> Result<String> {
    std::fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")
}
