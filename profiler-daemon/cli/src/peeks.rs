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
    output::print_text(&peek_table(&peeks))
}

/// The kept peeks, one a line under a header: id (what `peeks --id`
/// takes), when it was triggered, the process, and the report's title.
fn peek_table(peeks: &[v1::PeekSummary]) -> String {
    if peeks.is_empty() {
        return String::new();
    }
    let width = peeks.iter().map(|peek| peek.id.len()).max().unwrap_or(0);
    let mut text = format!(
        "{:<width$}  {:<20}  {:>7}  REPORT\n",
        "ID", "TRIGGERED (UTC)", "PID"
    );
    for peek in peeks {
        let triggered = std::time::UNIX_EPOCH
            + std::time::Duration::from_nanos(peek.triggered_unix_nanos.max(0) as u64);
        text.push_str(&format!(
            "{:<width$}  {:<20}  {:>7}  {}\n",
            peek.id,
            humantime::format_rfc3339_seconds(triggered),
            peek.pid,
            peek.title
        ));
    }
    text
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peek_list_has_a_header_and_a_line_per_peek() {
        let peek = |id: &str, pid| v1::PeekSummary {
            id: id.to_owned(),
            pid,
            title: format!("Peek at process {pid} (x): x --serve"),
            triggered_unix_nanos: 1_795_000_000_000_000_000,
            bytes: 10,
        };
        let text = peek_table(&[peek("20261121T201512.123Z-7-0", 7), peek("a-12-1", 12)]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID ") && lines[0].ends_with("REPORT"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("20261121T201512.123Z-7-0  2026-11-18T"),
            "{text}"
        );
        assert!(
            lines[2].contains("      12  Peek at process 12 (x)"),
            "{text}"
        );
        assert_eq!(peek_table(&[]), "");
    }
}
