//! The pstats report: the Python functions of a profile as Python's own
//! profilers write them (`marshal`ed `pstats` data), for `python -m pstats`,
//! `pstats.Stats` and snakeviz.
//!
//! Only Python frames ([`LocationKind::Python`]) count: a sample's Python
//! frames, root first, are what `cProfile` would have seen on its stack;
//! samples without any are left out, native frames between Python ones are
//! skipped (a C builtin's time is its Python caller's, as Python's own
//! sampling profiler counts it); a profile with none is refused. Each function is keyed
//! `(file, line its definition starts at, qualified name)`, as `cProfile`
//! keys it, and holds, in pstats' order:
//! - the samples whose stacks hold it, as both call counts (`ncalls` counts
//!   samples, not calls: a sampling profiler sees no calls);
//! - its own time (`tottime`): the time of the samples it is the innermost
//!   Python frame of;
//! - its cumulative time (`cumtime`): the time of the samples that hold it,
//!   each once however deep it recurses;
//! - its callers: for each Python function that called it, the samples,
//!   own time and cumulative time of that edge.
//!
//! `groupby` does not apply (a function is its file's, whoever ran it), nor
//! the options that shape trees and stacks.
//!
//! Times are the samples' in seconds: CPU time in a CPU profile, time
//! waited in an off-CPU one, both in a wall-clock one. An allocation profile
//! has no time to give and is refused. Output depends only on the profile
//! (functions in key order).
//!
//! It must not read anything but the profile, nor write text.

use rustc_hash::FxHashMap;

use super::ReportError;
use crate::profile::{LocationKind, Profile};

/// A function as pstats keys it: file, first line, name.
type FunctionKey<'a> = (&'a str, u32, &'a str);

/// What a function or an edge between two adds up.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Totals {
    samples: u64,
    /// Nanoseconds of the samples it is innermost in.
    own_ns: u64,
    /// Nanoseconds of the samples that hold it.
    cumulative_ns: u64,
}

impl Totals {
    fn add(&mut self, samples: u64, own_ns: u64, cumulative_ns: u64) {
        self.samples = self.samples.saturating_add(samples);
        self.own_ns = self.own_ns.saturating_add(own_ns);
        self.cumulative_ns = self.cumulative_ns.saturating_add(cumulative_ns);
    }
}

pub(super) fn render(profile: &Profile) -> Result<Vec<u8>, ReportError> {
    if profile.mode.is_memory() {
        return Err(ReportError::Unsupported(
            "pstats holds times, and an allocation profile has none: ask for pprof \
             (Go's heap profile values) or a text format instead"
                .to_owned(),
        ));
    }
    let stats = Stats::of(profile)?;
    if stats.functions.iter().all(|totals| totals.samples == 0) {
        // pstats reads no empty profile.
        return Err(ReportError::Unsupported(
            "no sample of the profile holds a Python frame, and pstats holds Python \
             functions only: select a CPython process (profilerctl status lists the \
             interpreters found) or ask for another format"
                .to_owned(),
        ));
    }
    Ok(stats.marshal())
}

/// The functions of a profile and their callers, by function id.
#[derive(Default)]
struct Stats<'a> {
    keys: Vec<FunctionKey<'a>>,
    functions: Vec<Totals>,
    /// By (callee, caller).
    edges: FxHashMap<(u32, u32), Totals>,
}

impl<'a> Stats<'a> {
    fn of(profile: &'a Profile) -> Result<Self, ReportError> {
        let mut stats = Stats::default();
        let mut ids: FxHashMap<FunctionKey<'a>, u32> = FxHashMap::default();
        // The function id of each Python location.
        let function_of: Vec<Option<u32>> = profile
            .locations
            .iter()
            .map(|location| {
                if location.kind != LocationKind::Python {
                    return None;
                }
                let frame = location.frames.first()?;
                let file = frame.file.as_deref().unwrap_or(&location.module);
                let first_line = u32::try_from(location.address).unwrap_or(0);
                let key = (file, first_line, &*frame.function);
                let next = ids.len() as u32;
                let id = *ids.entry(key).or_insert(next);
                if id == next {
                    stats.keys.push(key);
                }
                Some(id)
            })
            .collect();
        stats.functions = vec![Totals::default(); stats.keys.len()];
        // The last sample each function and edge was counted for, so that
        // a recursion counts a sample once.
        let mut counted_in = vec![usize::MAX; stats.keys.len()];
        let mut edges_counted: Vec<(u32, u32)> = Vec::new();
        let mut python: Vec<u32> = Vec::new();
        for (index, sample) in profile.samples.iter().enumerate() {
            if sample.count == 0 {
                continue;
            }
            let stack = profile
                .stacks
                .get(sample.stack)
                .ok_or_else(|| ReportError::InvalidProfile(format!("no stack {}", sample.stack)))?;
            python.clear();
            for &location in stack {
                let function = function_of.get(location as usize).ok_or_else(|| {
                    ReportError::InvalidProfile(format!("no location {location}"))
                })?;
                python.extend(*function);
            }
            let Some(&innermost) = python.last() else {
                continue;
            };
            let (count, weight) = (sample.count, sample.weight);
            for &function in &python {
                if counted_in[function as usize] != index {
                    counted_in[function as usize] = index;
                    stats.functions[function as usize].add(count, 0, weight);
                }
            }
            stats.functions[innermost as usize].add(0, weight, 0);
            edges_counted.clear();
            for (place, pair) in python.windows(2).enumerate() {
                let edge = (pair[1], pair[0]);
                let innermost_edge = place + 2 == python.len();
                let totals = stats.edges.entry(edge).or_default();
                if !edges_counted.contains(&edge) {
                    edges_counted.push(edge);
                    totals.add(count, 0, weight);
                }
                if innermost_edge {
                    totals.add(0, weight, 0);
                }
            }
        }
        Ok(stats)
    }

    /// The `marshal` bytes of the `pstats` dictionary:
    /// `{(file, line, name): (cc, nc, tt, ct, {caller: (nc, cc, tt, ct)})}`.
    fn marshal(&self) -> Vec<u8> {
        let mut order: Vec<u32> = (0..self.keys.len() as u32).collect();
        order.sort_unstable_by_key(|&id| self.keys[id as usize]);
        let mut callers_of: Vec<Vec<(u32, Totals)>> = vec![Vec::new(); self.keys.len()];
        for (&(callee, caller), &totals) in &self.edges {
            callers_of[callee as usize].push((caller, totals));
        }
        let mut out = Marshal::default();
        out.dict_start();
        for &id in &order {
            let totals = self.functions[id as usize];
            if totals.samples == 0 {
                continue;
            }
            out.key(self.keys[id as usize]);
            out.tuple(5);
            out.totals(totals);
            let callers = &mut callers_of[id as usize];
            callers.sort_unstable_by_key(|&(caller, _)| self.keys[caller as usize]);
            out.dict_start();
            for &(caller, edge) in callers.iter() {
                out.key(self.keys[caller as usize]);
                out.tuple(4);
                out.totals(edge);
            }
            out.dict_end();
        }
        out.dict_end();
        out.bytes
    }
}

/// Python's `marshal` format, the few types pstats needs (as every version
/// since 3.4 reads them).
#[derive(Default)]
struct Marshal {
    bytes: Vec<u8>,
}

impl Marshal {
    fn dict_start(&mut self) {
        self.bytes.push(b'{');
    }

    /// The end of a dictionary: a null in place of the next key.
    fn dict_end(&mut self) {
        self.bytes.push(b'0');
    }

    fn tuple(&mut self, items: u8) {
        self.bytes.extend_from_slice(&[b')', items]);
    }

    /// pstats' four figures (its two call counts are samples here), in the
    /// tuple begun.
    fn totals(&mut self, totals: Totals) {
        self.int(totals.samples);
        self.int(totals.samples);
        self.seconds(totals.own_ns);
        self.seconds(totals.cumulative_ns);
    }

    fn key(&mut self, (file, line, name): FunctionKey<'_>) {
        self.tuple(3);
        self.str(file);
        self.int(u64::from(line));
        self.str(name);
    }

    /// An int: 32 bits when it fits, else a long in 15-bit digits.
    fn int(&mut self, value: u64) {
        match i32::try_from(value) {
            Ok(small) => {
                self.bytes.push(b'i');
                self.bytes.extend_from_slice(&small.to_le_bytes());
            }
            Err(_) => {
                let mut digits = Vec::new();
                let mut rest = value;
                while rest > 0 {
                    digits.push((rest & 0x7fff) as u16);
                    rest >>= 15;
                }
                self.bytes.push(b'l');
                self.bytes
                    .extend_from_slice(&(digits.len() as i32).to_le_bytes());
                for digit in digits {
                    self.bytes.extend_from_slice(&digit.to_le_bytes());
                }
            }
        }
    }

    fn seconds(&mut self, nanoseconds: u64) {
        self.bytes.push(b'g');
        let seconds = nanoseconds as f64 / 1e9;
        self.bytes.extend_from_slice(&seconds.to_le_bytes());
    }

    fn str(&mut self, text: &str) {
        self.bytes.push(b'u');
        // A name or a path, far below 4 GiB.
        self.bytes
            .extend_from_slice(&(text.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(text.as_bytes());
    }
}

#[cfg(test)]
mod tests;
