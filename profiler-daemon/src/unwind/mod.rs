//! Unwinding user stacks in the daemon: from a sample's registers and a
//! copy of the top of its user stack, with each binary's own unwind
//! information (`.eh_frame` through `.eh_frame_hdr`, or `.debug_frame`),
//! by the `framehop` crate. Frame pointers are only followed through code
//! that no binary covers (JIT-compiled code keeps them); a stack that runs
//! into a binary without unwind information stops there and says so
//! ([`UnwindStop`]).
//!
//! `sections` reads a binary's unwind sections; `unwinder` holds a
//! process's unwinder built from its code mappings and walks one copy;
//! `rule_caches` lends framehop's caches of unwind rules to unwinders;
//! with the `unwind-tables-prototype` feature, `table_rows` compiles
//! `.eh_frame` into the rows design 2's prototype walks in the kernel.
//! The process table (`symbols::processes`) decides which mappings a
//! process has and keeps its unwinder; the pipeline's unwinding stage
//! (`pipeline/unwinding.rs`) reads the copies and has them unwound.
//!
//! This layer owns the unwind sections read and the unwinders; it must not
//! symbolize, read kernel maps or open a process's files. It may use
//! `kernel` and `profile`; `symbols` and `pipeline` use it, never the
//! other way round (nothing here imports `symbols`, `pipeline`,
//! `service` or `store`).

mod rule_caches;
mod sections;
#[cfg(feature = "unwind-tables-prototype")]
pub mod table_rows;
mod unwinder;

pub use self::{
    rule_caches::{RULE_CACHES, UnwindCache},
    sections::{SectionBytes, UnwindSections, own_vdso_image},
    unwinder::{
        CodeMapping, LazySections, ProcessUnwinder, SIGNAL_FRAME, SectionsSource, UnwindStats,
        UnwoundStack, UserRegisters,
    },
};
pub use crate::profile::UnwindStop;
