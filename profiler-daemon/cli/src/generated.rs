//! What is generated from the command line's own definition rather than
//! asked of the daemon: shell completion scripts and man pages (the Debian
//! package ships both). Needs no daemon.

use std::{io::Write as _, path::Path};

use anyhow::{Context as _, Result};
use clap::CommandFactory as _;

use crate::args::Cli;

/// Prints the completion script of `shell` to standard output.
pub fn completions(shell: clap_complete::Shell) -> Result<()> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut command, "profilerctl", &mut script);
    std::io::stdout()
        .write_all(&script)
        .context("cannot write the completion script to standard output")
}

/// Writes profilerctl.1 and a page per command (profilerctl-profile.1, …)
/// into `dir`.
pub fn man_pages(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("cannot write the man pages into {}", dir.display()))
}
