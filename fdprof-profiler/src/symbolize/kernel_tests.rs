//! Kernel stacks symbolized against the running kernel's `/proc/kallsyms`, fdprof's own
//! programs among them: a JIT-ed program is listed as `bpf_prog_<tag>_<name>` only while it is
//! loaded, after the symbolizer first read kallsyms. Root (real addresses).

use std::time::Instant;

use super::{Frame, KernelSymbols, kernel::UNKNOWN};
use crate::collect::{Filter, Kernel, Profiler, ProfilerOptions};
use crate::model::own;
use crate::probe::kallsyms::Kallsyms;
use crate::tests::{kernel_lock, loaded_fdprof_program_tags, require_root};

/// Address of the core-kernel text symbol `name`, straight from /proc/kallsyms.
fn kallsyms_address(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap();
    text.lines().find_map(|line| {
        let mut p = line.split_ascii_whitespace();
        let (addr, kind, sym) = (p.next()?, p.next()?, p.next()?);
        (sym == name && matches!(kind, "t" | "T") && p.next().is_none())
            .then(|| u64::from_str_radix(addr, 16).unwrap())
    })
}

#[test]
fn kernel_symbols_resolve_alloc_fd() {
    require_root();
    let started = Instant::now();
    let k = KernelSymbols::load().expect("load /proc/kallsyms");
    let elapsed = started.elapsed();
    eprintln!(
        "KernelSymbols::load: {} text symbols in {elapsed:?}",
        k.len()
    );
    assert!(k.len() > 10_000, "only {} text symbols", k.len());

    let alloc_fd = kallsyms_address("alloc_fd").expect("alloc_fd in /proc/kallsyms");
    assert_ne!(alloc_fd, 0);
    assert_eq!(
        k.resolve(alloc_fd + 0x10, false),
        Frame {
            function: "alloc_fd".into(),
            offset: 0x10,
            ..Default::default()
        }
    );
    let raw = k.resolve(alloc_fd + 0x10, true);
    assert_eq!(raw.address, Some(alloc_fd + 0x10));
    assert_eq!((raw.function.as_str(), raw.offset), ("alloc_fd", 0x10));
    assert_eq!(k.resolve(alloc_fd, false).offset, 0);

    // Another function on the fd path, through the stack helper.
    if let Some(close) = kallsyms_address("file_close_fd") {
        let frames = k.resolve_stack(&[close + 1, alloc_fd + 2, 0x1000], false);
        assert_eq!(frames[0].function, "file_close_fd");
        assert_eq!(frames[1].function, "alloc_fd");
        assert_eq!(frames[2].function, UNKNOWN);
        assert!(frames.iter().all(|f| f.address.is_none()));
    }
}

/// A 200k-symbol kernel (distro kernels with many modules loaded) parses whole, built from the
/// real table with shifted copies. The time is printed; speed belongs to benchmarks.
#[test]
fn kernel_symbols_parse_200k() {
    require_root();
    let real = std::fs::read_to_string("/proc/kallsyms").unwrap();
    let mut text = String::with_capacity(real.len() * 2);
    let mut lines = 0;
    'outer: for copy in 0u64..4 {
        for line in real.lines() {
            let Some((addr, rest)) = line.split_once(' ') else {
                continue;
            };
            let addr = u64::from_str_radix(addr, 16)
                .unwrap()
                .wrapping_add(copy << 32);
            text.push_str(&format!("{addr:016x} {rest}\n"));
            lines += 1;
            if lines == 200_000 {
                break 'outer;
            }
        }
    }
    let started = Instant::now();
    let k = KernelSymbols::parse(&text).unwrap();
    let elapsed = started.elapsed();
    eprintln!(
        "KernelSymbols::parse: {lines} lines, {} text symbols kept, {elapsed:?}",
        k.len()
    );
    assert!(k.len() > 100_000);
}

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
