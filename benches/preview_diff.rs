//! How long the approval panel's diff takes for a large page: 10,000 lines against 10,000 lines,
//! with every third line changed (too much to show: the panel counts and offers the download),
//! and with one line changed (the panel shows one hunk). Prints the median of 20 runs each.
//!
//! `cargo bench -p nrllm-playground --features ssr --bench preview_diff`

use std::time::{Duration, Instant};

use nrllm_playground::server::diff::{shown_diff, unified_diff};

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn time(label: &str, f: impl Fn()) {
    f();
    let samples: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            f();
            started.elapsed()
        })
        .collect();
    println!("{label:<52} median {:>9.2?}", median(samples));
}

fn main() {
    let line = |i: usize| format!("line {i}: the quick brown fox jumps over the lazy dog\n");
    let before: String = (0..10_000).map(line).collect();
    let every_third: String = (0..10_000)
        .map(|i| {
            if i % 3 == 0 {
                format!("line {i}: a changed line with other words in it\n")
            } else {
                line(i)
            }
        })
        .collect();
    let one_line: String = (0..10_000)
        .map(|i| {
            if i == 5_000 {
                "changed\n".to_owned()
            } else {
                line(i)
            }
        })
        .collect();
    time("panel diff, 10k vs 10k lines, every third changed", || {
        std::hint::black_box(shown_diff(&before, &every_third));
    });
    time("panel diff, 10k vs 10k lines, one line changed", || {
        std::hint::black_box(shown_diff(&before, &one_line));
    });
    time(
        "whole unified diff, 10k vs 10k, every third changed",
        || {
            std::hint::black_box(unified_diff("page", &before, &every_third));
        },
    );
}
