//! A preview diff of a 10,000-line page against a 10,000-line proposal stays within a memory
//! bound: this test binary counts every allocation and checks the peak while the diff is built
//! (what the panel shows, and the downloadable whole).

#![cfg(feature = "ssr")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use nrllm_playground::server::diff::{shown_diff, unified_diff, MAX_SHOWN_LINES};

/// The system allocator, counting the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = IN_USE.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        IN_USE.fetch_sub(layout.size(), Ordering::SeqCst);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the peak bytes allocated above what was in use before.
fn peak_while<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = IN_USE.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    let out = f();
    (out, PEAK.load(Ordering::SeqCst) - base)
}

#[test]
fn ten_thousand_lines_against_ten_thousand_lines_diff_within_a_memory_bound() {
    // Every third line differs: a worst case for the panel (far too much to show).
    let before: String = (0..10_000)
        .map(|i| format!("line {i}: the quick brown fox jumps over the lazy dog\n"))
        .collect();
    let after: String = (0..10_000)
        .map(|i| {
            if i % 3 == 0 {
                format!("line {i}: a changed line with other words in it\n")
            } else {
                format!("line {i}: the quick brown fox jumps over the lazy dog\n")
            }
        })
        .collect();
    let input_bytes = before.len() + after.len();

    let (shown, peak) = peak_while(|| shown_diff(&before, &after));
    eprintln!("panel diff: input {input_bytes} bytes, peak {peak} bytes");
    assert!(shown.too_large);
    assert!(shown.lines.len() <= MAX_SHOWN_LINES);
    assert_eq!(shown.changed, 2 * 3334);
    // The diff of ~1 MB of text may take a few times its size, never hundreds of megabytes.
    let bound = 16 * input_bytes;
    assert!(
        peak < bound,
        "the panel's diff peaked at {peak} bytes (bound {bound}, input {input_bytes})"
    );

    let (whole, peak) = peak_while(|| unified_diff("page big", &before, &after));
    eprintln!("whole diff: input {input_bytes} bytes, peak {peak} bytes");
    assert_eq!(
        whole
            .lines()
            .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
            .count(),
        3334
    );
    assert!(
        peak < bound,
        "the downloadable diff peaked at {peak} bytes (bound {bound}, input {input_bytes})"
    );
}
