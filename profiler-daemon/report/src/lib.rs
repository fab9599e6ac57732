//! profilerd's pure code: the profile every report is made from, and the
//! reports themselves.
//!
//! - [`profile`]: the self-contained [`profile::Profile`] (threads, stacks,
//!   locations, samples of a window) and the options that shape a report;
//!   the domain values every layer of the daemon shares.
//! - [`report`]: pure functions from a profile to the bytes of a format.
//! - [`pprof`]: the pprof profile format's messages, generated from
//!   `perftools/profile.proto` (see build.rs).
//!
//! A crate of its own so that the compiler keeps the promise: nothing here
//! depends on the daemon (its store, symbolizer, kernel side, runtime or
//! API), and it reads no files, clocks or sockets: what it returns is a
//! function of the values it is given (the reports' threads never change
//! their bytes).

pub mod profile;
pub mod report;

/// The pprof profile format (`perftools.profiles`): messages only.
pub mod pprof {
    include!(concat!(env!("OUT_DIR"), "/perftools.profiles.rs"));
}
