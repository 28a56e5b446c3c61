//! `/proc/kallsyms`, read once: which kernel functions exist, and address → name for stacks.

use std::collections::HashSet;

use anyhow::Result;

/// Function names in the running kernel's text (`t`/`T` symbols, modules included).
pub(crate) struct Kallsyms {
    functions: HashSet<String>,
    /// The kernel image's data and bss, `[_sdata, _end)`, where kallsyms lists data symbols.
    pub(crate) image_data: Option<(u64, u64)>,
}

impl Kallsyms {
    pub(crate) fn load() -> Result<Self> {
        Ok(Self::parse(&crate::procfs::kallsyms()?))
    }

    /// From `/proc/kallsyms` text already read.
    pub(crate) fn parse(text: &str) -> Self {
        let mut functions = HashSet::new();
        let (mut sdata, mut end) = (None, None);
        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            match (kind, name) {
                ("t" | "T", _) => {
                    functions.insert(name.to_string());
                }
                (_, "_sdata") => sdata = u64::from_str_radix(addr, 16).ok(),
                (_, "_end") => end = u64::from_str_radix(addr, 16).ok(),
                _ => {}
            }
        }
        let image_data = match (sdata, end) {
            (Some(s), Some(e)) if s != 0 && s < e => Some((s, e)),
            _ => None,
        };
        Self {
            functions,
            image_data,
        }
    }

    pub(crate) fn has_function(&self, name: &str) -> bool {
        self.functions.contains(name)
    }
}
