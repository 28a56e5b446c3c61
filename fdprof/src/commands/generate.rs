//! `fdprof generate`: the man pages and shell completions, made from the same clap definitions
//! as `--help`, so that they never drift from it. Hidden: packaging (`cargo xtask install`,
//! `cargo xtask deb`) calls it.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use clap_complete::Shell;

use fdprof_profiler::output::Output;

#[derive(Args)]
pub(crate) struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Subcommand)]
enum What {
    /// `fdprof.1` and one page per subcommand (`fdprof-record.1`, …), written into DIR
    Man { dir: PathBuf },
    /// The completion script of SHELL, on standard output
    Completions {
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

/// The shells whose completions are packaged.
#[derive(Clone, Copy, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl CompletionShell {
    fn shell(self) -> Shell {
        match self {
            CompletionShell::Bash => Shell::Bash,
            CompletionShell::Zsh => Shell::Zsh,
            CompletionShell::Fish => Shell::Fish,
        }
    }
}

pub(crate) fn run(args: &GenerateArgs) -> Result<()> {
    match &args.what {
        What::Man { dir } => {
            for (name, page) in man_pages()? {
                Output::File(dir.join(format!("{name}.1"))).write(&page)?;
            }
            Ok(())
        }
        What::Completions { shell } => {
            let mut script = Vec::new();
            clap_complete::generate(shell.shell(), &mut visible_cli(), "fdprof", &mut script);
            Output::Stdout.write(&script)
        }
    }
}

/// The command line without its hidden subcommands (this one), which the completion
/// generators would offer otherwise.
fn visible_cli() -> clap::Command {
    let full = super::cli();
    // Rebuilt from the top: clap can add subcommands but not remove one.
    let mut visible = clap::Command::new(full.get_name().to_string())
        .version(fdprof_profiler::VERSION)
        .about(full.get_about().cloned().unwrap_or_default())
        .subcommand_required(true);
    for sub in full.get_subcommands().filter(|s| !s.is_hide_set()) {
        visible = visible.subcommand(sub.clone());
    }
    visible
}

/// Each page's name and roff text: `fdprof` and `fdprof-SUBCOMMAND` for every visible
/// subcommand.
fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let mut cli = visible_cli();
    cli.build();
    let mut pages = vec![("fdprof".to_string(), render(cli.clone())?)];
    for sub in cli.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("fdprof-{}", sub.get_name());
        let page = sub
            .clone()
            .name(name.clone())
            .version(fdprof_profiler::VERSION)
            .display_name(name.clone());
        pages.push((name, render(page)?));
    }
    Ok(pages)
}

fn render(cmd: clap::Command) -> Result<Vec<u8>> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd)
        .source(format!("fdprof {}", env!("CARGO_PKG_VERSION")))
        .manual("fdprof manual")
        .render(&mut page)
        .context("cannot render a man page")?;
    Ok(page)
}
