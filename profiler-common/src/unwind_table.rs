//! Design 2 of user-stack unwinding, kept as a measured prototype (see
//! BENCHMARKS.md): `.eh_frame` compiled into rows the eBPF program
//! `sample_unwind_tables` walks. Only with the `unwind-tables-prototype`
//! feature, which only the benchmark and the prototype's own test turn on:
//! the daemon never uses these types.

/// Names of the prototype's program and the maps the daemon looks up in
/// its object (`unwind_tables_prototype`, apart from the daemon's).
pub mod names {
    object_names! {
        pub const PROGRAM_SAMPLE_UNWIND_TABLES: &str = "sample_unwind_tables";
        pub const UNWIND_PROCESSES: &str = "UNWIND_PROCESSES";
        pub const UNWIND_ROWS: &str = "UNWIND_ROWS";
        pub const UNWIND_STACKS: &str = "UNWIND_STACKS";
        pub const UNWIND_COUNTS: &str = "UNWIND_COUNTS";
    }
}

/// Mappings of one process the prototype can describe.
pub const MAX_MAPPINGS: usize = 16;
/// Frames the prototype walks per sample.
pub const MAX_FRAMES: usize = 32;
/// Steps of the binary search for a row (2^20 rows per binary).
pub const SEARCH_STEPS: usize = 20;

/// How a row finds the canonical frame address (CFA).
pub mod cfa {
    /// CFA = sp + offset.
    pub const SP: u8 = 0;
    /// CFA = bp + offset.
    pub const BP: u8 = 1;
    /// A PLT stub: CFA = sp + 8, or + 16 past the stub's push.
    pub const PLT: u8 = 2;
    /// No unwind information covers the address: the walk stops short.
    pub const NO_INFO: u8 = 3;
    /// The outermost frame (return address undefined): the stack is whole.
    pub const END: u8 = 4;
    /// Only as a walk's outcome: a return address or bp could not be read.
    pub const BAD_FRAME: u8 = 5;
    /// Only as a walk's outcome: [`super::MAX_FRAMES`] frames walked.
    pub const TOO_DEEP: u8 = 6;
}

/// One row: from `pc` (a file address) up to the next row's, the
/// return address is at CFA - 8 and the caller's bp at CFA +
/// `bp_offset` (0: bp unchanged).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Row {
    pub pc: u64,
    pub cfa_offset: i32,
    pub bp_offset: i16,
    pub cfa: u8,
    pub _pad: u8,
}

/// One executable mapping and its rows in the shared rows array.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Run-time address minus file address.
    pub bias: u64,
    pub first_row: u32,
    pub rows: u32,
}

/// A process's executable mappings, sorted by nothing in particular.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct Process {
    pub mappings: [Mapping; MAX_MAPPINGS],
    pub count: u32,
    pub _pad: u32,
}

/// One aggregated sample: counts are kept per (thread, user stack,
/// kernel stack), as the production sampler does.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub pid: u32,
    pub tid: u32,
    pub user_stack: u64,
    pub kernel_stack: u64,
    /// The [`cfa`] rule the walk ended on (END: whole).
    pub ended: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)], Copy, made only of integers and
    // integer arrays, and have no padding, so every bit pattern is valid.
    unsafe impl aya::Pod for super::Row {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Process {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Key {}
}
