//! Configuration reload, on SIGHUP: re-reads the file with the flags given
//! at start; when it is valid, applies what can change while the daemon
//! runs (sampling frequency; the store's retention, resolution and memory
//! ceiling; the longest profile; the peek and push settings; the log level, see
//! [`LIVE_KEYS`]) and names the changed keys that need a restart, which keep
//! their running values. An invalid file changes nothing; the error names
//! the key and the daemon goes on with the configuration it runs.
//!
//! Owns the running configuration and the order of applying; each setting
//! is applied by the module that owns it. It must not parse or validate.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, RwLock},
    time::SystemTime,
};

use tracing::{error, info, warn};

use crate::{
    daemon::config::{Config, LIVE_KEYS, Overrides},
    kernel::programs::LoadedPrograms,
    peek::Peeker,
    service::Service,
    store::Store,
};

/// Sets the log filter (`log_level`'s syntax); an error says why not.
pub type SetLogFilter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// What a reload changes, and how to reach it.
pub struct Reloader {
    pub path: Option<PathBuf>,
    pub overrides: Overrides,
    /// The configuration the daemon runs.
    pub running: Config,
    pub sampler: Arc<Mutex<LoadedPrograms>>,
    pub store: Arc<RwLock<Store>>,
    /// The memory budget divided at start (`memory_budget` needs a
    /// restart; `memory_limit` reloads within it).
    pub budget: crate::memory::MemoryBudget,
    pub peeker: Peeker,
    pub service: Arc<Service>,
    pub exporter: crate::export::Exporter,
    pub set_log_filter: SetLogFilter,
}

/// What one reload did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Changed keys now in effect.
    pub applied: Vec<String>,
    /// Changed keys that need a restart (still at their running values).
    pub need_restart: Vec<String>,
    /// Changed keys that could not be applied, and why.
    pub failed: Vec<(String, String)>,
    /// Why nothing was reloaded: the file is unreadable or invalid.
    pub rejected: Option<String>,
}

impl Reloader {
    /// Re-reads the configuration and applies it; logs what it did.
    pub fn reload(&mut self) -> Outcome {
        let new = match Config::load(self.path.as_deref(), &self.overrides) {
            Ok(new) => new,
            Err(err) => {
                error!(
                    "the configuration was not reloaded: {err}; profilerd goes on with the \
                     configuration it runs"
                );
                return Outcome {
                    rejected: Some(err.to_string()),
                    ..Outcome::default()
                };
            }
        };
        let changed = self.running.changed_keys(&new);
        let (live, need_restart): (Vec<String>, Vec<String>) = changed
            .into_iter()
            .partition(|key| LIVE_KEYS.contains(&key.as_str()));
        let mut outcome = Outcome {
            need_restart,
            ..Outcome::default()
        };
        let changed = |key: &str| live.iter().any(|changed| changed == key);
        let mut running = self.running.clone();

        if changed("frequency_hz") {
            match crate::lock(&self.sampler).set_frequency(new.frequency_hz) {
                Ok(()) => running.frequency_hz = new.frequency_hz,
                Err(err) => outcome
                    .failed
                    .push(("frequency_hz".into(), err.to_string())),
            }
        }
        running.retention = new.retention;
        running.resolution = new.resolution;
        running.memory_limit = new.memory_limit;
        crate::write_lock(&self.store)
            .set_settings(running.store_settings(&self.budget), SystemTime::now());
        running.max_profile_duration = new.max_profile_duration;
        self.service
            .set_live_settings(running.frequency_hz, running.max_profile_duration());
        running.offcpu = new.offcpu;
        self.service.set_offcpu_probability(running.offcpu);
        running.peek_duration = new.peek_duration;
        running.peek_frequency_hz = new.peek_frequency_hz;
        running.peek_allow_commands = new.peek_allow_commands.clone();
        running.peek_allow_uids = new.peek_allow_uids.clone();
        running.peek_allow_cgroups = new.peek_allow_cgroups.clone();
        running.max_concurrent_peeks = new.max_concurrent_peeks;
        running.peeks_kept = new.peeks_kept;
        running.peeks_max_bytes = new.peeks_max_bytes;
        running.peeks_kept_per_user = new.peeks_kept_per_user;
        running.peeks_per_user_per_minute = new.peeks_per_user_per_minute;
        self.peeker
            .set_settings(running.peek_settings(&self.budget));
        let push_keys = [
            "push_interval",
            "push_labels",
            "push_service_name",
            "push_service_default",
            "push",
        ];
        if push_keys.iter().any(|key| changed(key)) {
            match self.exporter.apply(&new.push_settings()) {
                Ok(()) => {
                    running.push_interval = new.push_interval;
                    running.push_labels = new.push_labels.clone();
                    running.push_service_name = new.push_service_name.clone();
                    running.push_service_default = new.push_service_default.clone();
                    running.push = new.push.clone();
                }
                Err(err) => {
                    for key in push_keys.iter().filter(|key| changed(key)) {
                        outcome.failed.push(((*key).into(), format!("{err:#}")));
                    }
                }
            }
        }
        if changed("log_level") {
            match (self.set_log_filter)(&new.log_level) {
                Ok(()) => running.log_level = new.log_level.clone(),
                Err(err) => outcome.failed.push(("log_level".into(), err)),
            }
        }
        outcome.applied = live
            .into_iter()
            .filter(|key| !outcome.failed.iter().any(|(failed, _)| failed == key))
            .collect();
        self.running = running;
        log(&outcome);
        outcome
    }
}

fn log(outcome: &Outcome) {
    if outcome.applied.is_empty() && outcome.need_restart.is_empty() && outcome.failed.is_empty() {
        info!("configuration reloaded: nothing changed");
        return;
    }
    if !outcome.applied.is_empty() {
        info!(keys = ?outcome.applied, "configuration reloaded; these settings are in effect");
    }
    if !outcome.need_restart.is_empty() {
        warn!(
            keys = ?outcome.need_restart,
            "these changed settings take effect only after a restart (`systemctl restart \
             profilerd`); until then they keep their running values"
        );
    }
    for (key, reason) in &outcome.failed {
        error!(
            key,
            "the new {key} could not be applied, the old one stays: {reason}"
        );
    }
}

/// Reloads on every SIGHUP, for as long as the daemon runs.
pub async fn follow_hangups(mut reloader: Reloader) {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(err) => {
            error!("cannot listen for SIGHUP, so the configuration cannot be reloaded: {err}");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        info!("SIGHUP received, reloading the configuration");
        // Reading a file and re-attaching perf events: off the async threads.
        reloader = match tokio::task::spawn_blocking(move || {
            reloader.reload();
            reloader
        })
        .await
        {
            Ok(reloader) => reloader,
            Err(err) => {
                error!("the configuration reload failed: {err}; SIGHUP is ignored from now on");
                return;
            }
        };
    }
}
