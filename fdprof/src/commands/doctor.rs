//! `fdprof doctor`: what this kernel offers and which probes `record` will use, found by trying.

use std::path::PathBuf;

use anyhow::Result;

use super::args::DebugArgs;
use fdprof_profiler::probe::capabilities::{DebugDir, NameSources};
use fdprof_profiler::symbolize::debuginfod::Config;

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
    #[command(flatten)]
    pub debug: DebugArgs,
}

pub(crate) fn run(args: &DoctorArgs) -> Result<()> {
    privileges::require("fdprof doctor", &privileges::LOAD_BPF)?;
    let mut caps = Capabilities::detect(&args.btf)?;
    // In a container, what its pod spec lacks (the token gap: where the daemon saves one).
    let pod = PodSpec::detect(caps.needs(Some(fdprof_daemon::access::TOKEN_DIR)));
    caps.pod_spec = pod.in_container.then_some(pod);
    caps.name_sources = Some(name_sources(&args.debug));
    // What record, top and the daemon need beyond what doctor does (CAP_SYSLOG where kallsyms
    // shows addresses only to it) is said here, not first by them; doctor itself has run.
    let mut needed = privileges::LOAD_BPF.to_vec();
    if privileges::kallsyms_needs_syslog() {
        needed.push(privileges::Capability::Syslog);
    }
    let record = privileges::require("fdprof record", &needed)
        .err()
        .map(|e| format!("{e:#}"));
    caps.notes.extend(record.clone());
    if args.json {
        println!("{}", serde_json::to_string_pretty(&caps)?);
    } else {
        print!(
            "{}",
            fdprof_recording::escape::text(&fdprof_profiler::render::doctor::text(&caps))
        );
    }
    if let Some(why) = record {
        eprintln!("fdprof: {why}");
    }
    Ok(())
}

/// Where the flags (or the environment) say stripped binaries' names are looked for; nothing
/// is made or fetched here.
fn name_sources(args: &DebugArgs) -> NameSources {
    let dir = |path: &std::path::Path| DebugDir {
        path: path.display().to_string(),
        exists: path.is_dir(),
    };
    let mut debug_dirs: Vec<DebugDir> = args.debug_dir.iter().map(|d| dir(d)).collect();
    debug_dirs.push(dir(std::path::Path::new("/usr/lib/debug")));
    let urls = Config::from_flag_or_env(args.debuginfod.as_deref(), None, None);
    NameSources {
        debug_dirs,
        debuginfod_urls: match &urls {
            Ok(Some(config)) => config.urls.iter().map(|u| u.to_string()).collect(),
            _ => Vec::new(),
        },
        debuginfod_error: urls.err().map(|e| format!("{e:#}")),
        debuginfod_cache: args.debuginfod_cache.display().to_string(),
        debuginfod_cache_bytes: args.debuginfod_cache_size,
    }
}
