//! profilerctl: the command-line client of profilerd.
//!
//! Parses the command line (`args`), talks to the daemon over its socket
//! (one module per family of commands: `profiles`, `sessions`, `peeks`,
//! `machine`) and prints or writes what comes back (`output`, `format`).
//! Errors are one readable line and a non-zero exit status; a closed pipe
//! ends it quietly.

mod allocs;
mod annotate;
mod args;
mod format;
mod generated;
mod machine;
mod output;
mod peeks;
mod profiles;
mod sessions;
mod status;
mod top;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser as _;
use profilerd_client::{self as client, v1::profiler_client::ProfilerClient};

use crate::args::{Cli, Command};

type Client = ProfilerClient<tonic::transport::Channel>;

fn main() -> ExitCode {
    restore_sigpipe();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("profilerctl: error: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("profilerctl: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// Lets a closed pipe (`profilerctl peeks | head`) end profilerctl quietly,
/// as it ends `cat`: Rust ignores SIGPIPE, which makes every later write
/// fail instead.
fn restore_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; nothing else runs
    // yet (no threads, no runtime).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// An error and its causes on one line; gRPC statuses by their message.
fn one_line(err: &anyhow::Error) -> String {
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        let message = status.message().replace('\n', " ");
        return format!("{message} ({:?})", status.code());
    }
    format!("{err:#}").replace('\n', " ")
}

/// A random token, e.g. to cut a profile short.
fn random_token() -> String {
    let mut bytes = [0_u8; 16];
    let _ = rustix::rand::getrandom(&mut bytes, rustix::rand::GetRandomFlags::empty());
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match &cli.command {
        Command::Completions { shell } => {
            generated::completions(*shell)?;
            return Ok(ExitCode::SUCCESS);
        }
        Command::ManPages { dir } => {
            generated::man_pages(dir)?;
            return Ok(ExitCode::SUCCESS);
        }
        _ => {}
    }
    let mut daemon = client::connect(&cli.socket).await?;
    let daemon = &mut daemon;
    match cli.command {
        Command::Status { verbose, json } => machine::status(daemon, verbose, json).await?,
        Command::Metrics => machine::metrics(daemon).await?,
        Command::Targets {
            pids,
            cgroups,
            everything,
        } => machine::targets(daemon, pids, cgroups, everything).await?,
        Command::Profile {
            selector,
            duration,
            frequency,
            report,
        } => profiles::profile(daemon, &selector, duration, frequency, &report).await?,
        Command::Record { report, command } => {
            return sessions::record(daemon, &command, &report).await;
        }
        Command::Query {
            selector,
            window,
            report,
        } => profiles::query(daemon, &selector, &window, &report).await?,
        Command::Callers {
            function,
            selector,
            window,
        } => profiles::callers(daemon, function, &selector, &window).await?,
        Command::Annotate {
            function,
            selector,
            window,
        } => annotate::annotate(daemon, &function, &selector, &window).await?,
        Command::Diff(args) => profiles::diff(daemon, &args).await?,
        Command::Flamegraph(args) => profiles::flamegraph(daemon, &args).await?,
        Command::Top(args) => profiles::top(daemon, &args).await?,
        Command::Start { selector } => sessions::start(daemon, &selector).await?,
        Command::Stop { id, force, report } => sessions::stop(daemon, id, force, &report).await?,
        Command::Sessions => sessions::list(daemon).await?,
        Command::Allocs(args) => allocs::allocs(daemon, &args).await?,
        Command::Peek { pid } => peeks::peek(daemon, pid).await?,
        Command::Peeks { id: Some(id), .. } => peeks::show(daemon, id).await?,
        Command::Peeks {
            id: None,
            follow: false,
        } => peeks::list(daemon).await?,
        Command::Peeks {
            id: None,
            follow: true,
        } => peeks::follow(daemon).await?,
        Command::Completions { .. } | Command::ManPages { .. } => {
            unreachable!("answered before connecting")
        }
    }
    Ok(ExitCode::SUCCESS)
}
