//! fdprof's kernel-side programs. Every program name starts with `fdprof_` so that leaked
//! programs are easy to spot in `bpftool prog show` (names are cut at 15 characters).
#![no_std]
#![no_main]

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 4] = *b"GPL\0";
