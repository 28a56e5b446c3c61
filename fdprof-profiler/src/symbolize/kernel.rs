//! Kernel stacks: address → function + offset from `/proc/kallsyms`, read once.
//!
//! Only text symbols (`t`/`T`, `w`/`W`) are kept. Names live in one string arena and the table
//! is sorted by address, so a lookup is a binary search and the whole table for ~120k–200k
//! symbols costs a few MiB.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

use super::Frame;

/// Name given to addresses that no symbol covers.
pub(crate) const UNKNOWN: &str = "[unknown]";

/// An address further than this past the start of the nearest symbol below it is taken as not
/// belonging to it (kallsyms has no sizes; the gap between the kernel image and the module area,
/// or past the last module, is far larger than any function).
const MAX_FUNCTION_SPAN: u64 = 1 << 20;

const NO_MODULE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Entry {
    name_start: u32,
    name_len: u32,
    /// Index into `modules`, or [`NO_MODULE`] for the core kernel image.
    module: u32,
}

/// Text symbols of the running kernel, sorted by address.
pub struct KernelSymbols {
    addrs: Vec<u64>,
    entries: Vec<Entry>,
    names: String,
    modules: Vec<String>,
    /// Data and bss symbols of the core kernel (kallsyms lists them with
    /// `CONFIG_KALLSYMS_ALL`), sorted by address: static locks are named after them.
    data: Vec<(u64, Entry)>,
    load_time: Duration,
}

impl std::fmt::Debug for KernelSymbols {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelSymbols")
            .field("symbols", &self.addrs.len())
            .field("modules", &self.modules.len())
            .field("load_time", &self.load_time)
            .finish()
    }
}

/// `name` added to `names`, as an entry of `module`.
fn push_name(names: &mut String, name: &str, module: u32) -> Result<Entry> {
    let name_start = u32::try_from(names.len()).context("kallsyms names exceed 4 GiB")?;
    names.push_str(name);
    Ok(Entry {
        name_start,
        name_len: name.len() as u32,
        module,
    })
}

/// The index of module `[m]` in `modules`, added if new.
fn module_index(modules: &mut Vec<String>, m: &str) -> u32 {
    let m = m.trim_start_matches('[').trim_end_matches(']');
    // Lines of one module are contiguous: the last one is nearly always it.
    match modules.iter().rposition(|x| x == m) {
        Some(i) => i as u32,
        None => {
            modules.push(m.to_string());
            (modules.len() - 1) as u32
        }
    }
}

impl KernelSymbols {
    /// Reads and indexes `/proc/kallsyms`. Fails with a clear message when the kernel hides the
    /// addresses (every address 0: not root, or `kernel.kptr_restrict` = 2).
    pub fn load() -> Result<Self> {
        Self::from_kallsyms(&crate::procfs::kallsyms()?)
    }

    /// [`KernelSymbols::load`] from `/proc/kallsyms` text already read (it is large: read once).
    pub(crate) fn from_kallsyms(text: &str) -> Result<Self> {
        let started = Instant::now();
        let mut symbols = Self::parse(text).map_err(|e| {
            let restrict =
                crate::procfs::kernel_setting("kptr_restrict").unwrap_or_else(|| "?".into());
            // SAFETY: geteuid has no preconditions.
            let euid = unsafe { libc::geteuid() };
            e.context(format!(
                "/proc/kallsyms (euid {euid}, kernel.kptr_restrict = {restrict}; kernel stacks \
                 need root and kptr_restrict < 2)"
            ))
        })?;
        symbols.load_time = started.elapsed();
        Ok(symbols)
    }

    /// Builds the table from text in `/proc/kallsyms` format (`ADDR TYPE NAME [MODULE]`).
    pub(crate) fn parse(text: &str) -> Result<Self> {
        let started = Instant::now();
        // (addr, rank, entry); rank picks one name among aliases at the same address.
        let mut rows: Vec<(u64, u8, Entry)> = Vec::with_capacity(text.len() / 40);
        let mut names = String::with_capacity(text.len() / 2);
        let mut modules: Vec<String> = Vec::new();
        let mut lines = 0usize;
        let mut nonzero = false;
        let mut data: Vec<(u64, Entry)> = Vec::new();

        for line in text.lines() {
            let mut parts = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            lines += 1;
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            nonzero |= addr != 0;
            let binding = match kind {
                "T" => 0,
                "W" => 1,
                "t" => 2,
                "w" => 3,
                "D" | "d" | "B" | "b" => {
                    if parts.next().is_none() {
                        data.push((addr, push_name(&mut names, name, NO_MODULE)?));
                    }
                    continue;
                }
                _ => continue,
            };
            let module = parts
                .next()
                .map_or(NO_MODULE, |m| module_index(&mut modules, m));
            let entry = push_name(&mut names, name, module)?;
            rows.push((addr, alias_rank(name, binding), entry));
        }
        if lines == 0 {
            bail!("no symbols found");
        }
        if !nonzero {
            bail!(
                "all {lines} symbol addresses are 0: the kernel hides them from this process, so \
                 kernel stacks cannot be symbolized"
            );
        }

        // Stable sort: among equal (addr, rank) the first listed wins.
        rows.sort_by_key(|&(addr, rank, _)| (addr, rank));
        rows.dedup_by_key(|&mut (addr, _, _)| addr);

        let (addrs, entries) = rows
            .into_iter()
            .map(|(addr, _, entry)| (addr, entry))
            .unzip();
        data.sort_by_key(|&(addr, entry)| (addr, alias_rank(&names[entry.range()], 0)));
        data.dedup_by_key(|&mut (addr, _)| addr);
        Ok(Self {
            addrs,
            entries,
            names,
            modules,
            data,
            load_time: started.elapsed(),
        })
    }

    /// Adds the JIT-ed BPF programs (`bpf_prog_<tag>_<name>`, module `bpf`) that kallsyms lists
    /// now: kallsyms is read before fdprof loads its own programs, which come and go with it.
    /// Addresses already known are kept as they are. Returns how many were added.
    pub(crate) fn add_bpf_programs(&mut self, kallsyms: &str) -> usize {
        let mut added: Vec<(u64, Entry)> = Vec::new();
        for line in kallsyms.lines().filter(|l| l.ends_with("[bpf]")) {
            let mut parts = line.split_ascii_whitespace();
            let (Some(addr), Some(_), Some(name)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 || self.addrs.binary_search(&addr).is_ok() {
                continue;
            }
            let Ok(name_start) = u32::try_from(self.names.len()) else {
                break;
            };
            let module = match self.modules.iter().position(|m| m == "bpf") {
                Some(i) => i as u32,
                None => {
                    self.modules.push("bpf".into());
                    (self.modules.len() - 1) as u32
                }
            };
            self.names.push_str(name);
            added.push((
                addr,
                Entry {
                    name_start,
                    name_len: name.len() as u32,
                    module,
                },
            ));
        }
        if added.is_empty() {
            return 0;
        }
        let n = added.len();
        let mut rows: Vec<(u64, Entry)> = self
            .addrs
            .iter()
            .copied()
            .zip(self.entries.iter().copied())
            .chain(added)
            .collect();
        rows.sort_by_key(|&(addr, _)| addr);
        rows.dedup_by_key(|&mut (addr, _)| addr);
        (self.addrs, self.entries) = rows.into_iter().unzip();
        n
    }

    #[cfg(test)]
    /// Number of distinct symbol addresses kept.
    pub(crate) fn len(&self) -> usize {
        self.addrs.len()
    }

    /// The function covering `addr`: name, offset into it and the module (`None` for the core
    /// kernel). `address` is filled only when `raw` is set (kernel addresses reveal KASLR).
    /// Addresses no symbol covers give function `[unknown]`, offset 0.
    pub(crate) fn resolve(&self, addr: u64, raw: bool) -> Frame {
        let address = raw.then_some(addr);
        match self.lookup(addr) {
            Some((name, offset, module)) => Frame {
                function: name.to_string(),
                offset,
                module: module.map(str::to_string),
                address,
                ..Default::default()
            },
            None => Frame {
                function: UNKNOWN.to_string(),
                offset: 0,
                module: None,
                address,
                ..Default::default()
            },
        }
    }

    #[cfg(test)]
    /// [`resolve`](Self::resolve) for each address of a stack, in order.
    pub(crate) fn resolve_stack(&self, addrs: &[u64], raw: bool) -> Vec<Frame> {
        addrs.iter().map(|&a| self.resolve(a, raw)).collect()
    }

    /// `(function, offset, module)` covering `addr`, without allocating.
    /// The data symbol covering `addr` and the offset into it (core kernel only).
    pub(crate) fn data_symbol(&self, addr: u64) -> Option<(&str, u64)> {
        let idx = self
            .data
            .partition_point(|&(a, _)| a <= addr)
            .checked_sub(1)?;
        let (start, entry) = self.data[idx];
        // Past the last symbol (`_end`) lies no static data.
        if idx + 1 == self.data.len() && addr != start {
            return None;
        }
        Some((&self.names[entry.range()], addr - start))
    }

    pub(crate) fn lookup(&self, addr: u64) -> Option<(&str, u64, Option<&str>)> {
        let idx = self.addrs.partition_point(|&a| a <= addr).checked_sub(1)?;
        let offset = addr - self.addrs[idx];
        if offset >= MAX_FUNCTION_SPAN {
            return None;
        }
        let entry = self.entries[idx];
        let name =
            &self.names[entry.name_start as usize..(entry.name_start + entry.name_len) as usize];
        let module =
            (entry.module != NO_MODULE).then(|| self.modules[entry.module as usize].as_str());
        Some((name, offset, module))
    }
}

impl Entry {
    fn range(&self) -> std::ops::Range<usize> {
        self.name_start as usize..(self.name_start + self.name_len) as usize
    }
}

/// Lower is preferred when several names share one address: real functions over section markers
/// and `__pfx_` padding, global over weak over local, fewer leading underscores.
fn alias_rank(name: &str, binding: u8) -> u8 {
    let marker = name.starts_with("__pfx_")
        || name.ends_with("_text_start")
        || name.ends_with("_text_end")
        || name.starts_with("__pi_");
    let underscores = name.bytes().take_while(|&b| b == b'_').count().min(3) as u8;
    (marker as u8) * 32 + binding * 4 + underscores
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "\
ffffffff81000000 T _stext
ffffffff81000100 T __pfx_foo
ffffffff81000110 t foo
ffffffff81000200 D some_data
ffffffff81000300 t __do_sys_bar
ffffffff81000300 T __x64_sys_bar
ffffffff81000400 W weak_fn
ffffffffc0001000 t ext4_thing\t[ext4]
ffffffffc0001080 T ext4_other\t[ext4]
ffffffffc0002000 t nf_hook\t[nf_tables]
";

    #[test]
    fn resolves_functions_offsets_and_modules() {
        let k = KernelSymbols::parse(SAMPLE).unwrap();
        assert_eq!(k.len(), 8, "data symbol dropped, alias pair merged");
        let f = k.resolve(0xffffffff81000110 + 0x10, false);
        assert_eq!((f.function.as_str(), f.offset), ("foo", 0x10));
        assert_eq!((f.module, f.address), (None, None));
        // padding before foo resolves to its __pfx_ symbol
        assert_eq!(k.resolve(0xffffffff81000105, false).function, "__pfx_foo");
        // alias: the global syscall name wins over the local one
        assert_eq!(
            k.resolve(0xffffffff81000301, false).function,
            "__x64_sys_bar"
        );
        assert_eq!(k.resolve(0xffffffff81000400, false).function, "weak_fn");
        let m = k.resolve(0xffffffffc0001084, true);
        assert_eq!(m.function, "ext4_other");
        assert_eq!(m.offset, 4);
        assert_eq!(m.module.as_deref(), Some("ext4"));
        assert_eq!(m.address, Some(0xffffffffc0001084));
        assert_eq!(
            k.resolve(0xffffffffc0002001, false).module.as_deref(),
            Some("nf_tables")
        );
    }

    #[test]
    fn unknown_addresses() {
        let k = KernelSymbols::parse(SAMPLE).unwrap();
        for addr in [0, 0xffffffff80ffffff, 0xffffffffa0000000, u64::MAX] {
            let f = k.resolve(addr, false);
            assert_eq!(f.function, UNKNOWN, "{addr:#x}");
            assert_eq!((f.offset, f.module, f.address), (0, None, None));
        }
        assert_eq!(k.resolve(7, true).address, Some(7));
    }

    #[test]
    fn bpf_programs_added_later() {
        let mut k = KernelSymbols::parse(SAMPLE).unwrap();
        let prog = "ffffffffa0001000 t bpf_prog_6deef7357e7b4530_fdprof_lock_beg\t[bpf]\n\
                    ffffffff81000110 t foo\n";
        assert_eq!(k.add_bpf_programs(prog), 1, "only the [bpf] line");
        let f = k.resolve(0xffffffffa0001042, false);
        assert_eq!(f.function, "bpf_prog_6deef7357e7b4530_fdprof_lock_beg");
        assert_eq!((f.offset, f.module.as_deref()), (0x42, Some("bpf")));
        assert_eq!(k.resolve(0xffffffff81000111, false).function, "foo");
        assert_eq!(k.add_bpf_programs(prog), 0, "known addresses are kept");
    }

    #[test]
    fn hidden_addresses_are_an_error() {
        let hidden = "0000000000000000 T _stext\n0000000000000000 t foo\n";
        let err = KernelSymbols::parse(hidden).unwrap_err().to_string();
        assert!(err.contains("addresses are 0"), "{err}");
        assert!(KernelSymbols::parse("").is_err());
    }
}
