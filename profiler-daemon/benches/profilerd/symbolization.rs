//! Question 6: how fast profilerd's symbolizer turns addresses into
//! functions, files and lines for a large binary with debug information
//! (the daemon's own debug build), cold (first sight of the binary) and
//! warm, next to binutils' addr2line on the same addresses.

use std::{
    io::Write as _,
    ops::ControlFlow,
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::{Instant, SystemTime},
};

use anyhow::{Context as _, Result, bail};
use blazesym::{
    SymType,
    inspect::{Inspector, source::Elf, source::Source},
};
use profiler_common::SampleKind;
use profilerd::{
    profile::ThreadInfo,
    symbols::processes::{Binary, NormalizedBatch, NormalizedSample, UserAddress},
    symbols::symbolizer::Symbolizer,
};

use crate::{Plan, measure::Spread, report::Table};

/// A function's entry, as a file offset and as a virtual address.
struct Function {
    file_offset: u64,
    address: u64,
    size: u64,
}

pub fn run(plan: &Plan, binary: &Path) -> Result<Table> {
    if !binary.exists() {
        bail!(
            "{} is missing: the symbolization question needs the daemon's debug build \
             (`cargo xtask bench` builds it)",
            binary.display()
        );
    }
    let functions = functions(binary)?;
    let size_mib = std::fs::metadata(binary)?.len() as f64 / (1024.0 * 1024.0);
    println!(
        "\n== symbolization: {} functions of {} ({size_mib:.0} MiB)",
        functions.len(),
        binary.display()
    );
    let limit = if plan.quick { 20_000 } else { usize::MAX };
    let entries: Vec<&Function> = functions.iter().take(limit).collect();
    // Two addresses per function: its entry and a point inside it.
    let first: Vec<u64> = entries.iter().map(|f| f.file_offset).collect();
    let second: Vec<u64> = entries.iter().map(|f| f.file_offset + f.size / 2).collect();
    let opened = Binary::open(binary)?;

    let mut cold = Vec::new();
    let mut warm_parsed = Vec::new();
    let mut warm_cached = Vec::new();
    for _ in 0..plan.symbolize_rounds {
        let mut symbolizer = Symbolizer::new();
        cold.push(rate(&mut symbolizer, &opened, &first));
        warm_parsed.push(rate(&mut symbolizer, &opened, &second));
        warm_cached.push(rate(&mut symbolizer, &opened, &first));
    }
    let addr2line_addresses: Vec<u64> = entries
        .iter()
        .take(if plan.quick { 2_000 } else { 20_000 })
        .map(|f| f.address + f.size / 2)
        .collect();
    let addr2line = addr2line_rate(binary, &addr2line_addresses)?;

    let mut table = Table::new(
        "6. Symbolization of a large binary with debug information",
        &[
            "symbolizer",
            "case",
            "addresses",
            "frames per second",
            "addresses per second",
        ],
    );
    for (case, rates) in [
        ("cold: first sight of the binary", &cold),
        ("warm: binary parsed, new addresses", &warm_parsed),
        ("warm: addresses seen before", &warm_cached),
    ] {
        let frames: Vec<f64> = rates.iter().map(|rate| rate.frames_per_second).collect();
        let addresses: Vec<f64> = rates.iter().map(|rate| rate.addresses_per_second).collect();
        table.row(vec![
            "profilerd (blazesym)".to_owned(),
            case.to_owned(),
            first.len().to_string(),
            Spread::of(&frames).show(0),
            Spread::of(&addresses).show(0),
        ]);
    }
    table.row(vec![
        "addr2line -f -i -C (binutils)".to_owned(),
        "cold, one process".to_owned(),
        addr2line_addresses.len().to_string(),
        format!("{:.0}", addr2line.frames_per_second),
        format!("{:.0}", addr2line.addresses_per_second),
    ]);
    table.note(format!(
        "{} ({size_mib:.0} MiB, {} functions), the daemon's debug build; addresses are function \
         entries and midpoints, symbolized in one batch the way the daemon does after a drain; \
         frames count inlined functions. {} round(s).",
        binary.display(),
        functions.len(),
        plan.symbolize_rounds
    ));
    Ok(table)
}

/// The binary's functions with a size, in address order.
fn functions(binary: &Path) -> Result<Vec<Function>> {
    let mut elf = Elf::new(binary);
    elf.debug_syms = false;
    let mut functions = Vec::new();
    Inspector::new()
        .for_each(&Source::Elf(elf), |symbol| {
            if symbol.sym_type == SymType::Function
                && let (Some(file_offset), Some(size)) = (symbol.file_offset, symbol.size)
                && size > 1
            {
                functions.push(Function {
                    file_offset,
                    address: symbol.addr,
                    size: size as u64,
                });
            }
            ControlFlow::Continue(())
        })
        .with_context(|| format!("listing the functions of {}", binary.display()))?;
    functions.sort_by_key(|function| function.address);
    functions.dedup_by_key(|function| function.address);
    Ok(functions)
}

struct Rate {
    frames_per_second: f64,
    addresses_per_second: f64,
}

fn rate(symbolizer: &mut Symbolizer, binary: &Arc<Binary>, offsets: &[u64]) -> Rate {
    let thread = ThreadInfo {
        pid: 1,
        tid: 1,
        thread_name: Arc::from("bench"),
        process_name: Arc::from("bench"),
        uid: 0,
        gid: 0,
        protected: false,
        cgroup: Arc::from("/"),
    };
    let batch = NormalizedBatch {
        start: SystemTime::now(),
        end: SystemTime::now(),
        samples: offsets
            .iter()
            .map(|&offset| NormalizedSample {
                thread: thread.clone(),
                kind: SampleKind::CpuClock,
                flags: 0,
                user: vec![UserAddress::File {
                    binary: binary.clone(),
                    offset,
                }],
                user_stop: None,
                kernel: Arc::from([]),
                count: 1,
                weight: 1,
                allocation_id: 0,
                times_ns: Vec::new(),
            })
            .collect(),
        counters: Default::default(),
    };
    let started = Instant::now();
    let symbolized = symbolizer.symbolize(batch);
    let seconds = started.elapsed().as_secs_f64();
    let frames: usize = symbolized
        .samples
        .iter()
        .flat_map(|sample| &sample.stack)
        .map(|location| location.location.frames.len())
        .sum();
    Rate {
        frames_per_second: frames as f64 / seconds,
        addresses_per_second: offsets.len() as f64 / seconds,
    }
}

fn addr2line_rate(binary: &Path, addresses: &[u64]) -> Result<Rate> {
    let started = Instant::now();
    let mut child = Command::new("addr2line")
        .args(["-f", "-i", "-C", "-a", "-e"])
        .arg(binary)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running addr2line (binutils)")?;
    let mut stdin = child.stdin.take().context("addr2line's input")?;
    let input: String = addresses
        .iter()
        .map(|address| format!("{address:#x}\n"))
        .collect();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let output = child.wait_with_output()?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("the writer panicked"))??;
    let seconds = started.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&output.stdout);
    // -a prints each address on a line of its own, then a function line and
    // a file:line line per frame.
    let lines = text.lines().count();
    let frames = lines.saturating_sub(addresses.len()) / 2;
    Ok(Rate {
        frames_per_second: frames as f64 / seconds,
        addresses_per_second: addresses.len() as f64 / seconds,
    })
}
