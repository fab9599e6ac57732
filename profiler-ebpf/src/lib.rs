//! Empty on purpose: the programs live in the `profiler` binary (src/main.rs),
//! built for `bpfel-unknown-none` by profiler-daemon's build script.
#![no_std]
