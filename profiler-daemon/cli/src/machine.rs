//! The commands about the daemon and the machine: status, metrics and
//! targets.

use std::time::SystemTime;

use anyhow::{Context as _, Result, bail};
use profilerd_client::v1;

use crate::{Client, format, output};

pub async fn status(daemon: &mut Client, verbose: bool, json: bool) -> Result<()> {
    let status = daemon
        .get_status(v1::GetStatusRequest::default())
        .await?
        .into_inner();
    if json {
        let text =
            serde_json::to_string_pretty(&status).context("cannot write the status as JSON")?;
        return output::print_text(&format!("{text}\n"));
    }
    output::print_text(&crate::status::status(&status, verbose, SystemTime::now()))
}

pub async fn metrics(daemon: &mut Client) -> Result<()> {
    let status = daemon
        .get_status(v1::GetStatusRequest { metrics: true })
        .await?
        .into_inner();
    output::print_text(&status.metrics)
}

pub async fn targets(
    daemon: &mut Client,
    pids: Vec<u32>,
    cgroups: Vec<String>,
    everything: bool,
) -> Result<()> {
    let targets = if everything || !pids.is_empty() || !cgroups.is_empty() {
        daemon
            .set_targets(v1::SetTargetsRequest {
                everything,
                pids,
                cgroups,
            })
            .await?
            .into_inner()
    } else {
        let status = daemon
            .get_status(v1::GetStatusRequest::default())
            .await?
            .into_inner();
        match status.targets {
            Some(targets) => targets,
            None if status.targets_hidden => bail!(
                "only root and the admin group may see what the machine samples (the targets \
                 may name other users' processes)"
            ),
            None => v1::Targets {
                everything: true,
                ..Default::default()
            },
        }
    };
    output::print_text(&format!("{}\n", format::targets_text(&targets)))
}
