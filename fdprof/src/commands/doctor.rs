//! `fdprof doctor`: what this kernel offers and which probes `record` will use, found by trying.

use std::path::PathBuf;

use anyhow::Result;

use fdprof_profiler::privileges;
use fdprof_profiler::probe::{btf, capabilities::Capabilities, pod_spec::PodSpec};

#[derive(clap::Args, Debug)]
pub(crate) struct DoctorArgs {
    /// Print the findings as JSON
    #[arg(long)]
    pub json: bool,
    /// Read the kernel's BTF from this file instead of the running kernel's
    #[arg(long, value_name = "FILE", default_value = btf::SYS_FS)]
    pub btf: PathBuf,
}

pub(crate) fn run(args: &DoctorArgs) -> Result<()> {
    privileges::require("fdprof doctor", &privileges::LOAD_BPF)?;
    let mut caps = Capabilities::detect(&args.btf)?;
    // In a container, what its pod spec lacks (the token gap: where the daemon saves one).
    let pod = PodSpec::detect(caps.needs(Some(fdprof_daemon::access::TOKEN_DIR)));
    caps.pod_spec = pod.in_container.then_some(pod);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&caps)?);
    } else {
        print!(
            "{}",
            fdprof_recording::escape::text(&fdprof_profiler::render::doctor::text(&caps))
        );
    }
    Ok(())
}
