//! The commands of open-ended windows: start, stop, sessions, and record
//! (a session around a command and its children).

use std::{ffi::OsString, process::ExitCode, time::SystemTime};

use anyhow::{Context as _, Result};
use profilerd_client::v1;

use crate::{
    Client,
    args::{ReportArgs, SelectorArgs},
    format, output,
};

pub async fn start(daemon: &mut Client, selector: &SelectorArgs) -> Result<()> {
    let reply = daemon
        .start_profile(v1::StartProfileRequest {
            selector: Some(selector.to_proto()),
            mode: selector.mode(),
            children: false,
        })
        .await?
        .into_inner();
    output::print_text(&format!("{}\n", reply.session_id))
}

pub async fn stop(daemon: &mut Client, id: String, force: bool, report: &ReportArgs) -> Result<()> {
    output::refuse_binary_on_terminal(report.format.binary(), report.output.as_deref())?;
    let reply = daemon
        .stop_profile(v1::StopProfileRequest {
            session_id: id,
            options: Some(report.to_proto()),
            force,
        })
        .await?
        .into_inner();
    output::deliver(reply, report.output.as_deref(), None)
}

pub async fn list(daemon: &mut Client) -> Result<()> {
    let sessions = daemon
        .list_sessions(v1::ListSessionsRequest {})
        .await?
        .into_inner()
        .sessions;
    output::print_text(&format::sessions(&sessions, SystemTime::now()))
}

/// Runs `command` inside a session that follows this process's children
/// (so the command is profiled from its first instruction, with every
/// process it starts), and reports the session when the command exits.
/// Returns the command's exit status.
pub async fn record(
    daemon: &mut Client,
    command: &[OsString],
    report: &ReportArgs,
) -> Result<ExitCode> {
    output::refuse_binary_on_terminal(report.format.binary(), report.output.as_deref())?;
    let (program, arguments) = command
        .split_first()
        .context("name the command to run after `--`")?;
    let session = daemon
        .start_profile(v1::StartProfileRequest {
            selector: Some(v1::Selector {
                pids: vec![std::process::id()],
                ..Default::default()
            }),
            mode: v1::Mode::Cpu as i32,
            children: true,
        })
        .await?
        .into_inner();
    let spawned = std::process::Command::new(program).args(arguments).spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(err) => {
            // The session must not outlive the attempt.
            let _ = daemon
                .stop_profile(v1::StopProfileRequest {
                    session_id: session.session_id,
                    ..Default::default()
                })
                .await;
            return Err(err).with_context(|| format!("cannot run {}", program.to_string_lossy()));
        }
    };
    let waiting = tokio::task::spawn_blocking(move || child.wait());
    tokio::pin!(waiting);
    // Ctrl-C reaches the command too (it is in the terminal's foreground
    // process group): wait for it to end, then report.
    let status = loop {
        tokio::select! {
            status = &mut waiting => break status,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: waiting for the command to exit, then reporting");
            }
        }
    };
    let status = status
        .context("waiting for the command failed")?
        .context("waiting for the command failed")?;
    let reply = daemon
        .stop_profile(v1::StopProfileRequest {
            session_id: session.session_id,
            options: Some(report.to_proto()),
            force: false,
        })
        .await?
        .into_inner();
    let sampled = reply
        .summary
        .as_ref()
        .map_or(0, |summary| summary.cpu_nanos);
    output::deliver(reply, report.output.as_deref(), None)?;
    eprintln!(
        "{} {status}; it used {:.2} CPU-seconds (the processes it waited for included), the \
         profile holds {:.2}",
        program.to_string_lossy(),
        children_cpu().as_secs_f64(),
        sampled as f64 / 1e9
    );
    Ok(exit_code(status))
}

/// CPU time (user and system) of the children waited for, and of the
/// descendants they waited for: what the command cost, to set the profile
/// against.
fn children_cpu() -> std::time::Duration {
    // SAFETY: getrusage(2) writes one rusage into the zeroed struct it is
    // given; a zeroed rusage is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) != 0 {
            return std::time::Duration::ZERO;
        }
        usage
    };
    let time = |time: libc::timeval| {
        std::time::Duration::from_secs(time.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(time.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// The exit code a shell would give for `status`.
fn exit_code(status: std::process::ExitStatus) -> ExitCode {
    use std::os::unix::process::ExitStatusExt as _;
    let code = status
        .code()
        .or_else(|| status.signal().map(|signal| 128 + signal))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
