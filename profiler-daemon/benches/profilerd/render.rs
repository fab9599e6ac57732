//! Question 5b: how long the daemon takes to turn a profile it holds into
//! each report, in process (no kernel, no gRPC): a profile shaped like the
//! scale run's window (processes walking random paths of depth 8 drawn from
//! a skewed pool, some samples in the kernel), built in memory, rendered in
//! every format, whole-machine and a section per process. It isolates the
//! rendering that question 5's latencies include.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use anyhow::Result;
use profilerd::{
    profile::{
        Format, Frame, GroupBy, Location, LocationKind, Profile, ProfileMode, ReportOptions,
        Sample, ThreadInfo, ThreadState,
    },
    report,
};

use crate::{
    Plan,
    measure::{Spread, millis},
    report::Table,
};

/// Functions each level of a path chooses from, and the levels.
const FANOUT: u64 = 32;
const DEPTH: usize = 8;
/// Distinct addresses sampled in each leaf function.
const LEAF_ADDRESSES: u64 = 16;
const KERNEL_LOCATIONS: u64 = 400;

pub fn run(plan: &Plan) -> Result<Table> {
    let (processes, paths_each) = if plan.quick { (100, 350) } else { (400, 350) };
    let profile = storm_profile(processes, paths_each, 10_000);
    println!(
        "\n== render: {} samples, {} threads, {} locations, {} samples in all",
        profile.samples.len(),
        profile.threads.len(),
        profile.locations.len(),
        profile.total_samples()
    );
    let mut table = Table::new(
        "5b. Rendering a report in process (ms, median (min–max) of 5; MB of output)",
        &[
            "format",
            "whole machine",
            "MB",
            "a section per process",
            "MB",
        ],
    );
    let formats = [
        ("tree", Format::Tree),
        ("flat", Format::Flat),
        ("folded", Format::Folded),
        ("pprof", Format::Pprof),
        ("flamegraph", Format::Flamegraph),
        ("speedscope", Format::Speedscope),
    ];
    for (name, format) in formats {
        let mut row = vec![name.to_owned()];
        for groupby in [GroupBy::None, GroupBy::Process] {
            let options = ReportOptions {
                format,
                groupby,
                ..ReportOptions::default()
            };
            let mut times = Vec::new();
            let mut bytes = 0;
            for _ in 0..5 {
                let started = Instant::now();
                let rendered = report::render(&profile, &options);
                times.push(millis(started.elapsed()));
                bytes = rendered.map_or(0, |out| out.len());
            }
            row.push(Spread::of(&times).show(0));
            row.push(format!("{:.1}", bytes as f64 / 1e6));
        }
        println!("{row:?}");
        table.row(row);
    }
    table.note(format!(
        "A profile built in memory like the scale run's window: {processes} processes of one \
         thread, each with {paths_each} distinct stacks (paths of depth {DEPTH} below `main`, \
         {FANOUT} functions a level, drawn from a skewed pool of 10000), a third with kernel \
         frames: {} (thread, stack) pairs. Per process, folded stacks, flame graphs and \
         speedscope start each stack with its process; pprof makes a sample per process and \
         stack (`groupby process`), against one per stack for the whole machine (`groupby \
         none`). Target (issue 15): every report of a 600 s scale window within 100 ms, gRPC \
         included (table 5).",
        profile.samples.len()
    ));
    Ok(table)
}

/// `processes` processes of one thread, each holding `paths_each` distinct
/// paths drawn from a pool of `pool`, the first paths far more often.
fn storm_profile(processes: u32, paths_each: usize, pool: u64) -> Profile {
    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let mut builder = StormBuilder::default();
    let mut profile = Profile::empty(
        start,
        start + Duration::from_secs(600),
        999,
        1_001_001,
        ProfileMode::Cpu,
    );
    let mut random = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        random
    };
    for process in 0..processes {
        let pid = 10_000 + process;
        profile.threads.push(ThreadInfo {
            pid,
            tid: pid,
            thread_name: "stack_storm".into(),
            process_name: "stack_storm".into(),
            uid: 0,
            gid: 0,
            protected: false,
            cgroup: "/system.slice/storm.service".into(),
        });
        let mut seen = std::collections::HashSet::new();
        while seen.len() < paths_each {
            let uniform = (next() % 1_000_000) as f64 / 1e6;
            let path = (pool as f64 * uniform * uniform * uniform) as u64;
            let leaf = next() % LEAF_ADDRESSES;
            let kernel = next() % 3 == 0;
            if !seen.insert((path, leaf, kernel)) {
                continue;
            }
            let stack = builder.stack(&mut profile, path, leaf, kernel.then(&mut next));
            profile.samples.push(Sample {
                thread: process,
                stack,
                count: 1 + (pool - path.min(pool - 1)) / 400,
                weight: 0,
                state: ThreadState::Cpu,
            });
        }
    }
    for sample in &mut profile.samples {
        sample.weight = sample.count * profile.period_ns;
    }
    profile
}

#[derive(Default)]
struct StormBuilder {
    locations: HashMap<(u8, u64), u32>,
    stacks: HashMap<Vec<u32>, u32>,
}

impl StormBuilder {
    /// The stack of `path` (root first): the C program's first frames,
    /// the path's functions each at its call site, the leaf at one of its
    /// addresses, and kernel frames when `kernel` gives a seed for them.
    fn stack(&mut self, profile: &mut Profile, path: u64, leaf: u64, kernel: Option<u64>) -> u32 {
        let mut seed = (path + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut frames = Vec::with_capacity(DEPTH + 12);
        for (index, root) in [
            "_start",
            "__libc_start_main_impl",
            "__libc_start_call_main",
            "main",
        ]
        .iter()
        .enumerate()
        {
            frames.push(self.location(profile, 0, index as u64, root, ""));
        }
        let mut caller = u64::MAX;
        for level in 0..DEPTH {
            let function = seed % FANOUT + level as u64 * FANOUT;
            seed /= FANOUT;
            let name = format!("path_{level}_{}", function % FANOUT);
            let site = if caller == u64::MAX {
                function
            } else {
                caller * 1024 + function
            };
            frames.push(self.location(profile, 1, site, &name, "paths.h"));
            caller = function;
        }
        let name = format!("leaf_{}", caller % FANOUT);
        frames.push(self.location(profile, 2, caller * 64 + leaf, &name, "paths.h"));
        if let Some(mut seed) = kernel {
            for depth in 0..6 {
                let address = seed % KERNEL_LOCATIONS;
                seed /= KERNEL_LOCATIONS;
                let name = format!("kernel_function_{depth}_{address}");
                frames.push(self.location(profile, 3, address, &name, ""));
            }
        }
        if let Some(&stack) = self.stacks.get(&frames) {
            return stack;
        }
        let stack = profile.stacks.push(frames.iter().copied());
        self.stacks.insert(frames, stack);
        stack
    }

    fn location(
        &mut self,
        profile: &mut Profile,
        kind: u8,
        key: u64,
        name: &str,
        file: &str,
    ) -> u32 {
        if let Some(&id) = self.locations.get(&(kind, key)) {
            return id;
        }
        let kernel = kind == 3;
        let location = Location {
            kind: if kernel {
                LocationKind::Kernel
            } else {
                LocationKind::User
            },
            module: if kernel {
                "[kernel]".into()
            } else {
                "/usr/bin/stack_storm".into()
            },
            address: 0x1000 + key * 16 + u64::from(kind) * 0x100_0000,
            frames: vec![Frame {
                function: Arc::from(name),
                file: (!file.is_empty()).then(|| Arc::from(file)),
                line: (key % 97) as u32 + 1,
                inlined: false,
            }]
            .into(),
        };
        profile.locations.push(location);
        let id = profile.locations.len() as u32 - 1;
        self.locations.insert((kind, key), id);
        id
    }
}
