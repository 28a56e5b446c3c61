//! The `fdprof` binary: the command line, one file per subcommand (`commands/`), over the
//! `fdprof_profiler`, `fdprof_daemon` and `fdprof_top` crates.

#![warn(unreachable_pub)]

mod commands;

fn main() -> std::process::ExitCode {
    raise_permitted_capabilities();
    commands::main()
}

/// Makes every permitted capability effective, on the main thread before any other starts
/// (threads inherit it). The container image's fdprof holds its capabilities as file
/// capabilities without the effective bit (`=p`, see xtask/src/image.rs): exec grants the
/// permitted set as far as the container's bounding set allows, never failing for a capability
/// the pod does not add, and fdprof raises them here, so that a missing one is what `doctor`
/// and the daemon name rather than a refused exec. For root, and wherever effective already
/// equals permitted, nothing changes.
fn raise_permitted_capabilities() {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget writes one header and two data structs (version 3), both sized here.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return;
    }
    if data.iter().all(|d| d.effective == d.permitted) {
        return;
    }
    for d in &mut data {
        d.effective = d.permitted;
    }
    // SAFETY: as above; raising effective within permitted needs no privilege. A failure leaves
    // the sets as they were, which the capability checks then report.
    unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
}
