//! The peek signal: following the kernel's notices of it, whether a process
//! without a handler is kept from being killed by it, and its name.
//!
//! Owns those; it must not run peeks (the peeker does, `on_signal`).

use aya::maps::{MapData, RingBuf};
use profiler_common::PeekSignal;
use tracing::{info, warn};

use super::Peeker;
use crate::kernel::programs::OptionalProgramError;

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
pub async fn follow_signals(peeker: Peeker, signals: RingBuf<MapData>) {
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: the ring buffer owns its file descriptor and keeps it open,
    // unchanged, until it is dropped, which only the AsyncFd can do.
    let registered = unsafe { tokio::io::unix::AsyncFd::register_with_interest(signals, interest) };
    let mut signals = match registered {
        Ok(signals) => signals,
        Err(err) => {
            warn!("cannot wait for peek signals: {err}; peeks by signal are off");
            return;
        }
    };
    loop {
        let mut ready = match signals.readable_mut().await {
            Ok(ready) => ready,
            Err(err) => {
                warn!("cannot wait for peek signals: {err}; peeks by signal are off");
                return;
            }
        };
        let ring = ready.get_inner_mut();
        while let Some(item) = ring.next() {
            if item.len() >= size_of::<PeekSignal>() {
                // SAFETY: the kernel wrote a PeekSignal (repr(C), integers
                // only) into this slot; read_unaligned copes with alignment.
                let signal = unsafe { item.as_ptr().cast::<PeekSignal>().read_unaligned() };
                peeker.on_signal(&signal);
            }
        }
        ready.clear_ready();
    }
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

pub(super) fn comm_text(comm: &[u8]) -> String {
    let end = comm
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}
