//! `fdprof doctor` as text: what this kernel offers and which probes `record` will use.

use std::fmt::Write as _;

use crate::probe::{
    capabilities::{Capabilities, TracepointTrial},
    offsets::KernelOffsets,
};

fn tracepoint_lines(out: &mut String, trials: &[TracepointTrial]) {
    for t in trials {
        let _ = write!(
            out,
            "    {:<24} tracepoint: {}",
            t.name,
            t.tracepoint.summary()
        );
        if let Some(btf) = &t.tp_btf {
            let _ = write!(out, "; tp_btf: {}", btf.summary());
        }
        out.push('\n');
    }
}

/// The human-readable report.
pub fn text(caps: &Capabilities) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "fdprof          {}", caps.fdprof_version);
    let _ = writeln!(out, "kernel          {}", caps.kernel_release);
    match &caps.btf_error {
        None => {
            let _ = writeln!(out, "BTF             {}", caps.btf_path);
        }
        Some(e) => {
            let _ = writeln!(out, "BTF             unusable: {e}");
        }
    }
    let _ = writeln!(
        out,
        "RLIMIT_NOFILE   soft {}, hard {}",
        caps.rlimit_nofile.soft, caps.rlimit_nofile.hard
    );
    for note in &caps.notes {
        let _ = writeln!(out, "note            {note}");
    }
    pod_spec_lines(&mut out, caps);
    let _ = writeln!(
        out,
        "\nfunction probes (load + attach + detach tried for each):"
    );
    function_lines(&mut out, caps);
    let _ = writeln!(out, "\nlock contention tracepoints:");
    tracepoint_lines(&mut out, &caps.lock_tracepoints);
    let _ = writeln!(out, "fd syscall tracepoints:");
    tracepoint_lines(&mut out, &caps.fd_syscall_tracepoints);
    let _ = writeln!(
        out,
        "cpu sampling (perf_event cpu-clock): {}",
        caps.cpu_sampling.summary()
    );
    let _ = writeln!(
        out,
        "helper bpf_get_current_task_btf (direct loads of the task's fields): {}",
        caps.task_btf.summary()
    );

    let _ = writeln!(out, "\nrecord will use: {} mode", caps.mode.name());
    for (role, mode) in &caps.chosen {
        let _ = writeln!(out, "  {role:<18} {mode}");
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "\nlock names: the target's file_lock by address; mmap_lock, siglock by kind: {}; \
         static locks by symbol: {}; the others by the first caller below the lock functions",
        yes(caps.lock_names.by_kind),
        if caps.lock_names.static_symbols {
            "yes"
        } else {
            "no (kallsyms lists no kernel data: CONFIG_KALLSYMS_ALL is off)"
        }
    );
    user_stacks_line(&mut out, caps);
    name_sources_line(&mut out, caps);
    let _ = writeln!(out, "\nstruct offsets (bytes, from BTF):");
    match &caps.offsets {
        Some(offsets) => {
            for ((s, f), v) in KernelOffsets::FIELDS.iter().zip(offsets.values()) {
                let _ = writeln!(out, "  {:<28} {v}", format!("{s}.{f}"));
            }
        }
        None => {
            let _ = writeln!(out, "  unknown without BTF");
        }
    }
    out
}

/// Inside a container, what its pod spec lacks, a line each in the manifest's words.
fn pod_spec_lines(out: &mut String, caps: &Capabilities) {
    let Some(pod) = &caps.pod_spec else {
        return;
    };
    if pod.lacks.is_empty() {
        let _ = writeln!(
            out,
            "pod spec        in a container; it lacks nothing fdprof uses"
        );
        return;
    }
    let _ = writeln!(
        out,
        "pod spec        in a container; add to its pod spec (deploy/kubernetes/daemonset.yaml):"
    );
    for gap in &pod.lacks {
        let _ = writeln!(out, "  {}", gap.line());
    }
}

/// Each function role, its candidates found and each mode's trial.
fn function_lines(out: &mut String, caps: &Capabilities) {
    for role in &caps.functions {
        let _ = writeln!(out, "  {} -> {}", role.role.name(), role.chosen.name());
        if role.functions.is_empty() {
            let _ = writeln!(
                out,
                "    none of {} found in BTF or kallsyms",
                role.candidates.join(", ")
            );
        }
        for f in &role.functions {
            let seen: Vec<&str> = [("BTF", f.function.btf), ("kallsyms", f.function.kallsyms)]
                .iter()
                .filter(|(_, yes)| *yes)
                .map(|(name, _)| *name)
                .collect();
            let _ = writeln!(out, "    {} (in {})", f.function.name, seen.join(", "));
            let _ = writeln!(
                out,
                "      fentry: {}; fexit: {}",
                f.fentry.summary(),
                f.fexit.summary()
            );
            let _ = writeln!(
                out,
                "      kprobe: {}; kretprobe: {}",
                f.kprobe.summary(),
                f.kretprobe.summary()
            );
        }
    }
}

/// Where stripped binaries' names are looked for.
fn name_sources_line(out: &mut String, caps: &Capabilities) {
    let Some(n) = &caps.name_sources else {
        return;
    };
    let dirs: Vec<String> = n
        .debug_dirs
        .iter()
        .map(|d| match d.exists {
            true => d.path.clone(),
            false => format!("{} (missing)", d.path),
        })
        .collect();
    let debuginfod = match (&n.debuginfod_error, n.debuginfod_urls.as_slice()) {
        (Some(e), _) => format!("unusable: {e}"),
        (None, []) => "none (--debuginfod or DEBUGINFOD_URLS; sudo drops the environment)".into(),
        (None, urls) => format!(
            "{}, kept in {} (at most {} MiB)",
            urls.join(" "),
            n.debuginfod_cache,
            n.debuginfod_cache_bytes >> 20
        ),
    };
    let _ = writeln!(
        out,
        "\nnames of stripped binaries: from debug files by build id (.build-id/ab/cdef….debug) \
         and by .gnu_debuglink (CRC checked) beside the binary, in its .debug/ and under its \
         root's /usr/lib/debug, then under {}; from MiniDebugInfo; from debuginfod: {debuginfod}",
        dirs.join(", ")
    );
}

/// How user stacks are walked here.
fn user_stacks_line(out: &mut String, caps: &Capabilities) {
    let u = &caps.user_stacks;
    let _ = writeln!(
        out,
        "\nuser stacks: a copy of up to {} bytes of the stack (to its top, where known: {}) with \
         its registers (from {}), unwound by fdprof from the mapped files' call-frame \
         information (.eh_frame; frame pointers where code keeps them); at most {} MiB a \
         second a CPU, past which copies are copy_budget drops. Code without call-frame \
         information or outside any mapped file (JIT) ends a walk in a [truncated: …] frame",
        u.copy_bytes,
        if u.stack_tops { "yes" } else { "no" },
        u.registers,
        u.budget_bytes_per_cpu_sec >> 20,
    );
}
