//! What wakes the drain thread (and, without stack copies, the process
//! watcher's own thread), and nothing else: a request (a window's cut, the
//! pipeline's end) through its queue and a doorbell rung beside it, a
//! ring buffer whose writer wakes its reader (the kernel's announcement of
//! a new process; a ring of stack copies or off-CPU intervals a quarter
//! full, as the eBPF programs' `ring_wake` decides), or its own schedule. All in one epoll set, so the thread sleeps through
//! an idle second: a wake-up costs this kind of virtual machine tens of
//! microseconds, more than an idle daemon's work.
//!
//! Owns the epoll set and the doorbell; it must not read the rings (their
//! owners do, at the passes the drain thread runs).

use std::{
    io,
    os::fd::{BorrowedFd, OwnedFd},
    sync::{Arc, mpsc},
    time::{Duration, Instant},
};

use rustix::event::{EventfdFlags, epoll, eventfd};

/// The doorbell's key in the epoll set; a ring's is its [`Ring`] kind's.
const DOORBELL: u64 = 0;

/// What a watched ring buffer's wake-up says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub(super) enum Ring {
    /// A quarter of the ring waits to be read: read it now.
    Filling = 1,
    /// A new process was announced (the first announcement since the
    /// last read): record it soon.
    Announcements = 2,
}

/// Sends messages to the drain thread and wakes it.
pub(super) struct WakeSender<T> {
    queue: mpsc::Sender<T>,
    doorbell: Arc<OwnedFd>,
}

impl<T> Clone for WakeSender<T> {
    fn clone(&self) -> Self {
        Self {
            queue: self.queue.clone(),
            doorbell: self.doorbell.clone(),
        }
    }
}

impl<T> WakeSender<T> {
    /// Queues `message` and rings the doorbell; fails when the drain
    /// thread is gone.
    pub fn send(&self, message: T) -> Result<(), mpsc::SendError<T>> {
        self.queue.send(message)?;
        // An eventfd's write fails only when its count would overflow,
        // which needs 2^64 rings unread: it is rung already.
        let _ = rustix::io::write(&*self.doorbell, &1_u64.to_ne_bytes());
        Ok(())
    }
}

/// The drain thread's side: its queue and what it sleeps on.
pub(super) struct Wakeups<T> {
    queue: mpsc::Receiver<T>,
    doorbell: Arc<OwnedFd>,
    epoll: OwnedFd,
}

/// What ended a wait.
#[derive(Debug)]
pub(super) struct Woken<T> {
    /// The messages queued, in order.
    pub messages: Vec<T>,
    /// The kinds of the watched ring buffers whose writers woke their
    /// reader.
    pub rings: Vec<Ring>,
    /// Every sender is gone (the pipeline was dropped).
    pub disconnected: bool,
}

/// A queue to the drain thread with its doorbell, and the thread's side.
pub(super) fn wakeups<T>() -> io::Result<(WakeSender<T>, Wakeups<T>)> {
    let (queue, received) = mpsc::channel();
    let doorbell = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
    let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
    epoll::add(
        &epoll,
        &*doorbell,
        epoll::EventData::new_u64(DOORBELL),
        epoll::EventFlags::IN,
    )?;
    let sender = WakeSender {
        queue,
        doorbell: doorbell.clone(),
    };
    let wakeups = Wakeups {
        queue: received,
        doorbell,
        epoll,
    };
    Ok((sender, wakeups))
}

impl<T> Wakeups<T> {
    /// Also wakes when the writer of ring buffer `ring` wakes its reader
    /// (edge-triggered: at the writer's wake-up, not while records wait,
    /// so that records left for the next pass wake nobody). The epoll set
    /// holds the ring's file while the ring is open.
    pub fn watch(&mut self, ring: BorrowedFd<'_>, kind: Ring) -> io::Result<()> {
        epoll::add(
            &self.epoll,
            ring,
            epoll::EventData::new_u64(kind as u64),
            epoll::EventFlags::IN | epoll::EventFlags::ET,
        )?;
        Ok(())
    }

    /// Sleeps until `deadline`, a message or a watched ring's wake-up,
    /// whichever comes first.
    pub fn wait_until(&self, deadline: Instant) -> Woken<T> {
        let timeout = deadline.saturating_duration_since(Instant::now());
        let rings = match self.sleep(timeout) {
            Ok(rings) => rings,
            Err(err) => {
                // Cannot happen with a valid set; sleep on the queue
                // alone rather than spin.
                tracing::warn!("the drain thread cannot wait on its epoll set: {err}");
                return match self.queue.recv_timeout(timeout) {
                    Ok(message) => self.take(vec![message], Vec::new()),
                    Err(mpsc::RecvTimeoutError::Timeout) => self.take(Vec::new(), Vec::new()),
                    Err(mpsc::RecvTimeoutError::Disconnected) => Woken {
                        messages: Vec::new(),
                        rings: Vec::new(),
                        disconnected: true,
                    },
                };
            }
        };
        // Clear the doorbell before reading the queue: a message queued
        // after this read rings it again.
        let _ = rustix::io::read(&*self.doorbell, &mut [0_u8; 8]);
        self.take(Vec::new(), rings)
    }

    /// The kinds of the rings whose wake-ups ended the sleep (none when
    /// the doorbell or the time did).
    fn sleep(&self, timeout: Duration) -> io::Result<Vec<Ring>> {
        let timeout = rustix::time::Timespec::try_from(timeout).unwrap_or(rustix::time::Timespec {
            tv_sec: i64::MAX,
            tv_nsec: 0,
        });
        let mut events = Vec::with_capacity(8);
        match epoll::wait(
            &self.epoll,
            rustix::buffer::spare_capacity(&mut events),
            Some(&timeout),
        ) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(err) => return Err(err.into()),
        }
        let mut rings: Vec<Ring> = events
            .iter()
            .filter_map(|event| match event.data.u64() {
                key if key == Ring::Filling as u64 => Some(Ring::Filling),
                key if key == Ring::Announcements as u64 => Some(Ring::Announcements),
                _ => None,
            })
            .collect();
        rings.dedup();
        Ok(rings)
    }

    fn take(&self, mut messages: Vec<T>, rings: Vec<Ring>) -> Woken<T> {
        let mut disconnected = false;
        loop {
            match self.queue.try_recv() {
                Ok(message) => messages.push(message),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    disconnected = true;
                    break;
                }
            }
        }
        Woken {
            messages,
            rings,
            disconnected,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_message_wakes_the_sleeper_at_once_and_is_handed_over() {
        let (sender, wakeups) = wakeups::<u32>().expect("makes the epoll set");
        // Queued before the wait: handed over together, at once.
        sender.send(8).expect("queues");
        sender.send(9).expect("queues");
        let woken = wakeups.wait_until(Instant::now() + Duration::from_secs(30));
        assert_eq!(woken.messages, [8, 9]);
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            sender.send(7).expect("queues");
            // Kept alive until the sleeper has woken.
            std::thread::sleep(Duration::from_millis(200));
        });
        let started = Instant::now();
        let woken = wakeups.wait_until(started + Duration::from_secs(30));
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "woken by the doorbell"
        );
        assert_eq!(woken.messages, [7]);
        assert!(woken.rings.is_empty() && !woken.disconnected);
        thread.join().expect("sender ends");
        // The doorbell was cleared: the next wait sleeps to its deadline,
        // then says every sender is gone.
        let started = Instant::now();
        let woken = wakeups.wait_until(started + Duration::from_millis(100));
        assert!(started.elapsed() >= Duration::from_millis(90));
        assert!(woken.messages.is_empty() && woken.disconnected);
    }

    #[test]
    fn a_watched_file_s_wake_up_wakes_the_sleeper_once() {
        let (_sender, mut wakeups) = wakeups::<u32>().expect("makes the epoll set");
        // An eventfd stands for a ring buffer: written, it wakes its reader.
        let ring = eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd");
        wakeups
            .watch(ring.as_fd(), Ring::Announcements)
            .expect("watches");
        rustix::io::write(&ring, &1_u64.to_ne_bytes()).expect("writes");
        let woken = wakeups.wait_until(Instant::now() + Duration::from_secs(30));
        assert_eq!(woken.rings, [Ring::Announcements]);
        assert!(woken.messages.is_empty());
        // Not read (as a pass leaves records for the next one), it wakes
        // nobody again: edge-triggered.
        let started = Instant::now();
        let woken = wakeups.wait_until(started + Duration::from_millis(100));
        assert!(woken.rings.is_empty() && started.elapsed() >= Duration::from_millis(90));
    }
}
