//! fdprof's own programs on a stack: the kernel names a JIT-ed program `bpf_prog_<tag>_<name>`
//! in kallsyms (16 hex digits of tag; the name from its BTF, else its first 15 bytes).

use fdprof_common::probes::is_own_program;

/// The program name of a JIT-ed BPF program's symbol; `None` for any other function.
pub(crate) fn bpf_program(function: &str) -> Option<&str> {
    let rest = function.strip_prefix("bpf_prog_")?;
    let (tag, name) = rest.split_once('_')?;
    (tag.len() == 16 && tag.bytes().all(|b| b.is_ascii_hexdigit())).then_some(name)
}

/// Whether one of fdprof's programs is on a kernel stack, given by its functions.
pub(crate) fn on_stack<'a>(functions: impl IntoIterator<Item = &'a str>) -> bool {
    functions
        .into_iter()
        .filter_map(bpf_program)
        .any(is_own_program)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_programs_are_told_from_others() {
        assert_eq!(
            bpf_program("bpf_prog_6deef7357e7b4530_fdprof_lock_beg"),
            Some("fdprof_lock_beg")
        );
        assert_eq!(bpf_program("bpf_prog_short_x"), None);
        assert_eq!(bpf_program("bpf_trace_run2"), None);
        let ours = [
            "_raw_spin_lock",
            "handle_softirqs",
            "bpf_prog_6deef7357e7b4530_fdprof_lock_beg",
            "bpf_trace_run2",
        ];
        assert!(on_stack(ours));
        assert!(on_stack(["bpf_prog_ad0725023d10321b_fdprof_lock_begin"]));
        // Another tool's program, and a name that is not a program at all.
        let theirs = ["bpf_prog_0123456789abcdef_sd_devices", "fdprof_lock_begin"];
        assert!(!on_stack(theirs));
    }
}
