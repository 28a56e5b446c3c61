//! fdprof's own programs named on kernel stacks: kallsyms lists a JIT-ed program as
//! `bpf_prog_<tag>_<name>` only while it is loaded, after the symbolizer first read kallsyms.
//! Real kernel, root.

use crate::common::*;
use fdprof_profiler::collect::{Filter, Kernel, Profiler, ProfilerOptions};
use fdprof_profiler::model::own;
use fdprof_profiler::probe::kallsyms::Kallsyms;
use fdprof_profiler::symbolize::KernelSymbols;

/// The address kallsyms text gives `symbol`.
fn address_in(kallsyms: &str, symbol: &str) -> Option<u64> {
    kallsyms.lines().find_map(|l| {
        let mut p = l.split_ascii_whitespace();
        let (a, _, s) = (p.next()?, p.next()?, p.next()?);
        (s == symbol).then(|| u64::from_str_radix(a, 16).unwrap())
    })
}

#[test]
fn a_stack_through_fdprofs_program_names_it() {
    require_root();
    let _kernel = kernel_lock();
    let before = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut symbols = KernelSymbols::from_kallsyms(&before).unwrap();
    let kernel = Kernel::discover(&Kallsyms::parse(&before)).unwrap();
    let opts = ProfilerOptions {
        filter: Filter::Tgid(std::process::id()),
        ..ProfilerOptions::default()
    };
    let profiler = Profiler::attach(&kernel, opts).unwrap();

    let programs = loaded_fdprof_program_tags();
    assert!(!programs.is_empty(), "fdprof's programs are loaded");
    let after = std::fs::read_to_string("/proc/kallsyms").unwrap();
    // The address of one of them, found by the tag the kernel gives it.
    let (symbol, addr) = programs
        .iter()
        .find_map(|(tag, name)| {
            let symbol = format!("bpf_prog_{tag}_{name}");
            address_in(&after, &symbol).map(|a| (symbol, a))
        })
        .expect("a loaded fdprof program in kallsyms (net.core.bpf_jit_kallsyms = 1)");

    // A stack through the program: the lock function above it, alloc_fd below.
    let alloc_fd = address_in(&before, "alloc_fd").expect("alloc_fd in kallsyms");
    let stack = [addr + 4, alloc_fd + 8];
    let unnamed = symbols.resolve_stack(&stack, false);
    assert_ne!(unnamed[0].function, symbol, "not in kallsyms as first read");
    assert!(!own::on_stack(unnamed.iter().map(|f| f.function.as_str())));

    assert!(symbols.add_bpf_programs(&after) >= 1);
    let named = symbols.resolve_stack(&stack, false);
    assert_eq!(named[0].function, symbol);
    assert_eq!(
        (named[0].offset, named[0].module.as_deref()),
        (4, Some("bpf"))
    );
    assert_eq!(named[1].function, "alloc_fd");
    assert!(
        own::on_stack(named.iter().map(|f| f.function.as_str())),
        "{symbol} is fdprof's"
    );
    drop(profiler);
}
