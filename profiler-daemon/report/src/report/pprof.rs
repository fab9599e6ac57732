//! The pprof report: a gzipped `profile.proto` for `go tool pprof` and the
//! other tools that read it.
//!
//! It is raw data for tools that slice it themselves, so only `kernel`
//! (each kernel run becomes one `[kernel]` location, an empty stack one
//! `[unknown]` location) and `groupby` apply; `maxdepth`, `mincount`,
//! `noisefloor`, `sortedby` and `combine` are ignored. `groupby` says what
//! one pprof sample stands for:
//! - thread: one profile sample, that is one stack of one thread, labelled
//!   `pid`, `tid`, `thread_name` and `comm`;
//! - process: the samples of one stack in one process (a pid and its
//!   command), labelled `pid` and `comm`;
//! - auto, the default: thread for a profile of one process; for more, the
//!   samples of one stack in the processes of one command, labelled `comm`
//!   (a whole machine's threads and pids only when asked, as Go's own CPU
//!   profiles leave threads out: the many short-lived processes of one
//!   program, as a build or a job runner starts, stay one group);
//! - none: the samples of one stack in the whole profile, unlabelled: the
//!   smallest profile, for a look at the whole machine.
//!
//! Each pprof sample has the
//! values `samples/count` and `cpu/nanoseconds` (and, when the profile holds
//! off-CPU time, `off_cpu/nanoseconds` and `wall/nanoseconds`, the mode's
//! the default, and a `thread_state` label: `cpu`, `S`, `D`, `runqueue`);
//! an allocation profile has Go's heap profile values instead,
//! `alloc_objects/count`, `alloc_space/bytes`, `inuse_objects/count` and
//! `inuse_space/bytes` (`go tool pprof -sample_index=inuse_space`); one location per distinct
//! profile location (lines innermost first), one function per (name, file),
//! one mapping per module, whose `has_*` flags say whether any of its
//! frames has that information (pprof's own convention).
//!
//! It must not render text, drop samples, nor merge them but as `groupby`
//! asks.
//!
//! Samples are encoded by hand (see `protobuf`), each distinct stack's
//! location ids and each thread's labels once, and compressed as they are
//! encoded, so that neither their messages nor the whole uncompressed
//! profile are ever held. Compression (at gzip's fastest level, which the
//! bytes depend on) takes most of the time, so it runs on other threads
//! while the samples are encoded (`gzip`).

use std::{borrow::Cow, io::Write, ops::Range};

use prost::Message as _;
use rustc_hash::FxHashMap;

use super::ReportError;
use super::frames::{Expansion, Site, SiteId, StackId, StackSample};
use super::protobuf::{
    length_delimited_len, push_int_field, push_length_delimited, push_packed, push_varint,
    varint_len,
};
use crate::pprof as pb;
use crate::profile::{
    GroupBy, LocationKind, Profile, ProfileMode, ReportOptions, ThreadState, unix_nanos,
};
use gzip::gzip_alongside;

/// Samples encoded, then handed to compression, at a time. (The compressed
/// bytes do not depend on it: compression cuts its own blocks.)
const SAMPLE_BATCH: usize = 1024;

/// Field numbers of `profile.proto`'s messages that are encoded by hand.
const PROFILE_SAMPLE: u32 = 2;
const SAMPLE_LOCATION_ID: u32 = 1;
const SAMPLE_VALUE: u32 = 2;
const SAMPLE_LABEL: u32 = 3;
const LABEL_KEY: u32 = 1;
const LABEL_STR: u32 = 2;
const LABEL_NUM: u32 = 3;

pub(super) fn render(profile: &Profile, options: &ReportOptions) -> Result<Vec<u8>, ReportError> {
    let expansion = Expansion::new(profile, options.kernel)?;
    let grouping = Grouping::of(options.groupby, profile);
    gzip_alongside(|out| {
        Builder::new(&expansion, profile.threads.len()).write(profile, grouping, out)
    })
}

/// What one pprof sample stands for (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grouping {
    Thread,
    Process,
    /// The processes of one command (auto, over more than one process).
    Command,
    Machine,
}

impl Grouping {
    fn of(groupby: GroupBy, profile: &Profile) -> Self {
        let one_process = |threads: &[crate::profile::ThreadInfo]| {
            threads.windows(2).all(|pair| pair[0].pid == pair[1].pid)
        };
        match groupby {
            GroupBy::Auto if one_process(&profile.threads) => Self::Thread,
            GroupBy::Auto => Self::Command,
            GroupBy::Thread => Self::Thread,
            GroupBy::Process => Self::Process,
            GroupBy::None => Self::Machine,
        }
    }

    /// The expansion's samples merged as `self` asks, in an order that
    /// depends only on the profile: those of groups of one thread each (by
    /// thread, or processes of one thread, never the machine) as they
    /// are; in CPU mode, one
    /// sum per group and stack, by group (in the order of the profile's
    /// threads), then stack; otherwise those of a group of one thread as
    /// they are, then the others summed by group, stack and state. A sum
    /// stands for its group by the thread of its first sample.
    fn merge<'s>(self, expansion: &'s Expansion<'_>) -> Cow<'s, [StackSample]> {
        // A sum of samples that stands for its group by `first`'s thread.
        let empty = |first: &StackSample| StackSample {
            count: 0,
            weight: 0,
            ..*first
        };
        let add_up = |sum: &mut StackSample, sample: &StackSample| {
            sum.count = sum.count.saturating_add(sample.count);
            sum.weight = sum.weight.saturating_add(sample.weight);
        };
        let on_cpu = || {
            let mut states = expansion.samples.iter().map(|sample| sample.state);
            states.all(|state| state == ThreadState::Cpu)
        };
        let threads = expansion.threads().len();
        let group_of_thread: Vec<u32> = match self {
            Self::Thread => return Cow::Borrowed(&expansion.samples),
            Self::Machine => vec![0; threads],
            Self::Process | Self::Command => {
                let mut groups = FxHashMap::default();
                expansion
                    .threads()
                    .iter()
                    .map(|thread| {
                        let next = groups.len() as u32;
                        let pid = match self {
                            Self::Process => thread.pid,
                            _ => 0,
                        };
                        *groups.entry((pid, &*thread.process_name)).or_insert(next)
                    })
                    .collect()
            }
        };
        let mut group_threads = vec![0_u32; threads];
        for &group in &group_of_thread {
            group_threads[group as usize] += 1;
        }
        let alone = |thread: u32| group_threads[group_of_thread[thread as usize] as usize] == 1;
        // (A whole machine's samples are always summed per stack.)
        if self != Self::Machine && (0..threads as u32).all(alone) {
            return Cow::Borrowed(&expansion.samples);
        }
        if on_cpu() {
            return Cow::Owned(sum_by_group_and_stack(expansion, &group_of_thread));
        }
        let mut kept = Vec::new();
        let mut sums: FxHashMap<(u32, StackId, ThreadState), StackSample> = FxHashMap::default();
        for sample in expansion.samples.iter() {
            if alone(sample.thread) {
                kept.push(*sample);
                continue;
            }
            let key = (
                group_of_thread[sample.thread as usize],
                sample.stack,
                sample.state,
            );
            add_up(sums.entry(key).or_insert(empty(sample)), sample);
        }
        let mut merged: Vec<_> = sums.into_iter().collect();
        merged.sort_unstable_by_key(|&(key, _)| key);
        kept.extend(merged.into_iter().map(|(_, sample)| sample));
        Cow::Owned(kept)
    }
}

/// The CPU samples of `expansion` summed per group (`group_of_thread`) and
/// stack, by group, then stack: a counting sort by group, then one slot per
/// stack reused from group to group (no hashing: a whole machine's window
/// holds a million samples).
fn sum_by_group_and_stack(expansion: &Expansion<'_>, group_of_thread: &[u32]) -> Vec<StackSample> {
    let groups = group_of_thread
        .iter()
        .max()
        .map_or(0, |&max| max as usize + 1);
    let group_of = |sample: &StackSample| group_of_thread[sample.thread as usize] as usize;
    // Where each group's samples start in `by_group`.
    let mut starts = vec![0_usize; groups + 1];
    for sample in expansion.samples.iter() {
        starts[group_of(sample) + 1] += 1;
    }
    for group in 0..groups {
        starts[group + 1] += starts[group];
    }
    let mut next = starts.clone();
    let mut by_group = vec![0_u32; expansion.samples.len()];
    for (index, sample) in (0..).zip(expansion.samples.iter()) {
        let place = &mut next[group_of(sample)];
        by_group[*place] = index;
        *place += 1;
    }
    let mut sums: Vec<Option<StackSample>> = vec![None; expansion.stack_count()];
    let mut touched: Vec<StackId> = Vec::new();
    let mut merged = Vec::new();
    for group in 0..groups {
        for &index in &by_group[starts[group]..starts[group + 1]] {
            let sample = &expansion.samples[index as usize];
            let sum = &mut sums[sample.stack as usize];
            let sum = match sum {
                Some(sum) => sum,
                None => {
                    touched.push(sample.stack);
                    sum.insert(StackSample {
                        count: 0,
                        weight: 0,
                        ..*sample
                    })
                }
            };
            sum.count = sum.count.saturating_add(sample.count);
            sum.weight = sum.weight.saturating_add(sample.weight);
        }
        // In stack order: by the slots themselves when many are used (a
        // whole machine's one group), else by the used ones sorted.
        if touched.len() >= sums.len() / 8 {
            merged.extend(sums.iter_mut().filter_map(Option::take));
            touched.clear();
        } else {
            touched.sort_unstable();
            merged.extend(
                touched
                    .drain(..)
                    .filter_map(|stack| sums[stack as usize].take()),
            );
        }
    }
    merged
}

/// The strings of the label keys of the samples, as their grouping has them.
#[derive(Clone, Copy)]
enum LabelKeys {
    /// `pid`, `tid`, `thread_name`, `comm`.
    Thread([i64; 4]),
    /// `pid`, `comm`.
    Process([i64; 2]),
    /// `comm`.
    Command(i64),
    None,
}

/// The tables of a pprof profile, deduplicated as they fill.
struct Builder<'e, 'a> {
    expansion: &'e Expansion<'a>,
    strings: Vec<&'a str>,
    string_ids: FxHashMap<&'a str, i64>,
    mappings: Vec<pb::Mapping>,
    mapping_ids: FxHashMap<&'a str, u64>,
    functions: Vec<pb::Function>,
    function_ids: FxHashMap<(&'a str, Option<&'a str>), u64>,
    locations: Vec<pb::Location>,
    /// The id of each site's location once added; 0 before.
    site_locations: Vec<u64>,
    /// The label fields of each thread of the profile once used, encoded,
    /// in `encoded` (a process's, with `Grouping::Process`).
    thread_labels: Vec<Option<Range<usize>>>,
    /// The string of the `thread_state` label's key, when samples carry it.
    state_key: Option<i64>,
    /// An allocation profile: Go's heap profile values.
    memory: bool,
    /// The location ids of each stack of the expansion once used, leaf
    /// first, encoded (as the values of a packed field) in `encoded`.
    stack_locations: Vec<Option<Range<usize>>>,
    encoded: Vec<u8>,
}

impl<'e, 'a> Builder<'e, 'a> {
    fn new(expansion: &'e Expansion<'a>, threads: usize) -> Self {
        Builder {
            expansion,
            strings: Vec::new(),
            string_ids: FxHashMap::default(),
            mappings: Vec::new(),
            mapping_ids: FxHashMap::default(),
            functions: Vec::new(),
            function_ids: FxHashMap::default(),
            locations: Vec::new(),
            site_locations: vec![0; expansion.sites.len()],
            thread_labels: vec![None; threads],
            state_key: None,
            memory: false,
            stack_locations: vec![None; expansion.stack_count()],
            encoded: Vec::new(),
        }
    }

    /// Writes the encoded profile to `out`, its samples grouped as
    /// `grouping` says. The samples are written a batch
    /// at a time rather than held all at once; as protobuf fields are
    /// written in field number order (sample types, samples, then the
    /// tables and the rest), the bytes are those of the whole message.
    fn write(
        mut self,
        profile: &Profile,
        grouping: Grouping,
        out: &mut dyn Write,
    ) -> Result<(), ReportError> {
        self.string(""); // string_table[0] must be "".
        self.memory = profile.mode.is_memory();
        let (sample_type, period_type) = if self.memory {
            (
                vec![
                    self.value_type("alloc_objects", "count"),
                    self.value_type("alloc_space", "bytes"),
                    self.value_type("inuse_objects", "count"),
                    self.value_type("inuse_space", "bytes"),
                ],
                self.value_type("space", "bytes"),
            )
        } else {
            let mut sample_type = vec![
                self.value_type("samples", "count"),
                self.value_type("cpu", "nanoseconds"),
            ];
            if profile.mode != ProfileMode::Cpu {
                sample_type.push(self.value_type("off_cpu", "nanoseconds"));
                sample_type.push(self.value_type("wall", "nanoseconds"));
                self.state_key = Some(self.string("thread_state"));
            }
            (sample_type, self.value_type("cpu", "nanoseconds"))
        };
        let period_type = Some(period_type);
        let default_sample_type = self.string(match profile.mode {
            ProfileMode::Cpu => "cpu",
            ProfileMode::OffCpu => "off_cpu",
            ProfileMode::Wall => "wall",
            ProfileMode::Allocated => "alloc_space",
            ProfileMode::Held => "inuse_space",
        });
        let keys = match grouping {
            Grouping::Thread => {
                LabelKeys::Thread(["pid", "tid", "thread_name", "comm"].map(|key| self.string(key)))
            }
            Grouping::Process => LabelKeys::Process(["pid", "comm"].map(|key| self.string(key))),
            Grouping::Command => LabelKeys::Command(self.string("comm")),
            Grouping::Machine => LabelKeys::None,
        };
        out.write_all(
            &pb::Profile {
                sample_type,
                ..Default::default()
            }
            .encode_to_vec(),
        )?;

        let samples = grouping.merge(self.expansion);
        let mut batch = Vec::new();
        for samples in samples.chunks(SAMPLE_BATCH) {
            batch.clear();
            for sample in samples {
                self.write_sample(&mut batch, sample, keys);
            }
            out.write_all(&batch)?;
        }

        let rest = pb::Profile {
            mapping: self.mappings,
            location: self.locations,
            function: self.functions,
            string_table: self.strings.into_iter().map(str::to_owned).collect(),
            time_nanos: unix_nanos(profile.start),
            duration_nanos: profile
                .end
                .duration_since(profile.start)
                .map_or(0, |duration| saturating_i64(duration.as_nanos())),
            period_type,
            period: saturating_i64(profile.period_ns),
            default_sample_type,
            ..Default::default()
        };
        out.write_all(&rest.encode_to_vec())?;
        Ok(())
    }

    /// Appends the `sample` field of the pprof sample of `sample`; `keys`
    /// are its labels' keys.
    fn write_sample(&mut self, out: &mut Vec<u8>, sample: &StackSample, keys: LabelKeys) {
        // Labels first: their strings come before the locations'.
        let labels = self.thread_labels(sample, keys);
        let state_label = self.state_label(sample.state);
        let locations = self.stack_locations(sample.stack);
        let on_cpu = sample.state == ThreadState::Cpu;
        let (cpu, off_cpu) = if on_cpu {
            (sample.weight, 0)
        } else {
            (0, sample.weight)
        };
        let all = if self.memory {
            // Objects and bytes, allocated or still held.
            match sample.state {
                ThreadState::Held => [0, 0, sample.weight, sample.count],
                _ => [sample.weight, sample.count, 0, 0],
            }
        } else {
            [sample.count, cpu, off_cpu, sample.weight]
        }
        .map(|value| saturating_i64(value) as u64);
        // Two values in CPU mode, as before; four with off-CPU time or
        // memory.
        let values = if self.state_key.is_some() || self.memory {
            &all[..]
        } else {
            &all[..2]
        };
        let values_len = values.iter().map(|&value| varint_len(value)).sum();
        let mut len = length_delimited_len(SAMPLE_VALUE, values_len)
            + labels.len()
            + state_label.as_ref().map_or(0, Vec::len);
        if !locations.is_empty() {
            len += length_delimited_len(SAMPLE_LOCATION_ID, locations.len());
        }
        push_length_delimited(out, PROFILE_SAMPLE, len);
        if !locations.is_empty() {
            push_length_delimited(out, SAMPLE_LOCATION_ID, locations.len());
            out.extend_from_slice(&self.encoded[locations]);
        }
        push_packed(out, SAMPLE_VALUE, values);
        out.extend_from_slice(&self.encoded[labels]);
        if let Some(state_label) = state_label {
            out.extend_from_slice(&state_label);
        }
    }

    /// The encoded `thread_state` label (`cpu`, `S`, `D`, `runqueue`) of a
    /// sample, when the profile holds off-CPU time.
    fn state_label(&mut self, state: ThreadState) -> Option<Vec<u8>> {
        let key = self.state_key?;
        let value = self.string(state.name());
        let mut label = Vec::new();
        push_int_field(&mut label, LABEL_KEY, key as u64);
        push_int_field(&mut label, LABEL_STR, value as u64);
        let mut field = Vec::new();
        push_length_delimited(&mut field, SAMPLE_LABEL, label.len());
        field.extend_from_slice(&label);
        Some(field)
    }

    fn string(&mut self, s: &'a str) -> i64 {
        if let Some(&id) = self.string_ids.get(s) {
            return id;
        }
        let id = self.strings.len() as i64;
        self.strings.push(s);
        self.string_ids.insert(s, id);
        id
    }

    fn value_type(&mut self, r#type: &'a str, unit: &'a str) -> pb::ValueType {
        pb::ValueType {
            r#type: self.string(r#type),
            unit: self.string(unit),
        }
    }

    /// The encoded label fields of the sample's thread: `pid`, `tid`,
    /// `thread_name` and `comm`, whose keys are `keys`; only `pid` and
    /// `comm` when samples stand for processes, none for the whole machine.
    fn thread_labels(&mut self, sample: &StackSample, keys: LabelKeys) -> Range<usize> {
        let index = sample.thread as usize;
        if let Some(labels) = &self.thread_labels[index] {
            return labels.clone();
        }
        let thread = self.expansion.thread(sample);
        let labels = match keys {
            LabelKeys::Thread([pid, tid, thread_name, comm]) => vec![
                (pid, 0, thread.pid),
                (tid, 0, thread.tid),
                (thread_name, self.string(&thread.thread_name), 0),
                (comm, self.string(&thread.process_name), 0),
            ],
            LabelKeys::Process([pid, comm]) => vec![
                (pid, 0, thread.pid),
                (comm, self.string(&thread.process_name), 0),
            ],
            LabelKeys::Command(comm) => vec![(comm, self.string(&thread.process_name), 0)],
            LabelKeys::None => Vec::new(),
        };
        let start = self.encoded.len();
        let mut label = Vec::new();
        for (key, str, num) in labels {
            label.clear();
            push_int_field(&mut label, LABEL_KEY, key as u64);
            push_int_field(&mut label, LABEL_STR, str as u64);
            push_int_field(&mut label, LABEL_NUM, u64::from(num));
            push_length_delimited(&mut self.encoded, SAMPLE_LABEL, label.len());
            self.encoded.extend_from_slice(&label);
        }
        let labels = start..self.encoded.len();
        self.thread_labels[index] = Some(labels.clone());
        labels
    }

    /// The encoded location ids of a stack, leaf first.
    fn stack_locations(&mut self, stack: StackId) -> Range<usize> {
        if let Some(locations) = &self.stack_locations[stack as usize] {
            return locations.clone();
        }
        let start = self.encoded.len();
        // pprof wants the leaf first.
        for &site in self.expansion.sites_of(stack).iter().rev() {
            let location = self.location(site);
            push_varint(&mut self.encoded, location);
        }
        let locations = start..self.encoded.len();
        self.stack_locations[stack as usize] = Some(locations.clone());
        locations
    }

    /// The id of the site's location, adding it (with its functions and
    /// mapping) on first use.
    fn location(&mut self, site_id: SiteId) -> u64 {
        let known = self.site_locations[site_id as usize];
        if known != 0 {
            return known;
        }
        let expansion = self.expansion;
        let site = expansion.sites[site_id as usize].site;
        let mapping = self.mapping(site.module());
        let range = expansion.site_frames(site_id);
        let frames = &expansion.frames[range.start as usize..range.end as usize];
        // A Python function's definition line is its function's start.
        let start_line = match site {
            Site::Location(location) if location.kind == LocationKind::Python => {
                saturating_i64(location.address)
            }
            _ => 0,
        };
        let mut line = Vec::with_capacity(frames.len());
        // pprof wants the innermost (inlined) function first.
        for frame in frames.iter().rev() {
            line.push(pb::Line {
                function_id: self.function(frame.function, frame.file, start_line),
                line: i64::from(frame.line),
                column: 0,
            });
        }
        let flags = &mut self.mappings[mapping];
        flags.has_functions |= frames.iter().any(|frame| !frame.function.is_empty());
        flags.has_filenames |= frames.iter().any(|frame| frame.file.is_some());
        flags.has_line_numbers |= frames.iter().any(|frame| frame.line > 0);
        flags.has_inline_frames |= frames.len() > 1;
        let id = self.locations.len() as u64 + 1;
        self.locations.push(pb::Location {
            id,
            mapping_id: self.mappings[mapping].id,
            address: site.address(),
            line,
            is_folded: false,
        });
        self.site_locations[site_id as usize] = id;
        id
    }

    /// The index in `mappings` of the module's mapping.
    fn mapping(&mut self, module: &'a str) -> usize {
        if let Some(&id) = self.mapping_ids.get(module) {
            return id as usize - 1;
        }
        let id = self.mappings.len() as u64 + 1;
        let filename = self.string(module);
        self.mappings.push(pb::Mapping {
            id,
            filename,
            ..Default::default()
        });
        self.mapping_ids.insert(module, id);
        id as usize - 1
    }

    /// The id of the function `name` of `file`, adding it on first use
    /// (`start_line`, the line its definition starts at, 0 when unknown,
    /// is the first use's).
    fn function(&mut self, name: &'a str, file: Option<&'a str>, start_line: i64) -> u64 {
        if let Some(&id) = self.function_ids.get(&(name, file)) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let name_id = self.string(name);
        let filename = self.string(file.unwrap_or(""));
        self.functions.push(pb::Function {
            id,
            name: name_id,
            system_name: name_id,
            filename,
            start_line,
        });
        self.function_ids.insert((name, file), id);
        id
    }
}

fn saturating_i64(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

mod gzip;
#[cfg(test)]
mod tests;
