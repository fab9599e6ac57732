//! `profilerctl allocs`: what one process allocates and still holds, over
//! one Allocs request, which owns the daemon's probes: Ctrl-C cuts it short
//! (CutProfile, by its token) and the daemon still reports; a second Ctrl-C,
//! or this process killed, gives it up, and the probes come off with it.

use anyhow::{Result, bail};
use profilerd_client::v1;

use crate::{
    Client, args::AllocsArgs, format, output, output::Progress, profiles::checked_duration,
};

pub async fn allocs(daemon: &mut Client, args: &AllocsArgs) -> Result<()> {
    let report = &args.report;
    output::refuse_binary_on_terminal(report.format.binary(), report.output.as_deref())?;
    let duration_ms = checked_duration(daemon, args.duration, "--duration").await?;
    let how = match (args.sample_bytes, args.sample_rate) {
        (_, Some(rate)) => Some(v1::alloc_sampling::How::SampleRate(rate)),
        (Some(bytes), None) => Some(v1::alloc_sampling::How::SampleBytes(bytes)),
        (None, None) => None,
    };
    let cut_token = crate::random_token();
    let request = v1::AllocsRequest {
        pid: args.pid,
        duration_ms,
        sampling: Some(v1::AllocSampling { how }),
        options: Some(report.to_proto()),
        inuse: args.inuse,
        cut_token: cut_token.clone(),
    };
    let progress = Progress::start(args.duration, "stops early and reports");
    let mut cutter = daemon.clone();
    let call = daemon.allocs(request);
    tokio::pin!(call);
    let reply = tokio::select! {
        reply = &mut call => {
            progress.finish();
            reply
        }
        _ = tokio::signal::ctrl_c() => {
            progress.finish();
            eprintln!("interrupted: ending the profile now (Ctrl-C again to give up the report)");
            cutter.cut_profile(v1::CutProfileRequest { cut_token }).await?;
            tokio::select! {
                reply = &mut call => reply,
                _ = tokio::signal::ctrl_c() => bail!("interrupted twice: the report was given up"),
            }
        }
    };
    let reply = reply?.into_inner();
    output::write_output(&reply.report, report.output.as_deref())?;
    if let Some(summary) = reply.summary {
        eprintln!(
            "{}",
            format::allocs_summary(&summary, report.output.as_deref())
        );
    }
    Ok(())
}
