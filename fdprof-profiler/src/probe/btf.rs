//! A small reader for the kernel's BTF (`/sys/kernel/btf/vmlinux`): just enough to find struct
//! member offsets and whether a function has a BTF entry (which fentry needs).
//!
//! The Rust eBPF programs carry no CO-RE relocations, so every field they read is located here at
//! start-up and handed to them as a load-time global.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};

const MAGIC: u16 = 0xeb9f;

/// Where the running kernel exposes its BTF.
pub const SYS_FS: &str = "/sys/kernel/btf/vmlinux";

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_TYPE_TAG: u32 = 18;
const KIND_ENUM64: u32 = 19;

#[derive(Debug, Clone, Copy)]
struct Member {
    name_off: u32,
    type_id: u32,
    /// Offset in bits from the start of the enclosing struct or union.
    bit_offset: u32,
}

#[derive(Debug)]
struct Type {
    name_off: u32,
    kind: u32,
    /// `type` for modifiers, typedefs and pointers.
    referenced: u32,
    members: Vec<Member>,
}

/// Parsed type information of one BTF blob.
pub(crate) struct Btf {
    strings: Vec<u8>,
    /// Index 0 is BTF's `void`.
    types: Vec<Type>,
    structs_by_name: HashMap<String, u32>,
    funcs: HashMap<String, u32>,
}

fn u32_at(data: &[u8], at: usize) -> Result<u32> {
    let bytes = data
        .get(at..at + 4)
        .context("BTF data ends in the middle of a record")?;
    Ok(u32::from_le_bytes(bytes.try_into().unwrap()))
}

/// The `vlen` members of a struct or union, at the start of `data` (12 bytes each).
fn struct_members(data: &[u8], vlen: usize, bitfield_offsets: bool) -> Result<Vec<Member>> {
    (0..vlen)
        .map(|i| {
            let m = i * 12;
            let raw_offset = u32_at(data, m + 8)?;
            Ok(Member {
                name_off: u32_at(data, m)?,
                type_id: u32_at(data, m + 4)?,
                bit_offset: if bitfield_offsets {
                    raw_offset & 0xff_ffff
                } else {
                    raw_offset
                },
            })
        })
        .collect()
}

impl Btf {
    /// Reads the running kernel's BTF.
    pub(crate) fn from_sys_fs() -> Result<Self> {
        Self::from_file(std::path::Path::new(SYS_FS))
    }

    /// Reads the kernel's BTF from `path` (the running kernel's is [`SYS_FS`]).
    pub(crate) fn from_file(path: &std::path::Path) -> Result<Self> {
        let data = std::fs::read(path).with_context(|| {
            format!(
                "this kernel has no BTF ({}); fdprof needs CONFIG_DEBUG_INFO_BTF=y",
                path.display()
            )
        })?;
        Self::parse(&data).with_context(|| format!("cannot parse {}", path.display()))
    }

    /// Parses a little-endian BTF blob.
    pub(crate) fn parse(data: &[u8]) -> Result<Self> {
        if data.len() < 24 || u16::from_le_bytes([data[0], data[1]]) != MAGIC {
            bail!("not little-endian BTF (bad magic)");
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let types_data = data
            .get(hdr_len + type_off..hdr_len + type_off + type_len)
            .context("type section out of bounds")?;
        let strings = data
            .get(hdr_len + str_off..hdr_len + str_off + str_len)
            .context("string section out of bounds")?
            .to_vec();

        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            referenced: 0,
            members: Vec::new(),
        }];
        let mut at = 0;
        while at < types_data.len() {
            let name_off = u32_at(types_data, at)?;
            let info = u32_at(types_data, at + 4)?;
            let size_or_type = u32_at(types_data, at + 8)?;
            at += 12;
            let vlen = (info & 0xffff) as usize;
            let kind = (info >> 24) & 0x1f;
            let bitfield_offsets = info >> 31 == 1;
            let mut members = Vec::new();
            match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => at += 4,
                KIND_ARRAY => at += 12,
                KIND_STRUCT | KIND_UNION => {
                    members = struct_members(&types_data[at..], vlen, bitfield_offsets)?;
                    at += vlen * 12;
                }
                KIND_ENUM | KIND_FUNC_PROTO => at += vlen * 8,
                KIND_DATASEC | KIND_ENUM64 => at += vlen * 12,
                0 | 20.. => bail!("unknown BTF kind {kind} at type {}", types.len()),
                _ => {}
            }
            types.push(Type {
                name_off,
                kind,
                referenced: size_or_type,
                members,
            });
        }

        let mut btf = Btf {
            strings,
            types,
            structs_by_name: HashMap::new(),
            funcs: HashMap::new(),
        };
        btf.index();
        Ok(btf)
    }

    /// Indexes the named structs, unions and functions.
    fn index(&mut self) {
        for (id, t) in self.types.iter().enumerate().skip(1) {
            let name = self.name(t.name_off);
            if name.is_empty() {
                continue;
            }
            match t.kind {
                // Keep the first complete definition; forward declarations have their own kind.
                KIND_STRUCT | KIND_UNION => {
                    self.structs_by_name
                        .entry(name.to_string())
                        .or_insert(id as u32);
                }
                KIND_FUNC => {
                    self.funcs.entry(name.to_string()).or_insert(id as u32);
                }
                _ => {}
            }
        }
    }

    fn name(&self, off: u32) -> &str {
        let rest = self.strings.get(off as usize..).unwrap_or_default();
        let end = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
        std::str::from_utf8(&rest[..end]).unwrap_or("")
    }

    /// True when the kernel has a BTF `FUNC` record for `name` (a prerequisite for fentry).
    pub(crate) fn has_func(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    /// Skips typedefs and qualifiers to the underlying type.
    fn resolve(&self, mut id: u32) -> u32 {
        while let Some(t) = self.types.get(id as usize) {
            match t.kind {
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = t.referenced
                }
                _ => break,
            }
        }
        id
    }

    /// Byte offset of `field` in `struct name`, looking through anonymous structs and unions.
    pub(crate) fn member_offset(&self, name: &str, field: &str) -> Result<u32> {
        let id = *self
            .structs_by_name
            .get(name)
            .with_context(|| format!("struct {name} not found in BTF"))?;
        let bits = self
            .find_member(id, field, 0)
            .with_context(|| format!("struct {name} has no member {field} in BTF"))?;
        if bits % 8 != 0 {
            bail!("{name}.{field} is a bitfield");
        }
        Ok(bits / 8)
    }

    fn find_member(&self, struct_id: u32, field: &str, depth: u32) -> Option<u32> {
        // Real structs nest anonymous members a few levels deep; a crafted file could loop.
        if depth > 16 {
            return None;
        }
        let t = self.types.get(struct_id as usize)?;
        for m in &t.members {
            if self.name(m.name_off) == field {
                return Some(m.bit_offset);
            }
        }
        // Anonymous members: search inside, adding their own offset.
        for m in t.members.iter().filter(|m| m.name_off == 0) {
            let inner = self.resolve(m.type_id);
            if matches!(
                self.types.get(inner as usize).map(|t| t.kind),
                Some(KIND_STRUCT | KIND_UNION)
            ) && let Some(bits) = self.find_member(inner, field, depth + 1)
            {
                return Some(m.bit_offset + bits);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob built by hand: header, types, strings.
    struct Blob {
        types: Vec<u8>,
        strings: Vec<u8>,
    }

    impl Blob {
        fn new() -> Self {
            Self {
                types: Vec::new(),
                strings: vec![0],
            }
        }

        fn name(&mut self, s: &str) -> u32 {
            if s.is_empty() {
                return 0;
            }
            let off = self.strings.len() as u32;
            self.strings.extend_from_slice(s.as_bytes());
            self.strings.push(0);
            off
        }

        fn words(&mut self, words: &[u32]) {
            for w in words {
                self.types.extend_from_slice(&w.to_le_bytes());
            }
        }

        fn int(&mut self, name: &str) {
            let n = self.name(name);
            self.words(&[n, KIND_INT << 24, 4, 32]);
        }

        /// A struct with (name, type id, bit offset) members.
        fn structure(&mut self, name: &str, members: &[(&str, u32, u32)]) {
            let n = self.name(name);
            self.words(&[n, (KIND_STRUCT << 24) | members.len() as u32, 64]);
            for &(m, ty, bits) in members {
                let mn = self.name(m);
                self.words(&[mn, ty, bits]);
            }
        }

        fn func(&mut self, name: &str) {
            let n = self.name(name);
            self.words(&[n, KIND_FUNC << 24, 0]);
        }

        fn bytes(&self) -> Vec<u8> {
            let mut out = Vec::new();
            out.extend_from_slice(&MAGIC.to_le_bytes());
            out.extend_from_slice(&[1, 0]); // version, flags
            for w in [24, 0, self.types.len() as u32, self.types.len() as u32] {
                out.extend_from_slice(&w.to_le_bytes());
            }
            out.extend_from_slice(&(self.strings.len() as u32).to_le_bytes());
            out.extend_from_slice(&self.types);
            out.extend_from_slice(&self.strings);
            out
        }
    }

    #[test]
    fn offsets_and_functions_from_a_hand_made_blob() {
        let mut b = Blob::new();
        b.int("int"); // id 1
        b.structure("inner", &[("next_fd", 1, 32)]); // id 2
        // `struct files_struct { int count; struct { int next_fd; }; int fdt; }`
        b.structure(
            "files_struct",
            &[("count", 1, 0), ("", 2, 64), ("fdt", 1, 128)],
        );
        b.func("alloc_fd");
        let btf = Btf::parse(&b.bytes()).unwrap();
        assert_eq!(btf.member_offset("files_struct", "fdt").unwrap(), 16);
        // Through the anonymous member: 64 + 32 bits.
        assert_eq!(btf.member_offset("files_struct", "next_fd").unwrap(), 12);
        assert!(btf.has_func("alloc_fd"));
        assert!(!btf.has_func("__alloc_fd"));
        let err = btf.member_offset("files_struct", "nope").unwrap_err();
        assert_eq!(
            err.to_string(),
            "struct files_struct has no member nope in BTF"
        );
        assert!(btf.member_offset("fdtable", "max_fds").is_err());
    }

    #[test]
    fn bitfields_and_broken_blobs_are_errors() {
        let mut b = Blob::new();
        b.int("int");
        b.structure("s", &[("bits", 1, 3)]);
        let btf = Btf::parse(&b.bytes()).unwrap();
        assert_eq!(
            btf.member_offset("s", "bits").unwrap_err().to_string(),
            "s.bits is a bitfield"
        );

        let good = b.bytes();
        assert!(Btf::parse(&good[..good.len() - 30]).is_err(), "truncated");
        assert!(Btf::parse(b"not btf at all, not btf at all").is_err());
        let mut unknown = Blob::new();
        unknown.words(&[0, 31 << 24, 0]);
        assert!(Btf::parse(&unknown.bytes()).is_err());
    }

    #[test]
    fn a_self_containing_anonymous_member_does_not_loop() {
        let mut b = Blob::new();
        b.structure("loop", &[("", 1, 0)]); // id 1 contains itself anonymously
        let btf = Btf::parse(&b.bytes()).unwrap();
        assert!(btf.member_offset("loop", "x").is_err());
    }
}
