//! `/proc/kallsyms`, read once: which kernel functions exist, and address → name for stacks.

use std::collections::HashSet;

use anyhow::{Context, Result};

/// Function names in the running kernel's text (`t`/`T` symbols, modules included).
pub struct Kallsyms {
    functions: HashSet<String>,
}

impl Kallsyms {
    pub fn load() -> Result<Self> {
        let text =
            std::fs::read_to_string("/proc/kallsyms").context("cannot read /proc/kallsyms")?;
        Ok(Self::parse(&text))
    }

    /// From `/proc/kallsyms` text already read.
    pub fn parse(text: &str) -> Self {
        let functions = text
            .lines()
            .filter_map(|line| {
                let mut parts = line.split_ascii_whitespace();
                let (_addr, kind, name) = (parts.next()?, parts.next()?, parts.next()?);
                matches!(kind, "t" | "T").then(|| name.to_string())
            })
            .collect();
        Self { functions }
    }

    pub fn has_function(&self, name: &str) -> bool {
        self.functions.contains(name)
    }
}
