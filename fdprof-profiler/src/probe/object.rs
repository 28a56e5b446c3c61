//! The eBPF objects built from `fdprof-ebpf` by `cargo xtask ebpf` and committed in
//! `fdprof-profiler/ebpf/` (CI checks they are the sources'), embedded in the binary.

use aya::include_bytes_aligned;

/// The profiling programs.
pub(crate) static PROFILER: &[u8] = include_bytes_aligned!("../../ebpf/fdprof.bpf.o");

/// Empty programs that `doctor` attaches to find out what the kernel allows.
pub(crate) static DOCTOR: &[u8] = include_bytes_aligned!("../../ebpf/fdprof-doctor.bpf.o");

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use fdprof_common::{
        cpu,
        probes::{map, program},
        settings::{self, Settings},
    };
    use object::{Object, ObjectSymbol};

    /// The eBPF side names its maps, programs and settings by hand; each must be what
    /// `fdprof_common::probes` says, or attaching would fail at run time.
    #[test]
    fn object_matches_the_contract() {
        let elf = object::File::parse(super::PROFILER).expect("the embedded object is ELF");
        let symbols: HashSet<&str> = elf.symbols().filter_map(|s| s.name().ok()).collect();
        let syscall_programs: Vec<&str> = program::SYSCALL_FENTRY
            .iter()
            .flat_map(|(entry, exit)| [*entry, *exit])
            .collect();
        let missing: Vec<&str> = map::ALL
            .iter()
            .chain(&program::ALL)
            .chain(&syscall_programs)
            .chain(&[settings::SYMBOL])
            .chain(&[cpu::SAMPLES_MAP, cpu::STACKS_MAP, cpu::PROGRAM])
            .filter(|name| !symbols.contains(*name))
            .copied()
            .collect();
        assert!(missing.is_empty(), "not in the eBPF object: {missing:?}");
        // The settings are written whole: the object's must be the struct user space fills.
        let settings_size = elf
            .symbols()
            .find(|s| s.name() == Ok(settings::SYMBOL))
            .map(|s| s.size());
        assert_eq!(
            settings_size,
            Some(std::mem::size_of::<Settings>() as u64),
            "the object's {} is not fdprof_common's Settings",
            settings::SYMBOL
        );
        // And nothing of the object's is left out of the contract.
        let ours: HashSet<&str> = program::ALL
            .iter()
            .copied()
            .chain(syscall_programs.iter().copied())
            .chain([cpu::PROGRAM])
            .collect();
        let stray: Vec<&&str> = symbols
            .iter()
            .filter(|s| s.starts_with("fdprof_") && !ours.contains(**s))
            .collect();
        assert!(
            stray.is_empty(),
            "programs missing from the contract: {stray:?}"
        );
    }
}
