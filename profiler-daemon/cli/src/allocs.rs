//! `profilerctl allocs`: what one process allocates and still holds, over
//! an allocation session opened for the duration (so that Ctrl-C ends it
//! early and still reports).

use anyhow::Result;
use profilerd_client::v1;

use crate::{
    Client,
    args::{AllocsArgs, FormatArg},
    format, output,
    output::Progress,
    profiles::checked_duration,
};

pub async fn allocs(daemon: &mut Client, args: &AllocsArgs) -> Result<()> {
    let report = &args.report;
    output::refuse_binary_on_terminal(report.format == FormatArg::Pprof, report.output.as_deref())?;
    checked_duration(daemon, args.duration, "--duration").await?;
    let how = match (args.sample_bytes, args.sample_rate) {
        (_, Some(rate)) => Some(v1::alloc_sampling::How::SampleRate(rate)),
        (Some(bytes), None) => Some(v1::alloc_sampling::How::SampleBytes(bytes)),
        (None, None) => None,
    };
    let started = daemon
        .start_allocs(v1::StartAllocsRequest {
            pid: args.pid,
            sampling: Some(v1::AllocSampling { how }),
        })
        .await?
        .into_inner();
    let progress = Progress::start(args.duration, "stops early and reports");
    let interrupted = tokio::select! {
        () = tokio::time::sleep(args.duration) => false,
        _ = tokio::signal::ctrl_c() => true,
    };
    progress.finish();
    if interrupted {
        eprintln!("interrupted: ending the profile now");
    }
    let reply = daemon
        .stop_allocs(v1::StopAllocsRequest {
            session_id: started.session_id,
            options: Some(report.to_proto()),
            inuse: args.inuse,
        })
        .await?
        .into_inner();
    output::write_output(&reply.report, report.output.as_deref())?;
    if let Some(summary) = reply.summary {
        eprintln!(
            "{}",
            format::allocs_summary(&summary, report.output.as_deref())
        );
    }
    Ok(())
}
