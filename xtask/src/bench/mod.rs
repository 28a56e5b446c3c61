//! `cargo xtask bench NAME [ARGS]`: the benchmarks, each a module here but `vm-overhead`,
//! which boots vm-test's guests (`vm_test::bench`). What they share is in [`harness`].

mod bpf;
mod churn;
mod daemon;
mod export;
mod floor;
mod harness;
mod lock_reference;
mod overhead;
mod page;
mod remedies;
mod soak;
mod stacks;
mod syscost;
mod top;
mod workload;

use anyhow::{Result, bail};

/// Runs the benchmark `what` (one of `cargo xtask bench`'s names) with its arguments.
pub(crate) fn run(what: &str, args: &[String]) -> Result<()> {
    match what {
        "workload" => workload::run(args),
        // Its options are read here, so that vm_test needs nothing of the benches' harness.
        "vm-overhead" => crate::vm_test::bench::run(
            harness::args::rounds_arg(args, 5)?,
            args.iter().any(|a| a == "--json"),
        ),
        "top" => top::run(args),
        "daemon" => daemon::run(args),
        "churn" => churn::run(args),
        "export" => export::run(args),
        "remedies" => remedies::run(args),
        "page" => page::run(args),
        "overhead" => overhead::run(args),
        "stacks" => stacks::run(args),
        "soak" => soak::run(args),
        other => bail!("no benchmark {other:?}"),
    }
}

#[cfg(test)]
mod tests {
    /// Each bench reads its options before it builds or starts anything: a bad one fails at
    /// once, here without a build.
    #[test]
    fn a_bad_option_fails_before_anything_runs() {
        for (what, args) in [
            ("workload", ["--rounds", "x"]),
            ("vm-overhead", ["--rounds", "x"]),
            ("top", ["--minutes", "0"]),
            ("daemon", ["--only", "nope"]),
            ("churn", ["--to", "x"]),
            ("export", ["--rounds", "x"]),
            ("remedies", ["--secs", "0"]),
            ("overhead", ["--rounds", "x"]),
            ("stacks", ["--rounds", "x"]),
            ("soak", ["--hours", "x"]),
        ] {
            let args = args.map(String::from);
            assert!(super::run(what, &args).is_err(), "{what} {args:?}");
        }
    }
}
