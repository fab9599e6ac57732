//! The peek signal: following the kernel's notices of it, whether a process
//! without a handler is kept from being killed by it, and its name.
//!
//! Owns those; it must not run peeks (the peeker does, `on_signal`).

use std::time::{Instant, SystemTime};

use profiler_common::{PeekSignal, peek_signal_result};
use tracing::{debug, info, warn};

use super::{
    DEATH_NOTICE_WAIT, Peeker, TriggerSource,
    running::Trigger,
    snapshot::{self, Disposition},
};
use crate::{
    kernel::{peek_signals::PeekSignals, programs::OptionalProgramError},
    lock,
};

/// Whether a peek signal aimed at a process without a handler is kept from
/// killing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protection {
    pub active: bool,
    /// Why, in plain words.
    pub reason: String,
}

/// Reads peek signals from the kernel until the daemon stops, and starts
/// their peeks.
pub async fn follow_signals(peeker: Peeker, signals: PeekSignals) {
    let err = signals.follow(|signal| peeker.on_signal(signal)).await;
    warn!("cannot wait for peek signals: {err}; peeks by signal are off");
}

/// Whether processes without a handler are protected from the peek
/// signal, and why or why not, for the start-up log and the status.
pub fn protection(signal_guard: Result<(), OptionalProgramError>) -> Protection {
    match signal_guard {
        Ok(()) => Protection {
            active: true,
            reason: "a BPF LSM program on task_kill refuses the peek signal to a process \
                     without a handler (the sender gets EPERM) and peeks at it instead"
                .to_owned(),
        },
        Err(reason) => Protection {
            active: false,
            reason: reason.to_string(),
        },
    }
}

/// Logs at start-up what a peek signal does to a process without a handler.
pub fn warn_about_protection(peeker: &Peeker) {
    let protection = peeker.protection();
    let signal = &peeker.inner.signal_name;
    if peeker.settings().signal == 0 {
        info!("peeks by signal are off; `profilerctl peek PID` still works");
    } else if protection.active {
        info!(
            "a {signal} sent to a process without a handler for it is intercepted: the process is peeked, not killed"
        );
    } else {
        warn!(
            "{signal} sent to a process without a handler for it will terminate that process \
             (the kernel's default action), because: {}. Use `profilerctl peek PID` for such \
             processes, or choose another peek_signal in the configuration",
            protection.reason
        );
    }
}

/// The signal's conventional name, e.g. `SIGUSR1`.
pub fn signal_name(signal: u32) -> String {
    if signal == 0 {
        return "no signal".to_owned();
    }
    // SAFETY: strsignal returns a pointer to a static or thread-local
    // string, or NULL; it is copied at once.
    let description = unsafe {
        let text = libc::strsignal(signal as i32);
        (!text.is_null()).then(|| {
            std::ffi::CStr::from_ptr(text)
                .to_string_lossy()
                .into_owned()
        })
    };
    match signal as i32 {
        libc::SIGUSR1 => "SIGUSR1".to_owned(),
        libc::SIGUSR2 => "SIGUSR2".to_owned(),
        _ => format!(
            "signal {signal}{}",
            description
                .map(|text| format!(" ({text})"))
                .unwrap_or_default()
        ),
    }
}

impl Peeker {
    /// Handles a peek signal the kernel passed on.
    pub fn on_signal(&self, signal: &PeekSignal) {
        if signal.result == peek_signal_result::KILLED {
            self.on_killed(signal);
            return;
        }
        lock(&self.inner.stats).signals += 1;
        let intercepted = signal.result == peek_signal_result::INTERCEPTED;
        let pid = match snapshot::process_of(signal.target) {
            Ok(pid) => pid,
            Err(err) => {
                self.await_death(signal.target, err.to_string());
                return;
            }
        };
        if pid == signal.sender_pid {
            lock(&self.inner.stats).self_sent += 1;
            return;
        }
        if !intercepted {
            let dying = match snapshot::disposition(pid, signal.signal) {
                // The kernel's default action ends the process: there will
                // be nothing to peek at.
                Disposition::Default => Some("it has no handler for the peek signal"),
                // Gone between the two reads (a process without a handler
                // dying of the signal, the daemon slower than it): the
                // kernel's notice of its death may still be on its way.
                Disposition::Unknown if snapshot::process_of(signal.target).is_err() => {
                    Some("it was gone before its handling of the signal could be read")
                }
                _ => None,
            };
            if let Some(why) = dying {
                self.await_death(pid, why.to_owned());
                return;
            }
        }
        let source = TriggerSource::Signal {
            signal: signal.signal,
            sender_pid: signal.sender_pid,
            sender_command: crate::tasks::command_name(&signal.sender_comm),
            intercepted,
        };
        let trigger = Trigger {
            source,
            triggered: SystemTime::now(),
            bound_per_user: true,
        };
        self.start(pid, trigger, None);
    }

    /// Waits a moment for the kernel to say that `pid` died of the peek
    /// signal (see [`Peeker::on_killed`]), which counts it; counts it as
    /// gone otherwise. Either way the trigger is counted once.
    fn await_death(&self, pid: u32, why: String) {
        lock(&self.inner.doomed).insert(pid, Instant::now());
        let peeker = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DEATH_NOTICE_WAIT).await;
            if lock(&peeker.inner.doomed).remove(&pid).is_some() {
                lock(&peeker.inner.stats).gone += 1;
                debug!(pid, "peek signal not followed: {why}");
            }
        });
    }

    /// The kernel saw a process die of the peek signal it was sent.
    fn on_killed(&self, event: &PeekSignal) {
        let pid = event.target;
        lock(&self.inner.doomed).remove(&pid);
        lock(&self.inner.stats).killed += 1;
        let command = crate::tasks::command_name(&event.target_comm);
        let signal = &self.inner.signal_name;
        warn!(
            pid,
            command = %command,
            "process {pid} ({command}) was terminated by {signal}: it has no handler for it, \
             and the kernel's default action ends the process; use `profilerctl peek {pid}` \
             (which sends no signal) for such processes, or set peek_signal to a signal they \
             handle"
        );
    }
}
