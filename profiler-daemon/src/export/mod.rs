//! Fleet export: every `push_interval`, the window just ended is cut from
//! the store (the whole machine's CPU samples, exactly once: consecutive
//! windows share their cut), split by service, encoded per target and
//! handed to each target's delivery, which sends it in the background.
//! Sampling and the local API never wait on it.
//!
//! Owns the push targets while they run and their window loop; it must not
//! sample or serve requests. Layers: `settings` (the configuration),
//! `naming` (service names), `connection` (TLS, headers, HTTP POST),
//! `delivery` (queue, spool, retries), `pyroscope` and `otlp` (encodings
//! and senders).

pub mod connection;
pub mod delivery;
pub mod naming;
pub mod otlp;
pub mod pods;
pub mod pyroscope;
pub mod settings;

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::Arc,
    time::SystemTime,
};

use anyhow::{Context as _, Result};
use tokio::sync::watch;
use tracing::{info, warn};

use self::{
    connection::Connection,
    delivery::{Bounds, Delivery, Payload, Sender},
    settings::{PushSettings, TargetKind},
};
use crate::{
    profile::{Format, Profile, ReportOptions},
    service::{PushTarget, Service, TargetStatus},
};

/// One service's share of a window.
#[derive(Clone, Debug)]
pub struct ServiceProfile {
    pub service: String,
    /// Gzipped profile.proto.
    pub pprof: Vec<u8>,
}

/// A running target, as status shows it.
#[derive(Clone)]
pub struct TargetHandle {
    pub name: String,
    pub kind: TargetKind,
    pub url: String,
    pub delivery: Delivery,
}

impl PushTarget for TargetHandle {
    fn status(&self) -> TargetStatus {
        TargetStatus {
            name: self.name.clone(),
            kind: self.kind.name(),
            url: self.url.clone(),
            stats: self.delivery.stats(),
        }
    }
}

/// Runs the push targets; `apply` replaces them (configuration reload).
pub struct Exporter {
    service: Arc<Service>,
    spool_root: PathBuf,
    /// The export's share of the memory budget: the targets' queues
    /// together hold at most this (each at most its `queue_bytes`).
    memory_share: u64,
    /// The targets running now.
    targets: Vec<TargetHandle>,
    /// Stops the tasks of the targets running now.
    stop: Option<watch::Sender<bool>>,
}

impl Exporter {
    /// Pushes with the queues together within `memory_share` bytes (0: no
    /// bound but each target's `queue_bytes`).
    pub fn new(service: Arc<Service>, state_dir: &Path, memory_share: u64) -> Self {
        Self {
            service,
            spool_root: state_dir.join("push-spool"),
            memory_share,
            targets: Vec::new(),
            stop: None,
        }
    }

    /// Starts `settings`' targets in place of the running ones (a target
    /// kept by name keeps its queue). Reads every target's files first: on
    /// an error nothing changes and it says which file of which target.
    pub fn apply(&mut self, settings: &PushSettings) -> Result<()> {
        let mut prepared = Vec::new();
        for (index, target) in settings.targets.iter().enumerate() {
            let name = target.display_name(&settings.targets, index);
            let connection =
                Connection::of(target).with_context(|| format!("push target {name:?}"))?;
            prepared.push((name, target.clone(), connection));
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(true);
        }
        let board = self.service.push_board();
        board.replace(Vec::new());
        let previous = std::mem::take(&mut self.targets);
        if prepared.is_empty() {
            return Ok(());
        }
        let (stop, stopped) = watch::channel(false);
        let wait = move |mut stopped: watch::Receiver<bool>| async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        };
        let mut targets = Vec::new();
        let per_target = match self.memory_share {
            0 => u64::MAX,
            share => share / prepared.len() as u64,
        };
        for (name, target, connection) in prepared {
            let queue_bytes = target.queue_bytes.as_u64().min(per_target);
            if queue_bytes < target.queue_bytes.as_u64() {
                info!(
                    target = name,
                    queue_bytes,
                    "the push queue is held to its share of memory_budget (what does not fit \
                     goes to the spool, or is dropped and counted)"
                );
            }
            let kept = previous
                .iter()
                .find(|old| old.name == name && old.kind == target.kind)
                .map(|old| old.delivery.clone());
            let delivery = kept.unwrap_or_else(|| {
                Delivery::new(
                    &name,
                    Bounds {
                        queue_bytes,
                        spool: (target.spool_bytes.as_u64() > 0).then(|| {
                            (
                                self.spool_root.join(sanitize(&name)),
                                target.spool_bytes.as_u64(),
                            )
                        }),
                        max_age: target.max_age,
                        max_backoff: MAX_BACKOFF,
                    },
                )
            });
            let sender: Arc<dyn Sender> = match target.kind {
                TargetKind::Pyroscope => Arc::new(pyroscope::PyroscopeSender { connection }),
                TargetKind::Otlp => Arc::new(otlp::OtlpSender::new(&target, &connection)?),
            };
            tokio::spawn(delivery.clone().run(sender, wait(stopped.clone())));
            info!(target = name, url = target.url, kind = ?target.kind, "pushing profiles");
            targets.push(TargetHandle {
                name,
                kind: target.kind,
                url: target.url.clone(),
                delivery,
            });
        }
        board.replace(
            targets
                .iter()
                .map(|target| Arc::new(target.clone()) as Arc<dyn PushTarget>)
                .collect(),
        );
        self.targets = targets.clone();
        tokio::spawn(push_windows(
            self.service.clone(),
            settings.clone(),
            targets,
            wait(stopped),
        ));
        self.stop = Some(stop);
        Ok(())
    }
}

/// The longest wait between two tries of a payload.
const MAX_BACKOFF: std::time::Duration = std::time::Duration::from_secs(60);

/// A target's name as a file name.
fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Cuts a window every interval and offers it to every target.
async fn push_windows(
    service: Arc<Service>,
    settings: PushSettings,
    targets: Vec<TargetHandle>,
    stopped: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stopped);
    let mut cursor = match service.export_cursor().await {
        Ok(cursor) => cursor,
        Err(err) => {
            warn!("cannot start pushing profiles: {err}");
            return;
        }
    };
    let labels = series_labels(&settings.labels);
    let pods = Arc::new(std::sync::Mutex::new(pods::PodNames::default()));
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.tick().await;
    loop {
        tokio::select! {
            () = &mut stopped => return,
            _ = ticks.tick() => {}
        }
        let profile = match service.export_window(&mut cursor).await {
            Ok(profile) => profile,
            Err(err) => {
                warn!("cannot cut the window to push: {err}");
                continue;
            }
        };
        let kinds: Vec<TargetKind> = targets.iter().map(|target| target.kind).collect();
        let (for_settings, for_labels, pods) = (settings.clone(), labels.clone(), pods.clone());
        let encoded = tokio::task::spawn_blocking(move || {
            let pods = |uid: &str| crate::lock(&pods).name(uid);
            encode_window(&profile, &for_settings, &for_labels, &kinds, &pods)
        })
        .await;
        let encoded = match encoded {
            Ok(Ok(encoded)) => encoded,
            Ok(Err(err)) => {
                warn!("cannot encode the window to push: {err:#}");
                continue;
            }
            Err(err) => {
                warn!("the push encoding task failed: {err}");
                continue;
            }
        };
        let made = SystemTime::now();
        for target in &targets {
            let body = match target.kind {
                TargetKind::Pyroscope => encoded.pyroscope.clone(),
                TargetKind::Otlp => encoded.otlp.clone(),
            };
            if let Some(body) = body {
                target.delivery.offer(Payload { made, body });
            }
        }
    }
}

/// A window's request in each protocol the targets speak (`None`: no
/// target speaks it, or the window holds nothing to push).
struct Encoded {
    pyroscope: Option<Vec<u8>>,
    otlp: Option<Vec<u8>>,
}

fn encode_window(
    profile: &Profile,
    settings: &PushSettings,
    labels: &[(String, String)],
    kinds: &[TargetKind],
    pods: naming::PodLookup<'_>,
) -> Result<Encoded> {
    let empty = profile
        .samples
        .iter()
        .all(|sample| profile.threads[sample.thread as usize].pid == 0);
    if empty {
        return Ok(Encoded {
            pyroscope: None,
            otlp: None,
        });
    }
    let pyroscope = if kinds.contains(&TargetKind::Pyroscope) {
        let profiles = split_by_service(profile.clone(), settings, pods)?;
        Some(pyroscope::encode(&profiles, labels))
    } else {
        None
    };
    let otlp = kinds
        .contains(&TargetKind::Otlp)
        .then(|| otlp::encode(profile, settings, &host_name(), pods));
    Ok(Encoded { pyroscope, otlp })
}

/// The configured labels, with the host name unless set.
fn series_labels(configured: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut labels = configured.clone();
    labels
        .entry("hostname".to_owned())
        .or_insert_with(host_name);
    labels.into_iter().collect()
}

pub fn host_name() -> String {
    rustix::system::uname()
        .nodename()
        .to_string_lossy()
        .into_owned()
}

/// One pprof per service, of the samples of its processes (the idle
/// tasks, pid 0, are not a service).
fn split_by_service(
    mut profile: Profile,
    settings: &PushSettings,
    pods: naming::PodLookup<'_>,
) -> Result<Vec<ServiceProfile>> {
    let services: Vec<String> = profile
        .threads
        .iter()
        .map(|thread| {
            naming::service_name(
                &settings.service_name_sources,
                &settings.service_name_default,
                &thread.cgroup,
                &thread.process_name,
                pods,
            )
        })
        .collect();
    let mut by_service: BTreeMap<&str, Vec<crate::profile::Sample>> = BTreeMap::new();
    for sample in std::mem::take(&mut profile.samples) {
        let thread = &profile.threads[sample.thread as usize];
        if thread.pid == 0 {
            continue;
        }
        by_service
            .entry(&services[sample.thread as usize])
            .or_default()
            .push(sample);
    }
    let options = ReportOptions {
        format: Format::Pprof,
        ..ReportOptions::default()
    };
    let mut profiles = Vec::with_capacity(by_service.len());
    for (service, samples) in by_service {
        profile.samples = samples;
        let pprof = crate::report::render(&profile, &options)
            .with_context(|| format!("cannot encode the profile of {service}"))?;
        profiles.push(ServiceProfile {
            service: service.to_owned(),
            pprof,
        });
    }
    Ok(profiles)
}
