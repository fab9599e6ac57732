//! The daemon's memory: one budget divided among the parts that hold
//! memory (`budget`), what the heap really holds (`counting`, the global
//! allocator's counts), what the kernel says the process takes
//! (`process`) and what its cgroup allows (`cgroup`), and freed memory
//! given back to the system (`trim`).
//!
//! Owns those measures and the division; it must not hold or evict
//! anything: each part keeps within its share itself and says what it
//! holds ([`PartUsage`]). A leaf: it imports no other layer.

pub mod budget;
pub mod cgroup;
pub mod counting;
pub mod process;
pub mod trim;

pub use self::{
    budget::{MemoryBudget, Part},
    process::ProcessFigures,
};

/// What one part holds against its share, and what it let go of to stay
/// within it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartUsage {
    pub part: Part,
    pub held: u64,
    pub share: u64,
    /// What it let go of (evicted, dropped or refused) for memory, counted
    /// in `evicted_unit`s since start.
    pub evicted: u64,
    pub evicted_unit: &'static str,
}

/// The memory of the whole daemon at one moment: the budget, each part
/// against its share, the heap the allocator counts and what the kernel
/// counts.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryUsage {
    pub budget: u64,
    pub program: u64,
    pub kernel_buffers: u64,
    pub parts: Vec<PartUsage>,
    /// Bytes allocated on the heap and not freed (all parts, and the rest).
    pub heap: u64,
    pub process: ProcessFigures,
}

impl MemoryUsage {
    /// What the parts hold together.
    pub fn held(&self) -> u64 {
        self.parts.iter().map(|part| part.held).sum()
    }
}
