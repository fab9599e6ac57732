//! Query latency without root or a kernel: fills a [`Store`] with a
//! synthetic but realistic ten minutes of samples (the scale of
//! BENCHMARKS.md's table 5) and times `Store::profile` and each report
//! format over the whole window, in-process, as the API makes them (the
//! profile and the report dropped before the reply would be sent).
//!
//! ```sh
//! cargo run --release -p profiler-daemon --example query_latency
//! cargo run --release -p profiler-daemon --example query_latency -- --digests
//! ```
//!
//! The data: 600 one-second buckets at 1000 Hz on 2 CPUs (1.3 million
//! samples), each CPU running a succession of short-lived processes (1–5 s
//! each, as the benchmark's stack storm does) plus a few long-lived
//! threads: 1.16 million distinct (thread, stack) pairs of 170,000
//! distinct stacks, 9–27 locations deep. Stacks are drawn with a skew (a
//! few paths far more often than most) from 13,000 call paths down a call
//! graph of 400 functions, landing on one of a few instructions of the
//! last; 4,900 locations of 1–3 frames (inlined functions); kernel frames
//! on top of 3% of the samples. Its reports are bigger than the
//! benchmark's (tree and folded about twice as big).
//!
//! "CPU per req" is the thread's CPU time (10 ms ticks, averaged over the
//! requests): steadier than wall time on a shared machine. "peak RSS +" is
//! how far the process's RSS rose above its RSS before the requests.
//!
//! `--digests` prints a digest of each report under several option sets, to
//! check that a change to the query path leaves every report's bytes as
//! they were.

use std::{
    hint::black_box,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use clap::Parser;
use profiler_common::{COUNTER_COUNT, SampleKind};
use profilerd::{
    profile::{
        Format, Frame, GroupBy, Location, LocationKind, Profile, ReportOptions, SortedBy,
        ThreadInfo,
    },
    report::{self, OwnersShown},
    store::{Query, SampleAccess, Selector, Store, StoreSettings, SumBy},
    symbols::processes::BinaryKey,
    symbols::symbolizer::{LocationKey, SymbolizedBatch, SymbolizedLocation, SymbolizedSample},
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

#[derive(Parser)]
struct Args {
    /// Timed requests per format (and of `Store::profile` alone).
    #[arg(long, default_value_t = 11)]
    reps: usize,
    /// Only these formats (tree, flat, folded, pprof, profile).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Print a digest of each report under several option sets instead.
    #[arg(long)]
    digests: bool,
    /// Time extending a stack index by its last stacks instead (the
    /// report's and the refresher's cost when the store has grown).
    #[arg(long)]
    extensions: bool,
    /// Time a compaction instead: the retention cut to the last tenth of
    /// the window (what falls out dropped, the tables rebuilt), as the
    /// daemon's store does at most once a minute: the tables rebuilt (the
    /// store read-locked, reports go on) and put in place (write-locked).
    #[arg(long)]
    compaction: bool,
    /// Also write each format's report (default options) into this
    /// directory.
    #[arg(long)]
    write: Option<std::path::PathBuf>,
    /// Samples in all.
    #[arg(long, default_value_t = 1_300_000)]
    samples: u64,
    /// Seconds of samples, the window and the retention (e.g. 3600 and
    /// `--samples 7800000` for an hour at the same rate; the store's 64 MiB
    /// ceiling then coarsens and evicts as the daemon's would).
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Distinct call paths samples are drawn from.
    #[arg(long, default_value_t = 13_000)]
    paths: usize,
    /// Skew of the paths' popularity: the path is the number of paths
    /// times a uniform number to this power.
    #[arg(long, default_value_t = 3.0)]
    path_skew: f64,
    /// Skew of the instruction a sample lands on in its leaf function.
    #[arg(long, default_value_t = 1.0)]
    leaf_skew: f64,
    /// Tree and flat: the most sections a report shows (0: all).
    #[arg(long, default_value_t = profilerd::profile::DEFAULT_MAXSECTIONS)]
    maxsections: u64,
    /// Percent of samples with kernel frames.
    #[arg(long, default_value_t = 3)]
    kernel_percent: usize,
}

const CPUS: u64 = 2;
const FREQUENCY_HZ: u32 = 1000;
const PERIOD_NS: u64 = 1_000_000;

fn main() {
    // The allocator as the daemon tunes it.
    profilerd::memory::trim::tune();
    let args = Args::parse();
    let started = Instant::now();
    let (store, start) = fill_store(&args);
    let stats = store.stats();
    println!(
        "filled in {:.1} s: {} buckets, {} distinct stacks, store {:.1} MiB, {} buckets evicted",
        started.elapsed().as_secs_f64(),
        stats.buckets,
        stats.distinct_stacks,
        stats.memory_bytes as f64 / (1 << 20) as f64,
        stats.buckets_evicted_for_memory
    );
    let query = Query {
        start,
        end: start + Duration::from_secs(args.seconds),
        selector: Selector::default(),
        access: SampleAccess::All,
        mode: profilerd::profile::ProfileMode::Cpu,
        frequency_hz: FREQUENCY_HZ,
    };
    let profile = store.profile(&query);
    println!(
        "profile: {} samples in {} (thread, stack) pairs, {} threads, {} stacks, {} locations",
        profile.total_samples(),
        profile.samples.len(),
        profile.threads.len(),
        profile.stacks.len(),
        profile.locations.len()
    );
    drop(profile);

    if args.digests {
        print_digests(&store, &query);
        return;
    }
    if args.extensions {
        print_extensions(&store, args.reps);
        return;
    }
    if args.compaction {
        let mut store = store;
        // A minute after the store was made (compactions are a minute
        // apart), the first tenth of the window past the retention.
        let now = SystemTime::now() + Duration::from_secs(61);
        let horizon = start + Duration::from_secs(args.seconds / 10);
        let settings = StoreSettings {
            retention: now.duration_since(horizon).unwrap_or_default(),
            resolution: Duration::from_secs(10),
            memory_limit: 64 << 20,
        };
        let stacks = store.stats().distinct_stacks;
        let started = Instant::now();
        store.set_settings(settings, now);
        let expired = started.elapsed();
        let started = Instant::now();
        let plan = store.plan_compaction();
        let planned = started.elapsed();
        let started = Instant::now();
        assert!(store.apply_compaction(plan, now), "nothing came in between");
        let applied = started.elapsed();
        println!(
            "compaction: buckets expired in {:.1} ms, tables rebuilt in {:.1} ms (read lock), \
             put in place in {:.1} ms (write lock), {stacks} -> {} distinct stacks",
            expired.as_secs_f64() * 1e3,
            planned.as_secs_f64() * 1e3,
            applied.as_secs_f64() * 1e3,
            store.stats().distinct_stacks
        );
        return;
    }
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|only| only == name);
    if wanted("callers") {
        // As the Callers request makes them: per stack, with its stacks.
        let times: Vec<Duration> = (0..args.reps)
            .map(|_| {
                let started = Instant::now();
                let profile = store.profile_summed(&query, SumBy::Stack);
                black_box(report::callers(&profile, "main"));
                started.elapsed()
            })
            .collect();
        println!(
            "callers of main: {} (min {}, max {})",
            ms(median(&times)),
            ms(*times.iter().min().unwrap()),
            ms(*times.iter().max().unwrap())
        );
    }
    println!(
        "{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>13}",
        "request",
        "profile",
        "render",
        "total p50",
        "total min",
        "total max",
        "CPU per req",
        "peak RSS +"
    );
    // "+index": as the daemon makes them from a stack index kept between
    // requests (built here before the first, as a daemon's is after its
    // first request; later requests only add the stacks new since).
    // "/none": of the whole machine (`groupby none`), read as the daemon
    // reads the reports that show no threads: summed per stack.
    let formats = [
        ("profile", None, false),
        ("tree", Some(Format::Tree), false),
        ("tree+index", Some(Format::Tree), true),
        ("tree/none+index", Some(Format::Tree), true),
        ("flat", Some(Format::Flat), false),
        ("flat+index", Some(Format::Flat), true),
        ("flat/none+index", Some(Format::Flat), true),
        ("folded", Some(Format::Folded), false),
        ("folded+index", Some(Format::Folded), true),
        ("pprof", Some(Format::Pprof), false),
        ("pprof/none", Some(Format::Pprof), false),
        ("flamegraph", Some(Format::Flamegraph), false),
        ("flamegraph+index", Some(Format::Flamegraph), true),
        ("speedscope", Some(Format::Speedscope), false),
        ("speedscope+index", Some(Format::Speedscope), true),
        // What the web view asks for its flame graph.
        ("drawn/process+index", Some(Format::DrawnFolded), true),
    ];
    for (name, format, indexed) in formats {
        let format_name = name.split(['+', '/']).next().unwrap_or(name);
        if !wanted(name) && !wanted(format_name) {
            continue;
        }
        let options = format.map(|format| ReportOptions {
            format,
            groupby: match () {
                _ if name.contains("/none") => GroupBy::None,
                _ if name.contains("/process") => GroupBy::Process,
                _ => GroupBy::Auto,
            },
            maxsections: args.maxsections,
            ..ReportOptions::default()
        });
        let sum_by = match options
            .as_ref()
            .is_some_and(|options| !report::shows_threads(options))
        {
            true => SumBy::Stack,
            false => SumBy::ThreadAndStack,
        };
        let index = options
            .as_ref()
            .filter(|_| indexed)
            .map(|options| index_of(&store, options));
        let (mut profiles, mut totals) = (Vec::new(), Vec::new());
        let mut size = 0;
        let cpu_before = thread_cpu_time();
        let resting = reset_peak_rss();
        for _ in 0..args.reps {
            // As the API does: the profile and the report are dropped
            // before the reply is sent.
            let started = Instant::now();
            let profile = match &options {
                Some(options) => profilerd::service::answers::report_profile(
                    &store,
                    &query,
                    index.is_none(),
                    options,
                ),
                None => store.profile_summed(&query, sum_by),
            };
            profiles.push(started.elapsed());
            if let Some(options) = &options {
                let bytes = match &index {
                    Some(index) => report::render_indexed(&profile, options, index),
                    None => report::render(&profile, options),
                }
                .expect("renders");
                size = bytes.len();
                if let Some(dir) = &args.write {
                    let file = format!("report.{}", name.replace('/', "-"));
                    std::fs::write(dir.join(file), &bytes).expect("writes");
                }
            }
            drop(black_box(profile));
            totals.push(started.elapsed());
        }
        let cpu = (thread_cpu_time() - cpu_before) / args.reps as u32;
        let peak = own_status().vmhwm.unwrap_or(0).saturating_sub(resting);
        let renders: Vec<Duration> = totals.iter().zip(&profiles).map(|(t, p)| *t - *p).collect();
        println!(
            "{:<16} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12} {:>9} MiB   {} KiB",
            name,
            ms(median(&profiles)),
            ms(median(&renders)),
            ms(median(&totals)),
            ms(*totals.iter().min().unwrap()),
            ms(*totals.iter().max().unwrap()),
            ms(cpu),
            peak / 1024,
            size / 1024
        );
    }
}

/// Resets the process's peak RSS to its RSS now (`/proc/self/clear_refs`),
/// returning that RSS in KiB: what a request's peak is measured from.
fn reset_peak_rss() -> u64 {
    std::fs::write("/proc/self/clear_refs", "5").expect("resets the peak RSS");
    own_status().vmrss.unwrap_or(0)
}

/// This process's `/proc/self/status` (memory fields in KiB).
fn own_status() -> procfs::process::Status {
    procfs::process::Process::myself()
        .and_then(|process| process.status())
        .expect("reads /proc/self/status")
}

/// CPU time this thread has used, from `/proc/thread-self/stat` (in clock
/// ticks of 10 ms: meaningful over many requests). Unlike wall time, it
/// does not count the time other processes took the CPU.
fn thread_cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").expect("reads");
    // The fields after the command name (which may hold spaces); utime and
    // stime are the 14th and 15th fields.
    let fields: Vec<u64> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .take(2)
        .map(|field| field.parse().expect("a number"))
        .collect();
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// The stack index of `options`' reports over the whole store.
fn index_of(store: &Store, options: &ReportOptions) -> report::StackIndex {
    let key = report::StackIndexKey::of(options, false).expect("an indexed format");
    let mut index = report::StackIndex::new(key);
    profilerd::service::stack_indexes::extend_index(store, &mut index);
    assert_eq!(index.len(), store.stack_count(), "every stack indexed");
    index
}

/// The time to extend the tree's and the folded family's index of all but
/// the store's last stacks by those, for several numbers of them (medians
/// of `reps`).
fn print_extensions(store: &Store, reps: usize) {
    let stacks = store.stack_count();
    println!("{stacks} stacks; extending an index of the others by the last:");
    println!("{:<10} {:>12} {:>12}", "last", "tree ms", "folded ms");
    for last in [0, 10, 100, 1000, 3000, 10000] {
        let mut row = format!("{last:<10}");
        for format in [Format::Tree, Format::Folded] {
            let options = ReportOptions {
                format,
                groupby: GroupBy::None,
                ..ReportOptions::default()
            };
            let key = report::StackIndexKey::of(&options, false).expect("an indexed format");
            let mut times: Vec<f64> = (0..reps.max(1))
                .map(|_| {
                    let mut index = report::StackIndex::new(key);
                    let extend = |index: &mut report::StackIndex, to: usize| {
                        index
                            .extend(
                                store.generation(),
                                to,
                                |id| store.stack_locations(id),
                                |id| store.location(id),
                            )
                            .expect("indexed");
                    };
                    extend(&mut index, stacks - last);
                    let started = Instant::now();
                    extend(&mut index, stacks);
                    started.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            times.sort_by(f64::total_cmp);
            row += &format!(" {:>12.2}", times[times.len() / 2]);
        }
        println!("{row}");
    }
}

/// Digests of every format under several option sets, and of a selection;
/// each report made from a stack index, or of per-stack sums where it shows
/// no threads, is checked to be the same bytes.
fn print_digests(store: &Store, query: &Query) {
    let variants: Vec<(&str, ReportOptions)> = vec![
        ("default", ReportOptions::default()),
        (
            "thread,count,nokernel",
            ReportOptions {
                groupby: GroupBy::Thread,
                sortedby: SortedBy::Count,
                kernel: false,
                ..ReportOptions::default()
            },
        ),
        (
            "process,overhead,nocombine,maxdepth6,mincount3",
            ReportOptions {
                groupby: GroupBy::Process,
                sortedby: SortedBy::Overhead,
                combine: false,
                maxdepth: Some(6),
                mincount: 3,
                ..ReportOptions::default()
            },
        ),
        (
            "noisefloor2",
            ReportOptions {
                noisefloor: 2.0,
                ..ReportOptions::default()
            },
        ),
        (
            "none",
            ReportOptions {
                groupby: GroupBy::None,
                ..ReportOptions::default()
            },
        ),
    ];
    let selected = Query {
        selector: Selector {
            comms: vec!["kworker/0:1".to_owned(), "postgres".to_owned()],
            ..Selector::default()
        },
        start: query.start + Duration::from_secs(100),
        end: query.start + Duration::from_secs(250),
        ..query.clone()
    };
    let mut indexes: Vec<report::StackIndex> = Vec::new();
    for (window, query) in [("whole", query), ("selected", &selected)] {
        let profile = store.profile(query);
        let by_ids = store.profile_of_store_stacks(query, SumBy::ThreadAndStack);
        // Read summed as far as each report allows (see `owners_shown`).
        let sums: Vec<(SumBy, Profile, Profile)> = [SumBy::Stack, SumBy::CommandAndStack]
            .into_iter()
            .map(|sum_by| {
                let summed = store.profile_summed(query, sum_by);
                (sum_by, summed, store.profile_of_store_stacks(query, sum_by))
            })
            .collect();
        for (name, options) in &variants {
            // (pstats: the synthetic stacks hold no Python frame.)
            for format in Format::ALL.into_iter().filter(|&f| f != Format::Pstats) {
                let options = ReportOptions {
                    format,
                    ..options.clone()
                };
                let bytes = report::render(&profile, &options).expect("renders");
                let summed_as = match report::owners_shown(&options) {
                    OwnersShown::Threads | OwnersShown::Processes => None,
                    OwnersShown::Nobody => Some(SumBy::Stack),
                    OwnersShown::CommandsOrThreads => Some(SumBy::CommandAndStack),
                };
                let sums = sums.iter().find(|(sum_by, ..)| Some(*sum_by) == summed_as);
                if let Some((sum_by, summed, _)) = sums {
                    assert!(
                        report::render(summed, &options).expect("renders") == bytes,
                        "{window} {name} {format:?}: the report of sums {sum_by:?} differs"
                    );
                }
                if let Some(key) = report::StackIndexKey::of(&options, false) {
                    let index = match indexes.iter().position(|index| index.key() == key) {
                        Some(at) => &indexes[at],
                        None => {
                            indexes.push(index_of(store, &options));
                            &indexes[indexes.len() - 1]
                        }
                    };
                    let indexed = report::render_indexed(&by_ids, &options, index);
                    assert!(
                        indexed.expect("renders") == bytes,
                        "{window} {name} {format:?}: the report from the index differs"
                    );
                    if let Some((sum_by, _, summed_by_ids)) = sums {
                        let indexed = report::render_indexed(summed_by_ids, &options, index);
                        assert!(
                            indexed.expect("renders") == bytes,
                            "{window} {name} {format:?}: the report of sums {sum_by:?} from the \
                             index differs"
                        );
                    }
                }
                println!(
                    "{window:<8} {name:<48} {:<7} {:016x} {:>9} bytes",
                    format!("{format:?}"),
                    fnv1a(&bytes),
                    bytes.len()
                );
            }
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn median(times: &[Duration]) -> Duration {
    let mut sorted = times.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

/// SplitMix64: small, fast, and the same sequence everywhere.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn range(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index below `n`, `n` times a uniform number to the `power`.
    fn skewed_by(&mut self, n: usize, power: f64) -> usize {
        ((n as f64 * self.unit().powf(power)) as usize).min(n - 1)
    }
}

/// The code the samples run in: functions, their locations and a call graph.
struct Program {
    locations: Vec<Arc<SymbolizedLocation>>,
    /// The locations from `_start` down to the first function of a path.
    roots: Vec<u32>,
    functions: Vec<Function>,
    /// Kernel stacks a sample can end in, root first.
    kernel_stacks: Vec<Vec<u32>>,
}

struct Function {
    /// (callee, location of the call) pairs.
    calls: Vec<(usize, u32)>,
    /// Locations a sample can land on in the function itself: a few
    /// instructions on each of a few lines.
    leaves: Vec<u32>,
}

/// A call path: the call sites from the roots down, and the function it
/// ends in.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Path {
    calls: Vec<u32>,
    function: usize,
}

const FUNCTIONS: usize = 400;

/// A function's name and where its code is.
struct Source {
    /// Index of its binary.
    module: usize,
    name: Arc<str>,
    file: Option<Arc<str>>,
    first_line: u32,
}

impl Program {
    fn new(random: &mut Random) -> Self {
        let modules: Vec<(Arc<str>, BinaryKey)> = [
            "/usr/bin/service",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libssl.so.3",
        ]
        .iter()
        .enumerate()
        .map(|(inode, path)| {
            (
                Arc::from(*path),
                BinaryKey {
                    device: 8,
                    inode: inode as u64 + 100,
                },
            )
        })
        .collect();
        let files: Vec<Arc<str>> = (0..40)
            .map(|n| Arc::from(format!("/build/service/src/component_{}/part_{n}.c", n % 7)))
            .collect();
        let mut program = Program {
            locations: Vec::new(),
            roots: Vec::new(),
            functions: Vec::new(),
            kernel_stacks: Vec::new(),
        };
        let mut next_offset = 0x1000_u64;
        let mut add = |program: &mut Program, module: Option<usize>, frames: Vec<Frame>| -> u32 {
            next_offset += 0x4 + (next_offset % 7) * 2;
            let (kind, path, key) = match module {
                Some(module) => (
                    LocationKind::User,
                    modules[module].0.clone(),
                    LocationKey::User(modules[module].1, next_offset),
                ),
                None => (
                    LocationKind::Kernel,
                    Arc::from("[kernel]"),
                    LocationKey::Kernel(next_offset),
                ),
            };
            program.locations.push(Arc::new(SymbolizedLocation {
                key,
                location: Location {
                    kind,
                    module: path,
                    address: next_offset,
                    frames: frames.into(),
                },
            }));
            program.locations.len() as u32 - 1
        };
        let frame =
            |function: &Arc<str>, file: &Option<Arc<str>>, line: u32, inlined: bool| Frame {
                function: function.clone(),
                file: file.clone(),
                line,
                inlined,
            };
        for (module, function, file, line) in [
            (0, "_start", None, 0),
            (
                1,
                "__libc_start_main_impl",
                Some("../csu/libc-start.c"),
                360,
            ),
            (
                1,
                "__libc_start_call_main",
                Some("../sysdeps/nptl/libc_start_call_main.h"),
                58,
            ),
            (0, "main", Some("/build/service/src/main.c"), 41),
            (0, "serve", Some("/build/service/src/main.c"), 120),
        ] {
            let location = add(
                &mut program,
                Some(module),
                vec![frame(
                    &Arc::from(function),
                    &file.map(Arc::from),
                    line,
                    false,
                )],
            );
            program.roots.push(location);
        }

        // Functions each calling a few of the later ones, so paths end; most
        // in the binary, some in libraries without source files.
        let functions: Vec<Source> = (0..FUNCTIONS)
            .map(|n| {
                let module = match n % 20 {
                    0 | 1 => 1,
                    2 => 2,
                    _ => 0,
                };
                let name = Arc::from(match module {
                    0 => format!("component{}_handler_{n}", n % 7),
                    1 => format!("__libc_function_{n}"),
                    _ => format!("ssl_function_{n}"),
                });
                let file = (module == 0).then(|| files[n % files.len()].clone());
                Source {
                    module,
                    name,
                    file,
                    first_line: 10 + random.below(2000) as u32,
                }
            })
            .collect();
        // A location on `line` of function `n`, with 1 or 2 functions
        // inlined into it one time in five.
        let mut site = |program: &mut Program, n: usize, line: u32, random: &mut Random| -> u32 {
            let source = &functions[n];
            let mut frames = vec![frame(&source.name, &source.file, line, false)];
            if source.module == 0 && random.below(5) == 0 {
                for _ in 0..random.range(1, 2) {
                    let inlined = &functions[random.below(FUNCTIONS)];
                    let line = inlined.first_line + random.below(20) as u32;
                    frames.push(frame(&inlined.name, &inlined.file, line, true));
                }
            }
            add(program, Some(source.module), frames)
        };
        for (n, source) in functions.iter().enumerate() {
            let first_line = source.first_line;
            let mut leaves = Vec::new();
            for line in 0..random.range(2, 6) as u32 {
                let line = first_line + 2 + line * 3;
                for _ in 0..random.range(1, 4) {
                    leaves.push(site(&mut program, n, line, random));
                }
            }
            let remaining = FUNCTIONS - n - 1;
            let calls = (0..random.range(2, 5).min(remaining))
                .map(|_| {
                    let callee = n + 1 + random.below(remaining.min(60));
                    let line = first_line + 20 + random.below(40) as u32;
                    (callee, site(&mut program, n, line, random))
                })
                .collect();
            program.functions.push(Function { calls, leaves });
        }

        // Kernel: interrupts, faults and system calls, 3–7 frames deep.
        let kernel: Vec<u32> = (0..150)
            .map(|n| {
                let name = Arc::from(format!("kernel_function_{n}"));
                add(&mut program, None, vec![frame(&name, &None, 0, false)])
            })
            .collect();
        program.kernel_stacks = (0..60)
            .map(|_| {
                (0..random.range(3, 7))
                    .map(|_| kernel[random.below(kernel.len())])
                    .collect()
            })
            .collect();
        program
    }

    /// A random path 3–14 calls down the graph.
    fn path(&self, random: &mut Random) -> Path {
        let mut calls = Vec::new();
        let mut function = random.below(20);
        for _ in 0..random.range(3, 14) {
            let callees = &self.functions[function].calls;
            if callees.is_empty() {
                break;
            }
            let (callee, call) = callees[random.below(callees.len())];
            calls.push(call);
            function = callee;
        }
        Path { calls, function }
    }

    /// The stack of a sample on `path`: the roots, the calls, one of the
    /// leaf function's instructions, and kernel frames when `kernel`.
    fn stack(&self, path: &Path, leaf: usize, kernel: Option<usize>) -> Vec<u32> {
        let mut stack = self.roots.clone();
        stack.extend(&path.calls);
        let leaves = &self.functions[path.function].leaves;
        stack.push(leaves[leaf % leaves.len()]);
        if let Some(kernel) = kernel {
            stack.extend(&self.kernel_stacks[kernel]);
        }
        stack
    }
}

/// A thread and the paths it is drawn from.
struct Worker {
    thread: ThreadInfo,
    /// Where in the pool its paths start: long-lived threads run code of
    /// their own.
    pool_offset: usize,
}

/// Fills a store as ten minutes of the benchmark's storm would; returns it
/// and the start of its first bucket.
fn fill_store(args: &Args) -> (Store, SystemTime) {
    let mut random = Random(0x5eed);
    let program = Program::new(&mut random);
    let mut seen = HashSet::default();
    let paths: Vec<Path> = std::iter::repeat_with(|| program.path(&mut random))
        .filter(|path| seen.insert(path.clone()))
        .take(args.paths)
        .collect();
    drop(seen);

    let thread = |pid: u32, tid: u32, thread_name: &str, process_name: &str| ThreadInfo {
        pid,
        tid,
        thread_name: Arc::from(thread_name),
        process_name: Arc::from(process_name),
        uid: 0,
        gid: 0,
        protected: false,
        cgroup: Arc::from("/system.slice/service.service"),
    };
    // Long-lived threads that take a share of every second.
    let background: Vec<Worker> = [
        (0, 0, "swapper/0", "swapper/0"),
        (0, 0, "swapper/1", "swapper/1"),
        (412, 412, "kworker/0:1", "kworker/0:1"),
        (1, 1, "systemd", "systemd"),
        (530, 530, "systemd-journal", "systemd-journal"),
        (900, 900, "profilerd", "profilerd"),
        (900, 903, "profilerd-drain", "profilerd"),
        (900, 904, "profilerd-symbo", "profilerd"),
        (1200, 1200, "postgres", "postgres"),
        (1200, 1201, "postgres", "postgres"),
        (1300, 1300, "nginx", "nginx"),
        (1300, 1301, "nginx", "nginx"),
    ]
    .iter()
    .enumerate()
    .map(|(n, &(pid, tid, name, process))| Worker {
        thread: thread(pid, tid, name, process),
        pool_offset: n * 977,
    })
    .collect();

    let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    // As the daemon keeps them by default: 1 s drains merged into 10 s
    // buckets.
    let mut store = Store::new(StoreSettings {
        retention: Duration::from_secs(args.seconds),
        resolution: Duration::from_secs(10),
        memory_limit: 64 << 20,
    });
    let ticks_per_cpu = args.samples / (args.seconds * CPUS);
    // The distinct stacks as (path, leaf, kernel stack), numbered.
    let mut stack_ids: HashMap<(usize, usize, Option<usize>), usize> = HashMap::default();
    let mut stacks: Vec<Vec<Arc<SymbolizedLocation>>> = Vec::new();
    // What each CPU runs: the current short-lived process and when it ends.
    let mut next_pid = 20_000;
    let mut running: Vec<(Worker, u64)> = Vec::new();
    for second in 0..args.seconds {
        let mut counts: HashMap<(usize, usize), u64> = HashMap::default();
        for cpu in 0..CPUS as usize {
            if running.len() <= cpu || running[cpu].1 <= second {
                next_pid += 1 + random.below(20) as u32;
                let worker = Worker {
                    thread: thread(next_pid, next_pid, "service", "service"),
                    pool_offset: 0,
                };
                let end = second + random.range(1, 5) as u64;
                if running.len() <= cpu {
                    running.push((worker, end));
                } else {
                    running[cpu] = (worker, end);
                }
            }
            for _ in 0..ticks_per_cpu {
                // One tick in twenty goes to a long-lived thread; workers
                // below CPUS are the CPUs' short-lived processes.
                let worker = if random.below(20) == 0 {
                    CPUS as usize + random.below(background.len())
                } else {
                    cpu
                };
                let offset = match worker.checked_sub(CPUS as usize) {
                    Some(n) => background[n].pool_offset,
                    None => 0,
                };
                let path = (offset + random.skewed_by(paths.len(), args.path_skew)) % paths.len();
                let leaf = random.skewed_by(64, args.leaf_skew);
                let kernel = (random.below(100) < args.kernel_percent)
                    .then(|| random.below(program.kernel_stacks.len()));
                let next = stacks.len();
                let stack = *stack_ids.entry((path, leaf, kernel)).or_insert_with(|| {
                    stacks.push(
                        program
                            .stack(&paths[path], leaf, kernel)
                            .iter()
                            .map(|&location| program.locations[location as usize].clone())
                            .collect(),
                    );
                    next
                });
                *counts.entry((worker, stack)).or_default() += 1;
            }
        }
        let samples = counts
            .into_iter()
            .map(|((worker, stack), count)| SymbolizedSample {
                thread: match worker.checked_sub(CPUS as usize) {
                    Some(n) => background[n].thread.clone(),
                    None => running[worker].0.thread.clone(),
                },
                kind: SampleKind::CpuClock,
                stack: stacks[stack].clone(),
                count,
                weight: count * PERIOD_NS,
                allocation_id: 0,
                times_ns: Vec::new(),
            })
            .collect();
        store.insert(SymbolizedBatch {
            start: start + Duration::from_secs(second),
            end: start + Duration::from_secs(second + 1),
            samples,
            counters: [0; COUNTER_COUNT as usize],
        });
        // At the ceiling, the compaction the daemon's pipeline makes next.
        store.compact_when_due(SystemTime::now());
    }
    (store, start)
}
