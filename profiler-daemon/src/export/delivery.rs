//! Delivering payloads to one push target: a bounded queue in memory, an
//! optional bounded spool on disk for when the backend is down, retries
//! with capped exponential backoff on retryable errors only, and what
//! became of every payload (sent, failed by cause, queued, spooled,
//! dropped).
//!
//! Owns the queue, the spool directory and the target's statistics; it must
//! not encode profiles nor know a protocol (a [`Sender`] does). Nothing
//! here ever makes the exporter wait: `offer` only queues.

use std::{
    collections::VecDeque,
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use tokio::sync::Notify;

pub use crate::service::DeliveryStats;
use tracing::{debug, info, warn};

/// Why a send failed, and whether trying again may help.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// Unavailable, a 5xx, 429, a timeout or a refused connection.
    Retryable { cause: String, message: String },
    /// Anything else (a 4xx, a bad request): the payload is dropped.
    Fatal { cause: String, message: String },
}

/// Sends one encoded payload to the backend.
pub trait Sender: Send + Sync + 'static {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), SendError>> + Send>>;
}

/// One encoded request, as made at the end of its window.
#[derive(Clone, Debug)]
pub struct Payload {
    pub made: SystemTime,
    pub body: Vec<u8>,
}

/// A target's bounds.
#[derive(Clone, Debug)]
pub struct Bounds {
    /// Most bytes queued in memory.
    pub queue_bytes: u64,
    /// Where payloads go when the queue is full (`None`: dropped), and the
    /// most bytes it holds.
    pub spool: Option<(PathBuf, u64)>,
    /// Payloads older than this are dropped, queued or spooled.
    pub max_age: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
}

struct State {
    queue: VecDeque<Payload>,
    queued_bytes: u64,
    /// Spool files, oldest first, with their sizes.
    spooled: VecDeque<(PathBuf, u64)>,
    /// Tells apart the spool files of one millisecond.
    spool_sequence: u64,
    stats: DeliveryStats,
}

/// One target's delivery: `offer` queues, a task of its own sends.
#[derive(Clone)]
pub struct Delivery {
    name: Arc<str>,
    bounds: Arc<Bounds>,
    state: Arc<Mutex<State>>,
    wake: Arc<Notify>,
}

impl Delivery {
    /// A delivery with its spool's leftovers (from an earlier run) queued
    /// for sending first.
    pub fn new(name: &str, bounds: Bounds) -> Self {
        let mut state = State {
            queue: VecDeque::new(),
            queued_bytes: 0,
            spooled: VecDeque::new(),
            spool_sequence: 0,
            stats: DeliveryStats::default(),
        };
        if let Some((dir, _)) = &bounds.spool {
            state.spooled = read_spool(dir);
            if !state.spooled.is_empty() {
                info!(
                    target = name,
                    payloads = state.spooled.len(),
                    "push payloads spooled by an earlier run will be sent"
                );
            }
        }
        let delivery = Self {
            name: Arc::from(name),
            bounds: Arc::new(bounds),
            state: Arc::new(Mutex::new(state)),
            wake: Arc::new(Notify::new()),
        };
        delivery.update_counts();
        delivery
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn stats(&self) -> DeliveryStats {
        crate::lock(&self.state).stats.clone()
    }

    /// Queues a payload (never waits); when the queue is over its bound,
    /// the oldest payloads go to the spool, or are dropped.
    pub fn offer(&self, payload: Payload) {
        {
            let mut state = crate::lock(&self.state);
            state.queued_bytes += payload.body.len() as u64;
            state.queue.push_back(payload);
            while state.queued_bytes > self.bounds.queue_bytes && state.queue.len() > 1 {
                let Some(oldest) = state.queue.pop_front() else {
                    break;
                };
                state.queued_bytes -= oldest.body.len() as u64;
                self.spill(&mut state, oldest);
            }
        }
        self.update_counts();
        self.wake.notify_one();
    }

    /// Sends what is queued with `sender`, oldest first, until `stopped`.
    pub async fn run(self, sender: Arc<dyn Sender>, stopped: impl Future<Output = ()>) {
        tokio::pin!(stopped);
        let mut backoff = INITIAL_BACKOFF;
        loop {
            let Some(payload) = self.next() else {
                tokio::select! {
                    () = &mut stopped => return,
                    () = self.wake.notified() => continue,
                }
            };
            let result = tokio::select! {
                () = &mut stopped => return,
                result = sender.send(payload.body.clone()) => result,
            };
            match result {
                Ok(()) => {
                    backoff = INITIAL_BACKOFF;
                    self.finish(|stats| {
                        stats.sent += 1;
                        stats.last_success = Some(SystemTime::now());
                        stats.last_error = None;
                    });
                }
                Err(SendError::Fatal { cause, message }) => {
                    warn!(
                        target = &*self.name,
                        cause, "the push target refused a payload, which is dropped: {message}"
                    );
                    self.finish(|stats| {
                        *stats.failures.entry(cause).or_default() += 1;
                        stats.dropped += 1;
                        stats.last_error = Some(message);
                    });
                }
                Err(SendError::Retryable { cause, message }) => {
                    debug!(
                        target = &*self.name,
                        cause, "push failed, retrying: {message}"
                    );
                    {
                        let mut state = crate::lock(&self.state);
                        *state.stats.failures.entry(cause).or_default() += 1;
                        state.stats.last_error = Some(message);
                        // Back at the front, to be sent first.
                        state.queued_bytes += payload.body.len() as u64;
                        state.queue.push_front(payload);
                    }
                    self.update_counts();
                    tokio::select! {
                        () = &mut stopped => return,
                        () = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(self.bounds.max_backoff);
                }
            }
        }
    }

    /// The oldest payload still young enough (the spool's before the
    /// queue's), taken out of the queue; too old ones are dropped.
    fn next(&self) -> Option<Payload> {
        let now = SystemTime::now();
        let too_old =
            |made: SystemTime| now.duration_since(made).unwrap_or_default() > self.bounds.max_age;
        let mut state = crate::lock(&self.state);
        let mut dropped = 0;
        let payload = loop {
            if let Some((path, _)) = state.spooled.pop_front() {
                let payload = std::fs::read(&path).ok().map(|body| Payload {
                    made: spool_time(&path).unwrap_or(now),
                    body,
                });
                let _ = std::fs::remove_file(&path);
                match payload {
                    Some(payload) if !too_old(payload.made) => break Some(payload),
                    _ => {
                        dropped += 1;
                        continue;
                    }
                }
            }
            let payload = state.queue.pop_front()?;
            state.queued_bytes -= payload.body.len() as u64;
            if too_old(payload.made) {
                dropped += 1;
                continue;
            }
            break Some(payload);
        };
        state.stats.dropped += dropped;
        drop(state);
        self.update_counts();
        payload
    }

    fn finish(&self, update: impl FnOnce(&mut DeliveryStats)) {
        update(&mut crate::lock(&self.state).stats);
        self.update_counts();
    }

    /// Writes `payload` to the spool (making room by dropping its oldest
    /// files), or drops it when there is no spool or no room.
    fn spill(&self, state: &mut State, payload: Payload) {
        let Some((dir, limit)) = &self.bounds.spool else {
            state.stats.dropped += 1;
            return;
        };
        let size = payload.body.len() as u64;
        if size > *limit {
            state.stats.dropped += 1;
            return;
        }
        while state.spooled.iter().map(|(_, bytes)| bytes).sum::<u64>() + size > *limit {
            let Some((oldest, _)) = state.spooled.pop_front() else {
                break;
            };
            let _ = std::fs::remove_file(oldest);
            state.stats.dropped += 1;
        }
        let millis = payload
            .made
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis();
        state.spool_sequence += 1;
        let path = dir.join(format!("{millis:015}-{:010}.pb", state.spool_sequence));
        let written =
            std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, &payload.body));
        match written {
            Ok(()) => state.spooled.push_back((path, size)),
            Err(err) => {
                warn!(
                    target = &*self.name,
                    "cannot spool a push payload to {}, which is dropped: {err}; check \
                     the state directory's space and permissions",
                    dir.display()
                );
                state.stats.dropped += 1;
            }
        }
    }

    fn update_counts(&self) {
        let mut state = crate::lock(&self.state);
        state.stats.queued = state.queue.len() as u64;
        state.stats.queued_bytes = state.queued_bytes;
        state.stats.spooled = state.spooled.len() as u64;
        state.stats.spooled_bytes = state.spooled.iter().map(|(_, bytes)| bytes).sum();
    }
}

/// The first wait after a failure.
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);

/// The spool's files, oldest first.
fn read_spool(dir: &std::path::Path) -> VecDeque<(PathBuf, u64)> {
    let mut files: Vec<(PathBuf, u64)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|entry| entry.path().extension().is_some_and(|ext| ext == "pb"))
        .filter_map(|entry| Some((entry.path(), entry.metadata().ok()?.len())))
        .collect();
    files.sort();
    files.into()
}

/// When a spooled payload was made, from its file name.
fn spool_time(path: &std::path::Path) -> Option<SystemTime> {
    let name = path.file_name()?.to_str()?;
    let millis: u64 = name.split('-').next()?.parse().ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_millis(millis))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Fails its first `failures` sends as `error`, then takes them all.
    struct Flaky {
        failures: usize,
        error: SendError,
        calls: AtomicUsize,
        taken: Mutex<Vec<Vec<u8>>>,
    }

    impl Sender for Flaky {
        fn send(
            &self,
            body: Vec<u8>,
        ) -> Pin<Box<dyn Future<Output = Result<(), SendError>> + Send>> {
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let result = if call < self.failures {
                Err(self.error.clone())
            } else {
                crate::lock(&self.taken).push(body);
                Ok(())
            };
            Box::pin(async move { result })
        }
    }

    fn bounds(queue_bytes: u64, spool: Option<(PathBuf, u64)>) -> Bounds {
        Bounds {
            queue_bytes,
            spool,
            max_age: Duration::from_secs(3600),
            max_backoff: Duration::from_millis(20),
        }
    }

    fn payload(byte: u8, len: usize) -> Payload {
        Payload {
            made: SystemTime::now(),
            body: vec![byte; len],
        }
    }

    async fn deliver(
        delivery: &Delivery,
        sender: Arc<Flaky>,
        until: impl Fn(&DeliveryStats) -> bool,
    ) {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(delivery.clone().run(sender, async {
            let _ = stopped.await;
        }));
        for _ in 0..500 {
            if until(&delivery.stats()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let _ = stop.send(());
        task.await.unwrap();
    }

    #[tokio::test]
    async fn retryable_failures_are_retried_in_order_until_sent() {
        let delivery = Delivery::new("t", bounds(1 << 20, None));
        let sender = Arc::new(Flaky {
            failures: 3,
            error: SendError::Retryable {
                cause: "http_503".into(),
                message: "unavailable".into(),
            },
            calls: AtomicUsize::new(0),
            taken: Mutex::default(),
        });
        delivery.offer(payload(1, 10));
        delivery.offer(payload(2, 10));
        deliver(&delivery, sender.clone(), |stats| stats.sent == 2).await;
        let stats = delivery.stats();
        assert_eq!(stats.sent, 2);
        assert_eq!(stats.failures["http_503"], 3);
        assert_eq!(stats.dropped, 0);
        assert_eq!(*crate::lock(&sender.taken), [vec![1; 10], vec![2; 10]]);
    }

    #[tokio::test]
    async fn fatal_failures_drop_the_payload_and_go_on() {
        let delivery = Delivery::new("t", bounds(1 << 20, None));
        let sender = Arc::new(Flaky {
            failures: 1,
            error: SendError::Fatal {
                cause: "http_400".into(),
                message: "bad".into(),
            },
            calls: AtomicUsize::new(0),
            taken: Mutex::default(),
        });
        delivery.offer(payload(1, 10));
        delivery.offer(payload(2, 10));
        deliver(&delivery, sender.clone(), |stats| stats.sent == 1).await;
        let stats = delivery.stats();
        assert_eq!((stats.sent, stats.dropped), (1, 1));
        assert_eq!(*crate::lock(&sender.taken), [vec![2; 10]]);
    }

    #[test]
    fn a_full_queue_spills_its_oldest_to_the_spool_then_drops() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool");
        let delivery = Delivery::new("t", bounds(25, Some((spool.clone(), 25))));
        for byte in 0..5 {
            delivery.offer(payload(byte, 10));
        }
        let stats = delivery.stats();
        // 2 queued (20 bytes), 2 spooled (20 bytes), the oldest dropped.
        assert_eq!(
            (stats.queued, stats.spooled, stats.dropped),
            (2, 2, 1),
            "{stats:?}"
        );
        assert_eq!(std::fs::read_dir(&spool).unwrap().count(), 2);
        // A new run finds what was spooled.
        let again = Delivery::new("t", bounds(25, Some((spool, 25))));
        assert_eq!(again.stats().spooled, 2);
        // Without a spool, they are dropped.
        let unspooled = Delivery::new("t", bounds(25, None));
        for byte in 0..5 {
            unspooled.offer(payload(byte, 10));
        }
        assert_eq!(unspooled.stats().dropped, 3);
    }

    #[test]
    fn payloads_older_than_the_age_limit_are_dropped() {
        let delivery = Delivery::new(
            "t",
            Bounds {
                max_age: Duration::from_secs(60),
                ..bounds(1 << 20, None)
            },
        );
        delivery.offer(Payload {
            made: SystemTime::now() - Duration::from_secs(120),
            body: vec![1],
        });
        delivery.offer(payload(2, 1));
        assert_eq!(delivery.next().map(|payload| payload.body), Some(vec![2]));
        assert_eq!(delivery.stats().dropped, 1);
    }
}
