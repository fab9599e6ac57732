//! The kernel's notices of peek signals: the ring buffer the signal
//! program writes one `PeekSignal` into per peek signal sent, read as it
//! fills.
//!
//! Owns the ring; it must not decide what a notice starts (the peeker
//! does).

use std::io;

use aya::maps::{MapData, RingBuf};
use profiler_common::PeekSignal;
use tokio::io::{Interest, unix::AsyncFd};

/// The ring of peek signal notices, taken from the loaded programs.
pub struct PeekSignals(RingBuf<MapData>);

impl PeekSignals {
    pub(crate) fn new(ring: RingBuf<MapData>) -> Self {
        Self(ring)
    }

    /// Gives every notice to `on_signal` as it arrives, until the ring
    /// cannot be waited on any more: returns why.
    pub async fn follow(self, mut on_signal: impl FnMut(&PeekSignal)) -> io::Error {
        // SAFETY: the ring buffer owns its file descriptor and keeps it
        // open, unchanged, until it is dropped, which only the AsyncFd can do.
        let registered = unsafe { AsyncFd::register_with_interest(self.0, Interest::READABLE) };
        let mut ring = match registered {
            Ok(ring) => ring,
            Err(err) => return err.into(),
        };
        loop {
            let mut ready = match ring.readable_mut().await {
                Ok(ready) => ready,
                Err(err) => return err,
            };
            let notices = ready.get_inner_mut();
            while let Some(item) = notices.next() {
                if item.len() >= size_of::<PeekSignal>() {
                    // SAFETY: the kernel wrote a PeekSignal (repr(C),
                    // integers only) into this slot; read_unaligned copes
                    // with its alignment.
                    let signal = unsafe { item.as_ptr().cast::<PeekSignal>().read_unaligned() };
                    on_signal(&signal);
                }
            }
            ready.clear_ready();
        }
    }
}
