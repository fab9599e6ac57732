//! The peek commands: peek at a process now, list, print and follow the
//! kept reports.

use anyhow::Result;
use profilerd_client::v1;

use crate::{Client, output};

pub async fn peek(daemon: &mut Client, pid: u32) -> Result<()> {
    eprintln!("peeking at process {pid} (no signal is sent to it)");
    let report = daemon.peek(v1::PeekRequest { pid }).await?.into_inner();
    output::print_text(&report.text)?;
    eprintln!(
        "peek report {} kept; `profilerctl peeks --id {}` prints it again",
        report.id, report.id
    );
    Ok(())
}

pub async fn show(daemon: &mut Client, id: String) -> Result<()> {
    let report = daemon
        .get_peek(v1::GetPeekRequest { id })
        .await?
        .into_inner();
    output::print_text(&report.text)
}

pub async fn list(daemon: &mut Client) -> Result<()> {
    let peeks = daemon
        .list_peeks(v1::ListPeeksRequest {})
        .await?
        .into_inner()
        .peeks;
    if peeks.is_empty() {
        eprintln!("no peek reports are kept; `kill -USR1 PID` or `profilerctl peek PID` makes one");
    }
    let text: String = peeks
        .iter()
        .map(|peek| format!("{}  {}\n", peek.id, peek.title))
        .collect();
    output::print_text(&text)
}

pub async fn follow(daemon: &mut Client) -> Result<()> {
    let mut reports = daemon
        .watch_peeks(v1::WatchPeeksRequest {})
        .await?
        .into_inner();
    eprintln!("waiting for peeks (Ctrl-C to stop)");
    while let Some(report) = reports.message().await? {
        output::print_text(&format!("{}\n", report.text))?;
    }
    Ok(())
}
