//! The kernel side, as the daemon sees it: loading the eBPF programs and
//! checking that the kernel can run them (`sampler`, with the type layout
//! they read from BTF), the maps they fill and how they are drained without
//! losing or double-counting a sample (`drain`, `batch`), and the maps the
//! daemon writes (`targets`, `families`); `cgroups` reads the cgroup
//! hierarchy the programs name cgroups by.
//!
//! This layer owns every BPF object; nothing above it touches one. It must
//! not symbolize, store or report.

mod batch;
pub mod btf;
pub mod cgroups;
pub mod drain;
pub mod families;
pub mod sampler;
pub mod targets;
