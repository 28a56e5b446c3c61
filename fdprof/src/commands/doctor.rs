//! `fdprof doctor`: what this kernel offers and which probes `record` will use, found by trying.

use std::path::PathBuf;

use anyhow::Result;

use crate::privileges;
use crate::probe::{btf, capabilities::Capabilities};

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
    let caps = Capabilities::detect(&args.btf)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&caps)?);
    } else {
        print!(
            "{}",
            crate::escape::text(&crate::render::doctor::text(&caps))
        );
    }
    Ok(())
}
