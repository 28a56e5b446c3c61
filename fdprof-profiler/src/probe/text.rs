//! The running kernel's machine code, read from `/proc/kcore` (root): where a function calls
//! another, so that a kprobe can sit on the instruction right after the call. fdprof uses it to
//! find each `spin_lock(&files->file_lock)` of the allocator and close paths
//! ([`Role::LockedSections`](super::roles::Role::LockedSections)); the kernel itself refuses
//! a kprobe whose offset is not an instruction boundary, so a wrong match cannot attach.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;

use anyhow::{Context, Result, bail};

/// A function's text: its address and length (up to the next text symbol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub addr: u64,
    pub len: u64,
}

/// Functions longer than this are not read (the ones looked at are a few hundred bytes).
const MAX_FUNCTION: u64 = 64 * 1024;

/// The kernel's text symbols in `/proc/kallsyms` text, by address.
fn text_symbols(kallsyms: &str) -> Vec<(u64, &str)> {
    let mut text: Vec<(u64, &str)> = kallsyms
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_ascii_whitespace();
            let addr = u64::from_str_radix(parts.next()?, 16).ok()?;
            let kind = parts.next()?;
            let name = parts.next()?;
            (matches!(kind, "t" | "T") && addr != 0).then_some((addr, name))
        })
        .collect();
    text.sort_unstable();
    text
}

/// The spans of `names` (and of their `.cold` parts) among `text` ([`text_symbols`]); the
/// first of duplicate names wins.
fn spans(text: &[(u64, &str)], names: &[&str]) -> HashMap<String, Span> {
    let wanted = |name: &str| {
        names
            .iter()
            .any(|n| name == *n || name.strip_suffix(".cold") == Some(n))
    };
    let mut out = HashMap::new();
    for (i, &(addr, name)) in text.iter().enumerate() {
        if !wanted(name) || out.contains_key(name) {
            continue;
        }
        let Some(&(next, _)) = text[i + 1..].iter().find(|(a, _)| *a > addr) else {
            continue;
        };
        let len = next - addr;
        if len <= MAX_FUNCTION {
            out.insert(name.to_string(), Span { addr, len });
        }
    }
    out
}

/// Offsets in `code` (a function's text at address `base`) just past each direct `call` to
/// `target` (`e8` and a 32-bit displacement).
pub(crate) fn after_calls(code: &[u8], base: u64, target: u64) -> Vec<u64> {
    let mut out = Vec::new();
    for i in 0..code.len().saturating_sub(4) {
        if code[i] != 0xe8 {
            continue;
        }
        let rel = i32::from_le_bytes([code[i + 1], code[i + 2], code[i + 3], code[i + 4]]);
        let next = base.wrapping_add(i as u64 + 5);
        if next.wrapping_add(rel as i64 as u64) == target {
            out.push(i as u64 + 5);
        }
    }
    out
}

/// The kernel's memory as `/proc/kcore`'s ELF program headers map it.
pub(crate) struct Kcore {
    file: File,
    /// (virtual address, length, file offset) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl Kcore {
    pub(crate) fn open() -> Result<Self> {
        let file = crate::procfs::kcore().context("cannot open /proc/kcore")?;
        let mut header = [0u8; 64];
        file.read_exact_at(&mut header, 0)
            .context("cannot read /proc/kcore")?;
        if &header[..4] != b"\x7fELF" || header[4] != 2 || header[5] != 1 {
            bail!("/proc/kcore is not a little-endian ELF64 file");
        }
        let u16_at = |o: usize| u64::from(u16::from_le_bytes([header[o], header[o + 1]]));
        let phoff = u64::from_le_bytes(header[0x20..0x28].try_into()?);
        let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
        if phentsize < 56 || phnum == 0 || phnum > 4096 {
            bail!("/proc/kcore has unexpected program headers");
        }
        let mut table = vec![0u8; (phentsize * phnum) as usize];
        file.read_exact_at(&mut table, phoff)
            .context("cannot read /proc/kcore's program headers")?;
        let segments = table
            .chunks_exact(phentsize as usize)
            .filter(|ph| u32::from_le_bytes(ph[0..4].try_into().unwrap()) == 1)
            .map(|ph| {
                let word = |o: usize| u64::from_le_bytes(ph[o..o + 8].try_into().unwrap());
                (word(16), word(32), word(8))
            })
            .collect();
        Ok(Self { file, segments })
    }

    /// `len` bytes of kernel memory at `addr`.
    pub(crate) fn read(&self, addr: u64, len: u64) -> Result<Vec<u8>> {
        let &(vaddr, _, offset) = self
            .segments
            .iter()
            .find(|(v, l, _)| *v <= addr && addr.saturating_add(len) <= v.saturating_add(*l))
            .with_context(|| format!("no /proc/kcore segment holds {len} bytes of text"))?;
        let mut buf = vec![0u8; len as usize];
        self.file
            .read_exact_at(&mut buf, offset + (addr - vaddr))
            .context("cannot read kernel text from /proc/kcore")?;
        Ok(buf)
    }
}

/// Each `function` (and its `.cold` part) with the offsets just past its calls to `callee`,
/// read from the running kernel; functions without such a call are left out.
pub(crate) fn calls_in(functions: &[&str], callee: &str) -> Result<Vec<(String, Vec<u64>)>> {
    let kallsyms = crate::procfs::kallsyms()?;
    let text = text_symbols(&kallsyms);
    let target = text
        .iter()
        .find(|(_, name)| *name == callee)
        .map(|&(addr, _)| addr)
        .with_context(|| format!("{callee} is not in /proc/kallsyms (or addresses are hidden)"))?;
    let kcore = Kcore::open()?;
    let mut out = Vec::new();
    let mut spans: Vec<(String, Span)> = spans(&text, functions).into_iter().collect();
    spans.sort_by(|a, b| a.0.cmp(&b.0));
    for (name, span) in spans {
        let code = kcore.read(span.addr, span.len)?;
        let offsets = after_calls(&code, span.addr, target);
        if !offsets.is_empty() {
            out.push((name, offsets));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_found_by_their_target() {
        let base = 0xffff_ffff_8100_0000u64;
        let target = 0xffff_ffff_8200_0000u64;
        // endbr64; a 5-byte nop; call target; mov; call elsewhere; call target at the end.
        let mut code = vec![0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        let call = |code: &mut Vec<u8>, to: u64| {
            let next = base + code.len() as u64 + 5;
            code.push(0xe8);
            code.extend_from_slice(&((to.wrapping_sub(next)) as i32).to_le_bytes());
        };
        call(&mut code, target);
        code.extend_from_slice(&[0x48, 0x89, 0xc7]);
        call(&mut code, target + 16);
        call(&mut code, target);
        assert_eq!(after_calls(&code, base, target), vec![14, 27]);
        assert_eq!(after_calls(&code[..13], base, target), Vec::<u64>::new());
    }

    #[test]
    fn spans_run_to_the_next_text_symbol() {
        let text = "ffffffff81000000 T alloc_fd\n\
                    ffffffff81000000 t alloc_fd_alias\n\
                    ffffffff81000120 t expand_files\n\
                    ffffffff81000200 d some_data\n\
                    ffffffff81000300 T next_one\n\
                    ffffffff81900000 t alloc_fd.cold\n\
                    ffffffff81900040 t other.cold\n";
        let s = spans(&text_symbols(text), &["alloc_fd", "expand_files"]);
        assert_eq!(
            s["alloc_fd"],
            Span {
                addr: 0xffff_ffff_8100_0000,
                len: 0x120
            }
        );
        assert_eq!(s["expand_files"].len, 0x1e0, "data symbols do not end text");
        assert_eq!(s["alloc_fd.cold"].len, 0x40);
        assert_eq!(s.len(), 3);
        assert!(text_symbols(text).contains(&(0xffff_ffff_8100_0300, "next_one")));
        assert!(text_symbols("0000000000000000 T x\n").is_empty(), "hidden");
    }
}
