//! Where profilerctl's output goes: reports to a file or standard output
//! (never binary to a terminal), one-line summaries and progress to
//! standard error.

use std::{
    io::{IsTerminal as _, Write as _},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use profilerd_client::v1;

use crate::format;

/// Refuses, before any waiting, to print a binary report to a terminal.
pub fn refuse_binary_on_terminal(binary: bool, output: Option<&Path>) -> Result<()> {
    if binary && output.is_none() && std::io::stdout().is_terminal() {
        bail!(
            "this report is binary (gzipped protobuf, or Python's marshal data) and standard \
             output is a terminal: pass --output FILE, or redirect standard output to a file"
        );
    }
    Ok(())
}

pub fn print_text(text: &str) -> Result<()> {
    write_output(text.as_bytes(), None)
}

/// Writes `bytes` to the file, or to standard output.
pub fn write_output(bytes: &[u8], output: Option<&Path>) -> Result<()> {
    match output {
        Some(path) => std::fs::write(path, bytes)
            .with_context(|| format!("cannot write the report to {}", path.display())),
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(bytes)
                .and_then(|()| stdout.flush())
                .context("cannot write the report to standard output")
        }
    }
}

/// Writes a report where asked and its summary to standard error; says
/// when its window was cut short, and by how much.
pub fn deliver(
    reply: v1::ProfileReply,
    output: Option<&Path>,
    asked: Option<Duration>,
) -> Result<()> {
    write_output(&reply.report, output)?;
    if let Some(summary) = reply.summary {
        eprintln!("{}", format::summary(&summary, output));
        if summary.cut_short {
            let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
            match asked {
                Some(asked) => eprintln!(
                    "warning: interrupted: the window was cut short after {seconds:.1}s of the \
                     {} asked for",
                    humantime::format_duration(asked)
                ),
                // Until Ctrl-C: the window ended as asked.
                None => eprintln!("the window ended at Ctrl-C, after {seconds:.1}s"),
            }
        }
    }
    Ok(())
}

/// A progress bar on standard error while the daemon profiles (hidden when
/// standard error is not a terminal).
pub struct Progress {
    bar: indicatif::ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    pub fn start(duration: Duration, interrupt: &str) -> Self {
        let bar = indicatif::ProgressBar::new(duration.as_millis() as u64);
        let template = format!("profiling {{bar:30}} {{elapsed}}/{{msg}} (Ctrl-C {interrupt})");
        bar.set_style(
            indicatif::ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(humantime::format_duration(duration).to_string());
        let ticker = tokio::spawn({
            let bar = bar.clone();
            let started = Instant::now();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let elapsed = started.elapsed().min(duration);
                    bar.set_position(elapsed.as_millis() as u64);
                    if elapsed >= duration {
                        bar.set_message("done; building the report".to_owned());
                    }
                }
            }
        });
        Self { bar, ticker }
    }

    pub fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}
