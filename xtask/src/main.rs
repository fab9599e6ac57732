//! `cargo xtask`: profilerd's developer tasks (build, run, test, lint,
//! install).
//!
//! Every task first bootstraps what a fresh machine lacks (the eBPF
//! toolchain, and for the tests their system packages), idempotently, so that
//! `cargo xtask run` and `cargo xtask test` work on a new clone and in CI.

mod bootstrap;
mod cli;
mod commands;
mod deps;
mod install;
mod kernel;
mod kernels;
mod layers;
mod package;
mod process;
mod web;

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    }
}
