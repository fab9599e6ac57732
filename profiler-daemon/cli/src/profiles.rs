//! The commands that report windows of samples: profile, query,
//! flamegraph, callers, diff and top.

use std::{io::IsTerminal as _, time::Duration, time::SystemTime};

use anyhow::{Result, bail};
use profilerd_client::v1;

use crate::{
    Client,
    args::{
        self, DiffArgs, DiffFormatArg, FlamegraphArgs, FormatArg, ReportArgs, SelectorArgs,
        TopArgs, WindowArgs,
    },
    format,
    output::{self, Progress},
};

/// Top's interval bounds, as the daemon has them.
const TOP_INTERVALS: std::ops::RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(60);
const TOP_MAX_FUNCTIONS: u32 = 1000;

/// Profiles for `duration`, or without one until Ctrl-C (at most the
/// daemon's longest profile), at the daemon's rate or at `frequency`
/// (the processes selected by pid), and delivers the report.
pub async fn profile(
    daemon: &mut Client,
    selector: &SelectorArgs,
    duration: Option<Duration>,
    frequency: Option<u32>,
    report: &ReportArgs,
) -> Result<()> {
    output::refuse_binary_on_terminal(report.format.binary(), report.output.as_deref())?;
    let longest = longest_profile(daemon).await?;
    let asked = match duration {
        Some(duration) => Some(checked_against(duration, longest, "--duration")?),
        None => {
            eprintln!(
                "profiling until Ctrl-C (at most {}, the daemon's max_profile_duration)",
                humantime::format_duration(longest)
            );
            None
        }
    };
    let window = Window {
        duration: asked.unwrap_or(longest),
        frequency,
    };
    let reply = profile_window(daemon, selector, window, report.to_proto()).await?;
    output::deliver(reply, report.output.as_deref(), asked)?;
    if let (FormatArg::Gecko, Some(path)) = (report.format, &report.output) {
        eprintln!(
            "open {} in the Firefox Profiler: https://profiler.firefox.com, \"Load a profile from \
             file\"",
            path.display()
        );
    }
    Ok(())
}

/// The longest profile the daemon allows.
async fn longest_profile(daemon: &mut Client) -> Result<Duration> {
    let status = daemon
        .get_status(v1::GetStatusRequest::default())
        .await?
        .into_inner();
    Ok(Duration::from_millis(status.max_profile_duration_ms))
}

/// A window to profile: how long, and at which rate of its own (the
/// daemon's when none).
struct Window {
    duration: Duration,
    frequency: Option<u32>,
}

/// Profiles the next `window`; Ctrl-C ends the window early (the daemon
/// then reports what it sampled), a second Ctrl-C gives up.
async fn profile_window(
    daemon: &mut Client,
    selector: &SelectorArgs,
    window: Window,
    options: v1::ReportOptions,
) -> Result<v1::ProfileReply> {
    let duration_ms = window.duration.as_millis() as u64;
    let cut_token = crate::random_token();
    let request = v1::ProfileRequest {
        duration_ms,
        selector: Some(selector.to_proto()),
        options: Some(options),
        mode: selector.mode(),
        cut_token: cut_token.clone(),
        frequency_hz: window.frequency.unwrap_or(0),
    };
    let progress = Progress::start(window.duration, "stops early and reports");
    let mut cutter = daemon.clone();
    let call = daemon.profile(request);
    tokio::pin!(call);
    let reply = tokio::select! {
        reply = &mut call => reply,
        _ = tokio::signal::ctrl_c() => {
            progress.finish();
            eprintln!("interrupted: ending the window now (Ctrl-C again to give up the report)");
            cutter.cut_profile(v1::CutProfileRequest { cut_token }).await?;
            tokio::select! {
                reply = &mut call => reply,
                _ = tokio::signal::ctrl_c() => bail!("interrupted twice: the report was given up"),
            }
        }
    };
    Ok(reply?.into_inner())
}

/// The duration in milliseconds, once checked against the daemon's
/// longest profile.
pub(crate) async fn checked_duration(
    daemon: &mut Client,
    duration: Duration,
    flag: &str,
) -> Result<u64> {
    let max = longest_profile(daemon).await?;
    Ok(checked_against(duration, max, flag)?.as_millis() as u64)
}

/// `duration`, unless it is shorter than 1 ms or longer than `max`.
fn checked_against(duration: Duration, max: Duration, flag: &str) -> Result<Duration> {
    if duration < Duration::from_millis(1) {
        bail!("{flag} must be at least 1ms");
    }
    match u64::try_from(duration.as_millis()) {
        Ok(_) if duration <= max => Ok(duration),
        _ => bail!(
            "{flag} {} is longer than the longest profile the daemon allows, {} \
             (max_profile_duration in its configuration)",
            humantime::format_duration(duration),
            humantime::format_duration(max)
        ),
    }
}

pub async fn query(
    daemon: &mut Client,
    selector: &SelectorArgs,
    window: &WindowArgs,
    report: &ReportArgs,
) -> Result<()> {
    output::refuse_binary_on_terminal(report.format.binary(), report.output.as_deref())?;
    let (start_unix_nanos, end_unix_nanos) = window.to_unix_nanos();
    let reply = daemon
        .query(v1::QueryRequest {
            start_unix_nanos,
            end_unix_nanos,
            selector: Some(selector.to_proto()),
            options: Some(report.to_proto()),
            mode: selector.mode(),
        })
        .await?
        .into_inner();
    output::deliver(reply, report.output.as_deref(), None)
}

pub async fn callers(
    daemon: &mut Client,
    function: String,
    selector: &SelectorArgs,
    window: &WindowArgs,
) -> Result<()> {
    let (start_unix_nanos, end_unix_nanos) = window.to_unix_nanos();
    let reply = daemon
        .callers(v1::CallersRequest {
            function: function.clone(),
            start_unix_nanos,
            end_unix_nanos,
            selector: Some(selector.to_proto()),
        })
        .await?
        .into_inner();
    if reply.total == 0 {
        bail!(
            "no sample of that window has a function named {function:?} (nor one whose name \
             ends in ::{function}, nor a C library alias of it such as __GI___libc_{function}); \
             `profilerctl query --format flat` with the same window lists the functions it has"
        );
    }
    output::print_text(&reply.text)
}

pub async fn diff(daemon: &mut Client, diff: &DiffArgs) -> Result<()> {
    output::refuse_binary_on_terminal(diff.format == DiffFormatArg::Pprof, diff.output.as_deref())?;
    let options = match diff.format {
        DiffFormatArg::Text => None,
        DiffFormatArg::Pprof => Some(v1::Format::Pprof),
        DiffFormatArg::Flamegraph => Some(v1::Format::Flamegraph),
    }
    .map(|format| v1::ReportOptions {
        format: format as i32,
        ..Default::default()
    });
    let now = SystemTime::now();
    let ago = |duration: Duration| args::unix_nanos(args::ago(now, duration));
    let reply = daemon
        .diff(v1::DiffRequest {
            base: Some(v1::Window {
                start_unix_nanos: ago(diff.base_since),
                end_unix_nanos: ago(diff.base_until.unwrap_or(diff.since)),
            }),
            target: Some(v1::Window {
                start_unix_nanos: ago(diff.since),
                end_unix_nanos: diff.until.map_or(0, ago),
            }),
            selector: Some(diff.selector.to_proto()),
            target_selector: None,
            limit: diff.limit,
            options,
            normalize: diff.normalize,
            functions: diff.functions.clone(),
        })
        .await?
        .into_inner();
    if diff.format == DiffFormatArg::Text {
        return output::print_text(&reply.text);
    }
    output::write_output(&reply.report, diff.output.as_deref())?;
    if let Some(path) = &diff.output {
        eprintln!("diff written to {}", path.display());
    }
    for summary in [&reply.base, &reply.target].into_iter().flatten() {
        for warning in &summary.warnings {
            eprintln!("warning: {warning}");
        }
    }
    Ok(())
}

pub async fn flamegraph(daemon: &mut Client, graph: &FlamegraphArgs) -> Result<()> {
    let options = v1::ReportOptions {
        format: v1::Format::Flamegraph as i32,
        kernel: Some(!graph.no_kernel),
        ..Default::default()
    };
    let (reply, asked) = match (graph.duration, graph.since) {
        (Some(duration), _) => (
            {
                let duration_ms = checked_duration(daemon, duration, "--duration").await?;
                let window = Window {
                    duration: Duration::from_millis(duration_ms),
                    frequency: None,
                };
                profile_window(daemon, &graph.selector, window, options).await?
            },
            Some(duration),
        ),
        (None, Some(since)) => {
            let now = SystemTime::now();
            let reply = daemon
                .query(v1::QueryRequest {
                    start_unix_nanos: args::unix_nanos(args::ago(now, since)),
                    end_unix_nanos: graph
                        .until
                        .map_or(0, |until| args::unix_nanos(args::ago(now, until))),
                    selector: Some(graph.selector.to_proto()),
                    options: Some(options),
                    mode: graph.selector.mode(),
                })
                .await?
                .into_inner();
            (reply, None)
        }
        (None, None) => bail!(
            "say which window to draw: --duration 10s profiles the next 10 seconds, --since 15m \
             draws the last 15 minutes"
        ),
    };
    output::deliver(reply, Some(&graph.output), asked)
}

pub async fn top(daemon: &mut Client, top: &TopArgs) -> Result<()> {
    if !TOP_INTERVALS.contains(&top.interval) {
        bail!(
            "--interval {} is out of range: 100ms to 1m",
            humantime::format_duration(top.interval)
        );
    }
    if !(1..=TOP_MAX_FUNCTIONS).contains(&top.limit) {
        bail!(
            "--limit {} is out of range: 1 to {TOP_MAX_FUNCTIONS}",
            top.limit
        );
    }
    // Accumulated, a function outside an interval's first few still
    // counts: more are asked for than are shown.
    let asked = match top.no_decay {
        true => top.limit,
        false => (top.limit * 5).clamp(100, TOP_MAX_FUNCTIONS),
    };
    let mut updates = daemon
        .top(v1::TopRequest {
            selector: Some(top.selector.to_proto()),
            interval_ms: top.interval.as_millis() as u64,
            limit: asked,
            user_only: top.user_only,
            mode: top.selector.mode(),
        })
        .await?
        .into_inner();
    let live = std::io::stdout().is_terminal();
    let mut shown = 0;
    let mut accumulated = crate::top::Accumulated::default();
    while top.count.is_none_or(|count| shown < count) {
        let Some(update) = updates.message().await? else {
            bail!("the daemon ended the top stream (it is shutting down?)");
        };
        let text = match top.no_decay {
            true => format::top(&update),
            false => {
                accumulated.add(&update);
                format::top(&accumulated.update(&update, top.limit as usize))
                    + crate::top::DECAY_NOTE
            }
        };
        output::print_text(&if live {
            // Home the cursor and clear the screen: one frame per update.
            format!("\x1b[H\x1b[2J{text}")
        } else {
            format!("{text}\n")
        })?;
        shown += 1;
    }
    Ok(())
}
