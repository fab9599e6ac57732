//! Question 1d: unwind information for many distinct binaries. How much
//! the binaries of this machine would need (the daemon's own reader over
//! every ELF file in the system's program and library directories), and a
//! live run: the daemon at its defaults profiling 200 distinct copies of
//! Debian's python3 (about 490 KiB of unwind information each), two at a
//! time, each for 0.4 s — its unwind information held, against the
//! `unwind_info_limit` it must stay under, whole stacks, peak RSS.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use profilerd::unwind::UnwindSections;
use profilerd_client::v1;

use crate::{
    Plan,
    measure::{self, mib},
    report::{Table, verdict},
    tools::{Profiler, Tool},
};

/// The daemon's default `unwind_info_limit`.
const DEFAULT_LIMIT: u64 = 64 << 20;
const DISTINCT: usize = 200;

pub async fn run(plan: &Plan, out_dir: &Path) -> Result<Table> {
    let mut table = Table::new(
        "1d. Unwind information for many distinct binaries",
        &["binaries", "unwind info, MiB", "held by profilerd", "notes"],
    );
    census(&mut table);
    live(plan, out_dir, &mut table).await?;
    Ok(table)
}

/// The unwind information of every ELF file under the system directories.
fn census(table: &mut Table) {
    let mut sizes: Vec<u64> = Vec::new();
    for dir in [
        "/usr/bin",
        "/usr/sbin",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/libexec",
    ] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let is_file = entry.file_type().is_ok_and(|kind| kind.is_file());
            if !is_file || !is_elf(&path) {
                continue;
            }
            if let Ok(file) = std::fs::File::open(&path) {
                sizes.push(UnwindSections::read(file).bytes());
            }
        }
    }
    sizes.sort_unstable_by(|a, b| b.cmp(a));
    let largest: u64 = sizes.iter().take(DISTINCT).sum();
    let median = sizes.get(sizes.len() / 2).copied().unwrap_or(0);
    table.row(vec![
        format!(
            "the {DISTINCT} largest of this machine's {} ELF files",
            sizes.len()
        ),
        format!("{:.1}", mib(largest)),
        "—".to_owned(),
        format!(
            "largest {:.2} MiB; under the default limit ({} MiB): {}",
            mib(sizes.first().copied().unwrap_or(0)),
            DEFAULT_LIMIT >> 20,
            verdict(largest <= DEFAULT_LIMIT)
        ),
    ]);
    table.row(vec![
        format!("{DISTINCT} of median size"),
        format!("{:.1}", mib(median * DISTINCT as u64)),
        "—".to_owned(),
        format!("median {:.1} KiB", median as f64 / 1024.0),
    ]);
}

fn is_elf(path: &Path) -> bool {
    use std::io::Read as _;
    let mut magic = [0; 4];
    std::fs::File::open(path)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF")
}

async fn live(plan: &Plan, out_dir: &Path, table: &mut Table) -> Result<()> {
    let copies = if plan.quick { 20 } else { DISTINCT };
    let dir = out_dir.join("distinct-binaries");
    std::fs::create_dir_all(&dir)?;
    let python = std::fs::canonicalize("/usr/bin/python3").context("Debian's python3")?;
    let python_bytes = UnwindSections::read(std::fs::File::open(&python)?).bytes();
    let binaries: Vec<PathBuf> = (0..copies)
        .map(|index| {
            let copy = dir.join(format!("python-{index}"));
            std::fs::copy(&python, &copy)
                .with_context(|| format!("copying python3 to {}", copy.display()))?;
            Ok(copy)
        })
        .collect::<Result<_>>()?;
    let daemon_dir = out_dir.join("runs").join("distinct-binaries");
    let profiler = Profiler::start(Tool::Profilerd, 99, &daemon_dir, &[]).await?;
    profiler.settle().await?;
    let before = profiler
        .status()
        .await?
        .and_then(|s| s.unwinding)
        .unwrap_or_default();
    let mut peak_held = 0_u64;
    let mut peak_binaries = 0_u64;
    let started = Instant::now();
    for pair in binaries.chunks(2) {
        let running: Vec<Child> = pair
            .iter()
            .map(|binary| {
                Command::new(binary)
                    .args([
                        "-c",
                        "import time\nt = time.time()\n\
                         while time.time() - t < 0.4: sum(i * i for i in range(1000))",
                    ])
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting a copy of python3")
            })
            .collect::<Result<_>>()?;
        for mut child in running {
            while child.try_wait()?.is_none() {
                if let Some(unwinding) = profiler.status().await?.and_then(|s| s.unwinding) {
                    peak_held = peak_held.max(unwinding.bytes);
                    peak_binaries = peak_binaries.max(unwinding.binaries);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    let took = started.elapsed();
    profiler.settle().await?;
    let after = profiler
        .status()
        .await?
        .and_then(|s| s.unwinding)
        .unwrap_or_default();
    let peak_rss = measure::peak_rss_bytes(profiler.pid())?;
    profiler.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&daemon_dir);
    let (whole, copies_unwound) = unwound_between(&before, &after);
    let limit = after.limit;
    table.row(vec![
        format!("{copies} copies of python3 (distinct files), run two at a time for 0.4 s each"),
        format!(
            "{:.1} in all, run in {:.0} s",
            mib(python_bytes * copies as u64),
            took.as_secs_f64()
        ),
        format!(
            "at most {:.1} MiB of {} binaries (limit {:.0} MiB: {}); {} let go of",
            mib(peak_held),
            peak_binaries,
            mib(limit),
            // A process being sampled keeps its binaries: at most two run.
            verdict(peak_held <= limit + (2 << 20)),
            after.binaries_evicted
        ),
        format!(
            "{:.2}% of {copies_unwound} stacks whole; daemon peak RSS {:.1} MiB",
            100.0 * whole as f64 / copies_unwound.max(1) as f64,
            mib(peak_rss),
        ),
    ]);
    table.note(
        "Unwind information is read the first time a stack passes through a binary and held \
         until `unwind_info_limit` (default 64 MiB) is exceeded; then that of the binaries \
         sampled least recently (not within 2 s) is let go of, down to three quarters of the \
         limit, and read again if they are sampled again. Sizes are those the daemon holds: \
         `.eh_frame`, `.eh_frame_hdr` and `.debug_frame`, copied.",
    );
    Ok(())
}

/// Stacks unwound whole, and stacks unwound, between two statuses.
pub fn unwound_between(before: &v1::UnwindStatus, after: &v1::UnwindStatus) -> (u64, u64) {
    let stopped =
        |status: &v1::UnwindStatus| -> u64 { status.stopped.iter().map(|s| s.count).sum() };
    let complete = after.complete.saturating_sub(before.complete);
    let stopped = stopped(after).saturating_sub(stopped(before));
    (complete, complete + stopped)
}
