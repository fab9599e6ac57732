//! `cargo xtask bench`: what profilerd costs, measured side by side with no
//! profiler, `perf record -a -g` and bpftrace at the same frequencies, on
//! workloads built here, with the real daemon (release build) as root.
//!
//! One table per question — overhead on the profiled work, the profiler's
//! own CPU, memory at scale, losses, query latency, symbolization speed —
//! printed as measured and written to `target/bench/results.json` and
//! `target/bench/BENCHMARKS.md` (and, for a full run, `BENCHMARKS.md` at the
//! top of the repository). Every figure is the median of interleaved runs
//! (A B C … A B C …) with min and max; comparisons are ratios taken within a
//! round, since absolute times drift on shared machines. Nothing here
//! asserts a timing: targets are reported, met or MISSED.

mod allocs;
#[cfg(feature = "unwind-tables-prototype")]
mod designs;
mod ebpf;
mod latency;
mod machine;
mod measure;
mod offcpu;
mod overhead;
mod peek;
mod python;
mod render;
mod report;
mod scale;
mod soak;
mod symbolization;
mod tools;
mod unwind_info;
mod workloads;

use std::{path::PathBuf, time::Duration};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

use crate::{report::Table, tools::Tool};

/// How much to measure.
#[derive(Clone, Debug, Serialize)]
pub struct Plan {
    pub quick: bool,
    /// Rounds of the overhead runs; in each, every profiler's run follows a
    /// run without a profiler.
    pub rounds: usize,
    /// Target length of one overhead run without a profiler.
    pub run_seconds: f64,
    /// Profilers and frequencies of the overhead runs.
    pub configs: Vec<(Tool, u32)>,
    /// How long profilerd holds the storm before it is measured (its
    /// retention window).
    pub scale_window: Duration,
    /// Requests per format for the query latency.
    pub query_requests: usize,
    /// How long perf and bpftrace face the storm.
    pub compare_seconds: f64,
    /// Rounds of cold and warm symbolization.
    pub symbolize_rounds: usize,
}

impl Plan {
    fn full() -> Self {
        let mut configs = Vec::new();
        for tool in [
            Tool::Profilerd,
            Tool::ProfilerdFramePointers,
            Tool::Perf,
            Tool::Bpftrace,
        ] {
            for hz in [49, 99, 1000] {
                configs.push((tool, hz));
            }
        }
        Self {
            quick: false,
            rounds: 8,
            run_seconds: 4.0,
            configs,
            // Ten minutes of the default hour of retention, at the default
            // 10 s resolution.
            scale_window: Duration::from_secs(600),
            query_requests: 20,
            compare_seconds: 60.0,
            symbolize_rounds: 3,
        }
    }

    fn quick() -> Self {
        Self {
            quick: true,
            rounds: 2,
            run_seconds: 2.0,
            configs: vec![
                (Tool::Profilerd, 99),
                (Tool::Profilerd, 1000),
                (Tool::ProfilerdFramePointers, 99),
                (Tool::Perf, 99),
                (Tool::Bpftrace, 99),
            ],
            scale_window: Duration::from_secs(30),
            query_requests: 5,
            compare_seconds: 10.0,
            symbolize_rounds: 1,
        }
    }
}

/// Everything written to results.json.
#[derive(Serialize)]
struct Results {
    command: String,
    machine: machine::Machine,
    plan: Plan,
    tables: Vec<Table>,
}

struct Args {
    quick: bool,
    out_dir: PathBuf,
    /// Where to write the repository's BENCHMARKS.md (full runs; a run of
    /// one question replaces its own tables there).
    markdown: Option<PathBuf>,
    /// A large binary with debug information, for the symbolization question.
    symbolize_binary: PathBuf,
    command: String,
    /// Only this question (one of [`QUESTIONS`]).
    only: Option<String>,
}

/// The questions, in the order they are asked. A full run skips
/// `scale-hour` (question 5 over an hour's window), which takes over an
/// hour, and `soak` (question 10), which takes 40 minutes: each only when
/// asked for.
const QUESTIONS: [&str; 12] = [
    "overhead",
    "designs",
    "unwind_info",
    "scale",
    "scale-hour",
    "render",
    "symbolization",
    "peek",
    "offcpu",
    "allocs",
    "soak",
    "python",
];

fn parse_args() -> Result<Args> {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the crate lives in the workspace")?
        .to_owned();
    let mut args = Args {
        quick: false,
        out_dir: workspace.join("target/bench"),
        markdown: Some(workspace.join("BENCHMARKS.md")),
        symbolize_binary: workspace.join("target/debug/profilerd"),
        command: "cargo xtask bench".to_owned(),
        only: None,
    };
    let mut given = std::env::args().skip(1);
    while let Some(arg) = given.next() {
        let mut value = |name: &str| {
            given
                .next()
                .with_context(|| format!("{name} needs a value"))
        };
        match arg.as_str() {
            // cargo bench passes --bench to harness-less benchmarks.
            "--bench" => {}
            "--quick" => args.quick = true,
            "--out-dir" => args.out_dir = value("--out-dir")?.into(),
            "--symbolize-binary" => args.symbolize_binary = value("--symbolize-binary")?.into(),
            "--command" => args.command = value("--command")?,
            "--no-markdown" => args.markdown = None,
            "--only" => {
                let question = value("--only")?;
                if !QUESTIONS.contains(&question.as_str()) {
                    bail!("--only {question:?}: no such question; the questions are {QUESTIONS:?}");
                }
                args.only = Some(question);
            }
            other => bail!(
                "unknown argument {other:?}; accepted: --quick, --out-dir DIR, \
                 --symbolize-binary FILE, --command TEXT, --no-markdown, --only QUESTION"
            ),
        }
    }
    if args.quick {
        args.markdown = None;
    }
    Ok(args)
}

fn main() -> Result<()> {
    // In-process measurements (rendering, symbolization) run with the
    // allocator as the daemon tunes it.
    profilerd::memory::trim::tune();
    let args = parse_args()?;
    if !rustix::process::geteuid().is_root() {
        bail!("the benchmark loads eBPF programs and must run as root: use `cargo xtask bench`");
    }
    let plan = if args.quick {
        Plan::quick()
    } else {
        Plan::full()
    };
    std::fs::create_dir_all(&args.out_dir)?;
    let machine = machine::Machine::describe();
    println!("{}", machine.summary());
    let workloads = workloads::Workloads::build(&args.out_dir)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;

    let mut tables = Vec::new();
    let mut show = |table: Table| {
        println!("\n{}", table.markdown());
        tables.push(table);
    };
    let mut stats = Some(ebpf::enable_stats()?);
    let asked = |question: &str| args.only.as_ref().is_none_or(|only| only == question);
    if asked("overhead") {
        let overhead = runtime.block_on(overhead::run(&plan, &workloads, &args.out_dir))?;
        show(overhead.slowdown);
        show(overhead.profiler_cpu);
        show(overhead.unwinding);
    }
    if asked("designs") {
        #[cfg(feature = "unwind-tables-prototype")]
        show(runtime.block_on(designs::run(&plan, &args.out_dir))?);
        #[cfg(not(feature = "unwind-tables-prototype"))]
        {
            const WHY: &str = "the designs question measures design 2's prototype, built only \
                               with the unwind-tables-prototype feature (`cargo xtask bench` \
                               turns it on)";
            if args.only.is_some() {
                bail!("{WHY}");
            }
            println!("\nskipping designs: {WHY}");
        }
    }
    if asked("unwind_info") {
        show(runtime.block_on(unwind_info::run(&plan, &args.out_dir))?);
    }
    if asked("scale") {
        for table in runtime.block_on(scale::run(&plan, &workloads, &args.out_dir))? {
            show(table);
        }
    }
    // Over an hour on its own: only when asked for.
    if args.only.as_deref() == Some("scale-hour") {
        for table in runtime.block_on(scale::run_hour(&plan, &workloads, &args.out_dir))? {
            show(table);
        }
    }
    if asked("render") {
        show(render::run(&plan)?);
    }
    if asked("symbolization") {
        show(symbolization::run(&plan, &args.symbolize_binary)?);
    }
    if asked("peek") {
        show(runtime.block_on(peek::run(&plan, &workloads, &args.out_dir))?);
    }
    if asked("python") {
        show(runtime.block_on(python::run(&plan, &args.out_dir))?);
    }
    if asked("offcpu") {
        // Question 8 turns them on only where it reads them.
        drop(stats.take());
        for table in runtime.block_on(offcpu::run(&plan, &args.out_dir))? {
            show(table);
        }
    }
    if asked("allocs") {
        // The uprobes' cost is measured without the kernel's statistics.
        drop(stats.take());
        let allocs = allocs::run(&plan, &workloads.malloc_pairs, &args.out_dir);
        for table in runtime.block_on(allocs)? {
            show(table);
        }
    }

    if args.only.as_deref() == Some("soak") {
        for table in runtime.block_on(soak::run(&plan, &workloads, &args.out_dir))? {
            show(table);
        }
    }

    let results = Results {
        command: args.command.clone(),
        machine,
        plan,
        tables,
    };
    let json = args.out_dir.join("results.json");
    std::fs::write(&json, serde_json::to_string_pretty(&results)?)?;
    let markdown = benchmarks_markdown(&results);
    std::fs::write(args.out_dir.join("BENCHMARKS.md"), &markdown)?;
    println!("\nresults: {}", json.display());
    if let Some(path) = &args.markdown {
        let markdown = match &args.only {
            None => markdown,
            Some(question) => {
                let existing = std::fs::read_to_string(path).unwrap_or_default();
                let note = format!(
                    "Measured alone with `{} --only {question}` on {}, profilerd at {}.",
                    results.command, results.machine.date, results.machine.commit
                );
                let tables = results.tables.iter().map(|table| {
                    let mut table = table.clone();
                    table.note(note.clone());
                    table
                });
                replace_tables(&existing, tables)
            }
        };
        std::fs::write(path, &markdown)?;
        println!("tables: {}", path.display());
    }
    Ok(())
}

/// `markdown` (a BENCHMARKS.md) with each of `tables` in place of the
/// section of the same title, or, when it has none, after the last section
/// whose label ("1b" of "### 1b. …") comes before the table's.
fn replace_tables(markdown: &str, tables: impl Iterator<Item = Table>) -> String {
    let mut sections: Vec<String> = Vec::new();
    for line in markdown.split_inclusive('\n') {
        match sections.last_mut() {
            Some(section) if !line.starts_with("### ") => section.push_str(line),
            _ => sections.push(line.to_owned()),
        }
    }
    let title = |section: &str| -> Option<String> {
        let heading = section.lines().next()?.strip_prefix("### ")?;
        Some(heading.trim().to_owned())
    };
    let label = |title: &str| -> (u32, String) {
        let label = title.split('.').next().unwrap_or_default();
        let digits: String = label.chars().take_while(char::is_ascii_digit).collect();
        (
            digits.parse().unwrap_or(u32::MAX),
            label[digits.len()..].to_owned(),
        )
    };
    for table in tables {
        let text = format!("{}\n", table.markdown());
        if let Some(section) = sections
            .iter_mut()
            .find(|section| title(section).as_deref() == Some(table.title.as_str()))
        {
            *section = text;
            continue;
        }
        let wanted = label(&table.title);
        let after = sections
            .iter()
            .rposition(|section| title(section).is_some_and(|t| label(&t) < wanted))
            .map_or(sections.len(), |index| index + 1);
        sections.insert(after, text);
    }
    sections.concat()
}

fn benchmarks_markdown(results: &Results) -> String {
    let mut text = format!(
        "# Benchmarks\n\n\
         Measured with `{}` on {}.\n\n\
         {}\n\n\
         Each figure is the median of interleaved runs with min–max in parentheses; \
         each profiler's run follows a run without a profiler, and ratios are taken against \
         that run. `perf record` is `perf record -F <hz> -a -g`, \
         bpftrace is `bpftrace -e 'profile:hz:<hz> {{ @[ustack, kstack, comm] = count(); }}'`, \
         both at the same frequency as profilerd.\n\n",
        results.command,
        results.machine.date,
        results.machine.summary(),
    );
    for table in &results.tables {
        text.push_str(&table.markdown());
        text.push('\n');
    }
    text
}
