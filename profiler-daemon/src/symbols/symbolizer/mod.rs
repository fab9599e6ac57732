//! Turning normalized addresses into functions, files and lines.
//!
//! One long-lived [`Symbolizer`] wraps blazesym's symbolizer (which is its
//! cache of parsed ELF and DWARF data, and is neither `Send` nor `Sync`, so
//! it lives on one thread) and a cache of symbolized locations. User frames
//! get function, file:line and inlined frames where debug information
//! exists, otherwise `binary+0xoffset`; kernel frames come from kallsyms.
//! What it holds (parsed binaries, `parsed`, and the cache of locations and
//! names, `names`) stays within the symbolizer's share of the memory
//! budget. This module must not read kernel maps or /proc: it symbolizes
//! what the process table normalized.

mod names;
mod parsed;

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

#[cfg(test)]
use self::parsed::BINARY_IDLE_LIMIT;
use self::{names::Names, parsed::ParsedBinaries};

use blazesym::symbolize::{
    Input, Symbolized, Symbolizer as Blazesym,
    source::{Elf, Kernel, Source},
};
use profiler_common::{SampleKind, sample_flags};
use rustc_hash::FxHashMap as HashMap;
use tracing::{debug, warn};

use crate::{
    kernel::drain::CounterDeltas,
    memory::counting::ThreadMeter,
    profile::UnwindStop,
    profile::{Frame, KeyedLocation, Location, LocationKind, ThreadInfo, ThreadState},
    symbols::processes::{Binary, BinaryKey, NormalizedBatch, PythonCode, UserAddress},
    symbols::python::gil::{GIL_WAIT_MARKER, gil_wait_place},
};

/// What a cached location costs besides its frames' names: its key, the
/// shared location and its frames.
const LOCATION_BYTES: u64 = 192;

/// The location cache may take this share of the symbolizer's bytes; past
/// it, it is emptied (and filled again as samples come).
const LOCATION_CACHE_SHARE: u64 = 2;

/// How often idle binaries are looked for.
const IDLE_SWEEP_INTERVAL: Duration = Duration::from_secs(10);

pub use crate::profile::{LOST_MARKER, RING_FULL_MARKER};

/// The name of a kernel function kallsyms does not know (a module's
/// without symbols, a BPF program's).
const UNKNOWN_KERNEL_FUNCTION: &str = "[unknown kernel function]";

/// The identity of a symbolized location, under which the store interns it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum LocationKey {
    /// Offset in a binary file.
    User(BinaryKey, u64),
    /// Offset in a special mapping such as `[vdso]`.
    Special(Arc<str>, u64),
    /// A user address no mapping explained.
    Unmapped(u64),
    /// A kernel address.
    Kernel(u64),
    /// A marker frame such as `[lost]`.
    Marker(Arc<str>),
    /// A Python function's line: its file, qualified name, line, and the
    /// line its definition starts at.
    Python(Arc<str>, Arc<str>, u32, u32),
}

/// Whether a kernel location is `execve`'s own work (loading the new
/// program), where the old program's memory may be gone.
fn in_execve(location: &Location) -> bool {
    location.kind == LocationKind::Kernel
        && location.frames.iter().any(|frame| {
            &*frame.function == "bprm_execve" || frame.function.starts_with("do_execveat_common")
        })
}

/// Whether a kernel location is the tracing machinery that ran the switch
/// program (`bpf_prog_*_record_switch`, `bpf_trace_run4`,
/// `__bpf_trace_sched_switch`), not the code that waited.
fn is_tracing_frame(location: &Location) -> bool {
    location.kind == LocationKind::Kernel
        && location.frames.iter().all(|frame| {
            ["bpf_prog_", "bpf_trace_run", "__bpf_trace_", "__traceiter_"]
                .iter()
                .any(|prefix| frame.function.starts_with(prefix))
        })
}

/// A location and the key it is interned under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolizedLocation {
    pub key: LocationKey,
    pub location: Location,
}

/// Profiles assembled outside the store (peeks, allocation profiles)
/// number locations by their key.
impl KeyedLocation for SymbolizedLocation {
    type Key = LocationKey;

    fn key(&self) -> &LocationKey {
        &self.key
    }

    fn location(&self) -> &Location {
        &self.location
    }
}

/// Samples of one thread with one stack, symbolized.
#[derive(Clone, Debug)]
pub struct SymbolizedSample {
    pub thread: ThreadInfo,
    pub kind: SampleKind,
    /// Outermost caller first.
    pub stack: Vec<Arc<SymbolizedLocation>>,
    pub count: u64,
    pub weight: u64,
    /// An allocation sample's id; 0 for other samples.
    pub allocation_id: u64,
    /// When each of a peek's ticks was taken (monotonic nanoseconds, as
    /// `bpf_ktime_get_ns`); empty for other samples.
    pub times_ns: Vec<u64>,
}

/// A drained batch, symbolized: what the store takes in.
#[derive(Clone, Debug)]
pub struct SymbolizedBatch {
    pub start: SystemTime,
    pub end: SystemTime,
    pub samples: Vec<SymbolizedSample>,
    pub counters: CounterDeltas,
}

/// Cache sizes, for the status report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SymbolizerStats {
    pub user_addresses_cached: u64,
    pub kernel_addresses_cached: u64,
    pub binaries: u64,
    /// Binaries whose parsed data was let go of after going unused.
    pub binaries_released: u64,
    /// Binaries let go of, and cache emptyings, to stay within `limit`.
    pub binaries_evicted: u64,
    /// Binaries named from their symbol tables only (no file:line or
    /// inlined frames): their debug information is too large for `limit`.
    pub binaries_symbols_only: u64,
    pub cache_clears: u64,
    /// Bytes held: parsed binaries (heap and mapped debug sections), and
    /// the cache of locations and names; the most it may hold (0: no
    /// limit).
    pub parsed_bytes: u64,
    pub cache_bytes: u64,
    pub limit: u64,
    /// Addresses looked up since start: found cached, or symbolized.
    pub cache_hits: u64,
    pub cache_misses: u64,
    /// Time spent symbolizing batches since start.
    pub busy: std::time::Duration,
}

/// The symbolizer and its caches. Not `Send`: keep it on one thread.
pub struct Symbolizer {
    blazesym: Blazesym,
    locations: HashMap<LocationKey, Arc<SymbolizedLocation>>,
    kernel_cached: usize,
    /// Binaries blazesym holds parsed, kept open while it does.
    parsed: ParsedBinaries,
    /// The most bytes held (0: no limit).
    limit: u64,
    cache_clears: u64,
    last_idle_sweep: Instant,
    names: Names,
    markers: HashMap<Arc<str>, Arc<SymbolizedLocation>>,
    cache_hits: u64,
    cache_misses: u64,
    busy: std::time::Duration,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer without a limit on what it holds.
    pub fn new() -> Self {
        Self::with_limit(0)
    }

    /// A symbolizer holding at most `limit` bytes (0: no limit).
    pub fn with_limit(limit: u64) -> Self {
        let blazesym = Blazesym::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(false)
            .enable_auto_reload(true)
            .build();
        Self {
            blazesym,
            locations: HashMap::default(),
            kernel_cached: 0,
            parsed: ParsedBinaries::default(),
            limit,
            cache_clears: 0,
            last_idle_sweep: Instant::now(),
            names: Names::default(),
            markers: HashMap::default(),
            cache_hits: 0,
            cache_misses: 0,
            busy: std::time::Duration::ZERO,
        }
    }

    pub fn stats(&self) -> SymbolizerStats {
        SymbolizerStats {
            user_addresses_cached: (self.locations.len() - self.kernel_cached) as u64,
            kernel_addresses_cached: self.kernel_cached as u64,
            binaries: self.parsed.len() as u64,
            binaries_released: self.parsed.released_idle,
            binaries_evicted: self.parsed.evicted,
            binaries_symbols_only: self.parsed.symbols_only,
            cache_clears: self.cache_clears,
            parsed_bytes: self.parsed.bytes(),
            cache_bytes: self.cache_bytes(),
            limit: self.limit,
            cache_hits: self.cache_hits,
            cache_misses: self.cache_misses,
            busy: self.busy,
        }
    }

    /// Symbolizes every stack of the batch; addresses not cached yet are
    /// symbolized in one blazesym call per binary (and one for the kernel).
    pub fn symbolize(&mut self, batch: NormalizedBatch) -> SymbolizedBatch {
        if self.limit > 0 && self.cache_bytes() > self.limit / LOCATION_CACHE_SHARE {
            self.clear();
            self.cache_clears += 1;
        }
        let started = Instant::now();
        self.fill_cache(&batch);
        if started.duration_since(self.last_idle_sweep) >= IDLE_SWEEP_INTERVAL {
            self.last_idle_sweep = started;
            self.parsed.release_idle(&mut self.blazesym, started);
        }
        // The binaries of this batch were needed whole; now only what fits.
        let cache = self.cache_bytes();
        self.parsed
            .keep_within(&mut self.blazesym, cache, self.limit);
        let samples = batch
            .samples
            .into_iter()
            .map(|sample| {
                let mut stack = self.stack(
                    &sample.user,
                    sample.user_stop.as_ref(),
                    &sample.kernel,
                    sample.flags,
                );
                // A wait shows how it waited under the stack it waited in,
                // without the frames of the program that recorded it.
                if let Some(marker) = ThreadState::of(sample.kind).leaf_marker() {
                    while stack
                        .last()
                        .is_some_and(|leaf| is_tracing_frame(&leaf.location))
                    {
                        stack.pop();
                    }
                    if let Some(place) = gil_wait_place(&stack) {
                        stack.insert(place, self.marker(GIL_WAIT_MARKER));
                    }
                    stack.push(self.marker(marker));
                }
                SymbolizedSample {
                    thread: sample.thread,
                    kind: sample.kind,
                    stack,
                    count: sample.count,
                    weight: sample.weight,
                    allocation_id: sample.allocation_id,
                    times_ns: sample.times_ns,
                }
            })
            .collect::<Vec<_>>();
        let elapsed = started.elapsed();
        self.busy += elapsed;
        debug!(
            samples = samples.len(),
            elapsed_ms = elapsed.as_millis() as u64,
            "symbolized a batch"
        );
        SymbolizedBatch {
            start: batch.start,
            end: batch.end,
            samples,
            counters: batch.counters,
        }
    }

    fn count_lookup(&mut self, cached: bool) {
        if cached {
            self.cache_hits += 1;
        } else {
            self.cache_misses += 1;
        }
    }

    /// Symbolizes, in bulk, every address of the batch not cached yet.
    fn fill_cache(&mut self, batch: &NormalizedBatch) {
        let mut by_binary: HashMap<BinaryKey, (Arc<Binary>, Vec<u64>)> = HashMap::default();
        let mut kernel = Vec::new();
        for sample in &batch.samples {
            for (depth, address) in sample.user.iter().enumerate() {
                if let UserAddress::File { binary, offset } = address {
                    let returns = UserAddress::returns(&sample.user, depth);
                    let offset = code_address(*offset, returns);
                    let cached = self
                        .locations
                        .contains_key(&LocationKey::User(binary.key, offset));
                    self.count_lookup(cached);
                    if !cached {
                        by_binary
                            .entry(binary.key)
                            .or_insert_with(|| (binary.clone(), Vec::new()))
                            .1
                            .push(offset);
                    }
                }
            }
            for (depth, &address) in sample.kernel.iter().enumerate() {
                let address = code_address(address, depth > 0);
                let cached = self.locations.contains_key(&LocationKey::Kernel(address));
                self.count_lookup(cached);
                if !cached {
                    kernel.push(address);
                }
            }
        }
        for (_, (binary, mut offsets)) in by_binary {
            offsets.sort_unstable();
            offsets.dedup();
            let debug_info = self
                .parsed
                .reads_debug_info(&binary, self.limit, Instant::now());
            let heap = self.symbolize_binary(&binary, &offsets, debug_info);
            self.parsed.used(&binary, heap, Instant::now());
        }
        if !kernel.is_empty() {
            kernel.sort_unstable();
            kernel.dedup();
            self.symbolize_kernel(&kernel);
        }
    }

    /// Symbolizes `offsets` of `binary` into the cache; says how much more
    /// of the heap blazesym holds for it after (net, as measured on this
    /// thread).
    fn symbolize_binary(&mut self, binary: &Binary, offsets: &[u64], debug_info: bool) -> i64 {
        let mut elf = Elf::new(binary.readable_path());
        elf.debug_syms = debug_info;
        let source = Source::Elf(elf);
        let parsing = ThreadMeter::start();
        let results = self
            .blazesym
            .symbolize(&source, Input::FileOffset(offsets))
            .unwrap_or_else(|err| {
                warn!(binary = %binary.path, "cannot symbolize: {err}");
                Vec::new()
            });
        let parsed_and_answered = parsing.net();
        let basename = basename(&binary.path);
        let unwind = binary.unwind_sections_held();
        for (index, &offset) in offsets.iter().enumerate() {
            let frames = match results.get(index) {
                Some(Symbolized::Sym(sym)) => self.names.frames(sym),
                // No symbol: named by where its function starts (as its
                // unwind entry says), so that its samples stay together.
                _ => {
                    let start = unwind
                        .as_ref()
                        .and_then(|unwind| unwind.function_start(offset))
                        .unwrap_or(offset);
                    vec![self.names.unknown_frame(&format!("{basename}+{start:#x}"))]
                }
            };
            let key = LocationKey::User(binary.key, offset);
            let location = Location {
                kind: LocationKind::User,
                module: binary.path.clone(),
                address: offset,
                frames: frames.into(),
            };
            self.locations
                .insert(key.clone(), Arc::new(SymbolizedLocation { key, location }));
        }
        // The answers are the cache's now (counted there); what blazesym
        // keeps is what parsing took, less them.
        let answering = ThreadMeter::start();
        drop(results);
        parsed_and_answered + answering.net()
    }

    fn symbolize_kernel(&mut self, addresses: &[u64]) {
        let source = Source::Kernel(Kernel::default());
        let results = self
            .blazesym
            .symbolize(&source, Input::AbsAddr(addresses))
            .unwrap_or_else(|err| {
                warn!("cannot symbolize kernel addresses: {err}");
                Vec::new()
            });
        let module = self.names.get("[kernel]");
        for (index, &address) in addresses.iter().enumerate() {
            let frames = match results.get(index) {
                Some(Symbolized::Sym(sym)) => self.names.frames(sym),
                // The address stays in the location, never in the name: it
                // is hidden from users who may not read kernel addresses.
                _ => vec![self.names.unknown_frame(UNKNOWN_KERNEL_FUNCTION)],
            };
            let key = LocationKey::Kernel(address);
            let location = Location {
                kind: LocationKind::Kernel,
                module: module.clone(),
                address,
                frames: frames.into(),
            };
            self.locations
                .insert(key.clone(), Arc::new(SymbolizedLocation { key, location }));
            self.kernel_cached += 1;
        }
    }

    /// The stack of a sample, outermost caller first. Every address was
    /// symbolized by `fill_cache`.
    fn stack(
        &mut self,
        user: &[UserAddress],
        user_stop: Option<&UnwindStop>,
        kernel: &[u64],
        flags: u32,
    ) -> Vec<Arc<SymbolizedLocation>> {
        let mut stack = Vec::with_capacity(user.len() + kernel.len() + 2);
        if flags & sample_flags::USER_STACK_TRUNCATED != 0 {
            stack.push(self.marker("[truncated]"));
        }
        // No copy of a stack that `execve` took away: said so, not as if
        // the copy had failed.
        let user_stop = match user_stop {
            Some(UnwindStop::NoStackCopy)
                if (0..kernel.len())
                    .any(|depth| in_execve(&self.kernel_location(kernel, depth).location)) =>
            {
                Some(&UnwindStop::InExecve)
            }
            stop => stop,
        };
        if let Some(stop) = user_stop {
            stack.push(self.marker(&format!("[unwind stopped: {}]", stop.reason())));
        }
        // Both stacks lost for one reason the sample can carry: said once,
        // with it (a selection's own losses by cause).
        let ring_full = flags & sample_flags::STACK_COPY_RING_FULL != 0;
        if ring_full {
            stack.push(self.marker(RING_FULL_MARKER));
        } else if flags & sample_flags::USER_STACK_LOST != 0 {
            stack.push(self.marker(LOST_MARKER));
        }
        for (depth, address) in user.iter().enumerate().rev() {
            let returns = UserAddress::returns(user, depth);
            stack.push(self.user_location(address, returns));
        }
        if flags & sample_flags::KERNEL_STACK_LOST != 0 && !ring_full {
            stack.push(self.marker(LOST_MARKER));
        }
        for depth in (0..kernel.len()).rev() {
            stack.push(self.kernel_location(kernel, depth));
        }
        stack
    }

    /// The location of the kernel frame at `depth` of `kernel` (leaf first).
    fn kernel_location(&mut self, kernel: &[u64], depth: usize) -> Arc<SymbolizedLocation> {
        let key = LocationKey::Kernel(code_address(kernel[depth], depth > 0));
        self.cached(key, LocationKind::Kernel, "[kernel]")
    }

    fn user_location(&mut self, address: &UserAddress, returns: bool) -> Arc<SymbolizedLocation> {
        match address {
            UserAddress::File { binary, offset } => {
                let key = LocationKey::User(binary.key, code_address(*offset, returns));
                self.cached(key, LocationKind::User, &binary.path)
            }
            UserAddress::Special { name, offset } | UserAddress::Anonymous { name, offset, .. } => {
                let offset = code_address(*offset, returns);
                let key = LocationKey::Special(name.clone(), offset);
                let vdso_function = match &**name {
                    "[vdso]" => crate::symbols::vdso::function_at(offset),
                    _ => None,
                };
                let function = match vdso_function {
                    Some(function) => function.to_string(),
                    None => format!("{name}+{offset:#x}"),
                };
                self.uncacheable(key, LocationKind::User, name.clone(), offset, function)
            }
            UserAddress::Jit { function, address } => {
                // One location per JIT function: its code moves as it is
                // compiled again, its name stays.
                let key = LocationKey::Special(function.clone(), 0);
                self.uncacheable(
                    key,
                    LocationKind::User,
                    Arc::from("[jit]"),
                    *address,
                    function.to_string(),
                )
            }
            UserAddress::Signal => self.marker("[signal handler]"),
            UserAddress::Python(frame) => self.python_location(frame),
            UserAddress::PythonMarker(cut) => self.marker(&cut.marker()),
            UserAddress::Unmapped { address } => {
                // No mapping held it: only the address says where it was
                // (as it was: stepping back into a call means nothing here).
                let key = LocationKey::Unmapped(*address);
                self.uncacheable(
                    key,
                    LocationKind::User,
                    Arc::from("[unmapped]"),
                    *address,
                    format!("[unmapped] {address:#x}"),
                )
            }
        }
    }

    /// A Python function's frame: named by its qualified name, with its
    /// file and line, once its code object was read; by its code object's
    /// address until then.
    fn python_location(&mut self, frame: &PythonCode) -> Arc<SymbolizedLocation> {
        let Some(code) = &frame.name else {
            let key = LocationKey::Special(Arc::from(PYTHON_MODULE), frame.code);
            return self.uncacheable(
                key,
                LocationKind::Python,
                Arc::from(PYTHON_MODULE),
                0,
                format!("[python code {:#x}]", frame.code),
            );
        };
        let line = frame.unit.and_then(|unit| code.line_at(unit)).unwrap_or(0);
        let file = self.names.get(&code.filename);
        let function = self.names.get(&code.qualname);
        let key = LocationKey::Python(file.clone(), function.clone(), line, code.first_line);
        if let Some(location) = self.locations.get(&key) {
            return location.clone();
        }
        let location = Arc::new(SymbolizedLocation {
            key: key.clone(),
            location: Location {
                kind: LocationKind::Python,
                module: file.clone(),
                address: u64::from(code.first_line),
                frames: vec![Frame {
                    function,
                    file: Some(file),
                    line,
                    inlined: false,
                }]
                .into(),
            },
        });
        self.locations.insert(key, location.clone());
        location
    }

    /// A location `fill_cache` put in the cache; should it be missing (it
    /// cannot), an unknown frame rather than a panic.
    fn cached(
        &mut self,
        key: LocationKey,
        kind: LocationKind,
        module: &str,
    ) -> Arc<SymbolizedLocation> {
        if let Some(location) = self.locations.get(&key) {
            return location.clone();
        }
        let address = match key {
            LocationKey::User(_, address) | LocationKey::Kernel(address) => address,
            _ => 0,
        };
        let module = self.names.get(module);
        let function = match kind {
            LocationKind::Kernel => UNKNOWN_KERNEL_FUNCTION.to_owned(),
            _ => format!("{}+{address:#x}", basename(&module)),
        };
        self.uncacheable(key, kind, module, address, function)
    }

    fn uncacheable(
        &mut self,
        key: LocationKey,
        kind: LocationKind,
        module: Arc<str>,
        address: u64,
        function: String,
    ) -> Arc<SymbolizedLocation> {
        let frame = self.names.unknown_frame(&function);
        Arc::new(SymbolizedLocation {
            key,
            location: Location {
                kind,
                module,
                address,
                frames: vec![frame].into(),
            },
        })
    }

    fn marker(&mut self, name: &str) -> Arc<SymbolizedLocation> {
        if let Some(marker) = self.markers.get(name) {
            return marker.clone();
        }
        let frame = self.names.unknown_frame(name);
        let name: Arc<str> = Arc::from(name);
        let marker = Arc::new(SymbolizedLocation {
            key: LocationKey::Marker(name.clone()),
            location: Location {
                kind: LocationKind::Marker,
                module: name.clone(),
                address: 0,
                frames: vec![frame].into(),
            },
        });
        self.markers.insert(name, marker.clone());
        marker
    }

    /// Bytes of the cache of locations and names, roughly.
    fn cache_bytes(&self) -> u64 {
        self.locations.len() as u64 * LOCATION_BYTES + self.names.bytes()
    }

    /// Forgets every cached location and parsed binary.
    fn clear(&mut self) {
        self.parsed.clear(&mut self.blazesym);
        self.locations.clear();
        self.names.clear();
        self.kernel_cached = 0;
    }
}

/// The module of Python frames whose code objects are not read yet.
const PYTHON_MODULE: &str = "[python]";

/// Return addresses point after the call; step back into the call
/// instruction so the address symbolizes to the calling line.
fn code_address(address: u64, is_return_address: bool) -> u64 {
    if is_return_address {
        address.saturating_sub(1)
    } else {
        address
    }
}

fn basename(path: &str) -> &str {
    Path::new(path)
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or(path)
}

#[cfg(test)]
mod tests;
