//! The daemon's stop, as the API sees it: one flag, raised once on SIGTERM
//! or SIGINT, that every long-running request (Profile, Top, WatchPeeks)
//! watches so that it ends at once with a status that says why, and that
//! refuses requests still arriving on open connections.
//!
//! Owns the flag only; the serving module raises it, the API reads it. It
//! must not stop anything itself.

use tokio::sync::watch;

/// The message every request cut short or refused by the stop carries.
pub const MESSAGE: &str = "profilerd is shutting down (SIGTERM or SIGINT); retry once it is back \
                           (under systemd it restarts by itself when it failed)";

/// Raises the flag; held by whoever decides the daemon stops.
#[derive(Debug)]
pub struct StopSwitch(watch::Sender<bool>);

/// Watches the flag. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Stopping(watch::Receiver<bool>);

/// A new, lowered flag.
pub fn flag() -> (StopSwitch, Stopping) {
    let (switch, stopping) = watch::channel(false);
    (StopSwitch(switch), Stopping(stopping))
}

impl StopSwitch {
    pub fn stop(&self) {
        self.0.send_replace(true);
    }
}

impl Stopping {
    pub fn is_stopping(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the flag is raised (at once if it is).
    pub async fn wait(&self) {
        let mut stopping = self.0.clone();
        // An error means the switch is gone without being raised: the
        // daemon is ending anyway.
        let _ = stopping.wait_for(|stopping| *stopping).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiters_wake_when_the_flag_is_raised() {
        let (switch, stopping) = flag();
        assert!(!stopping.is_stopping());
        let waiter = tokio::spawn({
            let stopping = stopping.clone();
            async move { stopping.wait().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        switch.stop();
        waiter.await.unwrap();
        assert!(stopping.is_stopping());
        // Later waiters return at once.
        stopping.wait().await;
    }
}
