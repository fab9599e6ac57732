//! The status report's lines about memory: the budget, what each part of
//! the daemon holds against its share and let go of, what the kernel
//! counts; and the JIT names read from perf maps.

use std::fmt::Write as _;

use profilerd_client::v1;

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

/// The memory lines, or none from a daemon that does not say.
pub fn memory_status(memory: Option<&v1::MemoryStatus>) -> String {
    let Some(memory) = memory else {
        return String::new();
    };
    let mut text = format!(
        "memory:     resident {} MiB (anonymous {}, files {}; the most so far {}), heap {} MiB; \
         budget {} MiB: the program ~{} and the kernel's ring buffers {} first, then\n",
        mib(memory.resident_bytes),
        mib(memory.resident_anonymous_bytes),
        mib(memory.resident_file_bytes),
        mib(memory.resident_peak_bytes),
        mib(memory.heap_bytes),
        mib(memory.budget_bytes),
        mib(memory.program_bytes),
        mib(memory.kernel_buffer_bytes),
    );
    let width = memory
        .parts
        .iter()
        .map(|part| part.name.len())
        .max()
        .unwrap_or(0);
    for part in &memory.parts {
        let _ = writeln!(
            text,
            "            {name:<width$}  {held:>7} of {share:>7} MiB; let go of: {evicted} {unit}",
            name = part.name,
            held = mib(part.held_bytes),
            share = mib(part.share_bytes),
            evicted = part.evicted,
            unit = part.evicted_unit,
        );
    }
    text
}

/// The JIT names line, or none from a daemon that does not say.
pub fn jit_status(jit: Option<&v1::JitStatus>) -> String {
    let Some(jit) = jit else {
        return String::new();
    };
    let refused: Vec<String> = jit
        .refused
        .iter()
        .filter(|refused| refused.cause != "none")
        .map(|refused| format!("{}={}", refused.cause, refused.count))
        .collect();
    format!(
        "jit names:  {} processes, {} names held; {} MiB of perf maps read, {} too long lines, \
         {} maps past 64 MiB; refused: {}\n",
        jit.processes,
        jit.names,
        mib(jit.bytes_read),
        jit.lines_too_long,
        jit.files_cut,
        if refused.is_empty() {
            "none".to_owned()
        } else {
            refused.join(", ")
        }
    )
}
