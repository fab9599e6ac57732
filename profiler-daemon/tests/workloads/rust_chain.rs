//! A known chain in a Rust program built in release mode without forced
//! frame pointers: main -> rust_drive -> rust_leaf. Runs for argv[1]
//! seconds (default: until killed).
use std::hint::black_box;
use std::time::{Duration, Instant};

#[inline(never)]
fn rust_leaf(n: u64) -> u64 {
    let mut acc = 0_u64;
    for i in 0..black_box(n) {
        acc = acc.wrapping_add(i.wrapping_mul(i) ^ (acc >> 3));
    }
    acc
}

#[inline(never)]
fn rust_drive(seconds: f64) -> u64 {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let mut total = 0_u64;
    while seconds <= 0.0 || Instant::now() < end {
        total = total.wrapping_add(rust_leaf(black_box(5_000_000)));
    }
    total
}

fn main() {
    let seconds = std::env::args()
        .nth(1)
        .and_then(|text| text.parse().ok())
        .unwrap_or(0.0);
    std::process::exit(i32::from(black_box(rust_drive(seconds)) == 42));
}
