//! Tuned constants and switches of SampleSelect (exact and approximate selection, top-k, grouped regions).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).
//!
//! Profiling output (no switches; `RUST_LOG=<target>=debug`):
//! - `ridgeline::profile::select`: host steps slower than 0.1 ms and the wall time
//!   of every phase (each phase then waits for the device, which serialises them).
//! - `ridgeline::profile::select::timestamps`: [`SelectOptions::timestamps`] on by
//!   default, so `SelectStats::gpu_ms` is the kernels' time by timestamp queries.
//! - `ridgeline::profile::select::passes`: every dispatch of a chain in its own
//!   timed pass, the times logged (adapters with timestamp queries).
use crate::scan::Int64Path;
use crate::select::SelectOptions;

super::switches! {
    "RIDGELINE_APPROX_ITEMS", Tuning, "1..=32 (default 4)", "Keys per invocation and chunk of the one-pass approximate selection (SelectOptions::approx_hist_items).";
    "RIDGELINE_APPROX_GROUPS", Tuning, "1..=65535 (default 8192)", "Most workgroups of the one-pass approximate selection (SelectOptions::approx_hist_groups).";
}

/// Invocations per workgroup of every selection kernel but the subgroup sample
/// sort (256).
pub const WG: u32 = 256;
/// Keys per invocation of the filter, window and top-k kernels (16: 4096 keys a
/// workgroup).
pub const ITEMS: u32 = 16;
/// Keys per invocation of the count kernels: 16384 keys a workgroup, so the flush
/// of the histogram (up to 2047 global atomics) is amortised over many keys.
pub const CITEMS: u32 = 64;
/// Default cap on the sample size S ([`SelectOptions::max_sample`]): 4096 keys,
/// sorted in one workgroup (16 KiB of workgroup memory for `u32`, 32 KiB for
/// `u64`); 1024 buckets with oversampling 4.
pub const MAX_SAMPLE: u32 = 4096;
/// Default seed of the sample positions ([`SelectOptions::seed`]).
pub const SEED: u32 = 0x2545_f491;
/// Default rank error of an approximate selection, as a fraction of `n`
/// ([`SelectOptions::max_error_fraction`]): 0.1%.
pub const MAX_ERROR_FRACTION: f64 = 0.001;
/// Distinct ranks served by one descent. Each distinct target bucket is extracted
/// (about 1.25 n / B keys for a random rank with B = 1024 buckets), so 64 ranks keep
/// the extracted keys near 8% of the input; more ranks run in further descents.
pub const RANKS_PER_DESCENT: usize = 64;
/// The 4-bit oracle is used for tasks with at most this many distinct ranks
/// ([`SelectOptions::oracle_max_ranks`]): 4. On lavapipe (`bench_select`, 2^24
/// uniform u32, 2 shared cores) the oracle took the median from 1780-2490 ms to
/// 1510-2040 ms, and with it for every task 9 deciles went from 2255 to 2465 ms.
pub const ORACLE_MAX_RANKS: usize = 4;
/// Inputs of at least this many keys start with the bracketing level
/// ([`SelectOptions::bracket_min`]): 2^25. On the H100 the bracketing level pays
/// from about 2^25-2^26 keys and costs up to 0.5 ms below 2^23 (one more readback
/// than it saves).
pub const BRACKET_MIN: usize = 1 << 25;
/// How many standard deviations of the sample rank a bracketing window (and a
/// chain's window) reaches on either side of the target: 3 (the chance that a rank
/// falls outside its window is about 2.7e-3; then the call reruns without
/// bracketing).
pub const BRACKET_SIGMAS: f64 = 3.0;
/// Largest share of the input that the bracketing windows may hold together: 0.2
/// (with the later levels' scratch, auxiliary memory stays under a quarter of the
/// input).
pub const BRACKET_MAX_SHARE: f64 = 0.2;
/// Selections of one narrow rank range over at least this many keys run as a chain
/// ([`SelectOptions::chain_min`]): 2^20. On the H100 the chain was as fast as the
/// host-driven descent at 2^20-2^22 keys and faster above
/// (docs/benchmarks/history/session-10.md).
pub const CHAIN_MIN: usize = 1 << 20;
/// Largest distance between the smallest and the largest rank of a chain: 64.
pub const CHAIN_MAX_SPAN: u64 = 64;
/// Sample size of a chain's levels after the first: 1024 (their regions hold a few
/// percent of the input, and a sort of 1024 keys costs a fraction of one of 4096).
pub const CHAIN_LATER_SAMPLE: u32 = 1024;
/// Approximate selections over at least this many keys first try one histogram
/// pass ([`SelectOptions::approx_hist_min`]): 2^20. On the H100
/// (docs/benchmarks/history/session-13.md) the pass with subgroup staging answered
/// an approximate median in 0.66-0.83 ms at 2^28 keys against 1.3-1.6 ms for the
/// (exact) chain, and in 0.35-0.6x the chain's time at 2^20-2^27; the key-cell
/// pass in 0.50 ms (docs/benchmarks/history/session-14.md).
pub const APPROX_HIST_MIN: usize = 1 << 20;
/// Keys per invocation and chunk of the one pass: 4 (0.77 ms a median at 2^28 on
/// the H100 against 0.87 with 2 and 0.93 with 8, interleaved calls of one run,
/// docs/benchmarks/history/session-13.md; the key-cell pass: 4 and 8 within noise
/// of each other over three runs, 2 slower, docs/benchmarks/history/session-14.md). Switch
/// `RIDGELINE_APPROX_ITEMS`.
pub const APPROX_ITEMS: u32 = 4;
/// Most workgroups of the one pass (each loops over chunks): 8192, enough to fill a
/// large GPU, few enough that the per-workgroup histogram flushes stay a small part
/// of the pass. Switch `RIDGELINE_APPROX_GROUPS`.
pub const APPROX_GROUPS: u32 = 8192;
/// Default half-width of the one pass's windows, in standard deviations of the
/// sample rank: 3 (a window misses its rank about once in 300 calls, which the
/// chain then answers; 5% faster than 4 at 2^28 on the H100,
/// docs/benchmarks/history/session-13.md).
pub const APPROX_SIGMAS: f64 = 3.0;
/// Default half-width of the key-cell pass's windows: 4 sd (a window misses its
/// rank about once in 15,000 calls; as fast as 2.5 or 3 at 2^28 on the H100,
/// docs/benchmarks/history/session-14.md).
pub const APPROX_CELL_SIGMAS: f64 = 4.0;
/// Cells of key space the key-cell pass holds, all windows together: 1024 (4 KiB of
/// workgroup memory).
pub const APPROX_CELLS: u64 = 1024;
/// Host keys mapped to order keys in parallel from this many values (2^16).
pub const BULK_MIN: usize = 1 << 16;
/// Grouped selection: CPU regions up to this size are sorted whole; larger ones use
/// the parallel selection (2^12).
pub const REGION_SORT_MAX: usize = 1 << 12;

/// Keys per invocation of the one pass: `RIDGELINE_APPROX_ITEMS`, else [`APPROX_ITEMS`].
pub fn approx_items() -> u32 {
    crate::tuning::parse::<u32>("RIDGELINE_APPROX_ITEMS").filter(|&v| v > 0).unwrap_or(APPROX_ITEMS)
}

/// Most workgroups of the one pass: `RIDGELINE_APPROX_GROUPS`, else [`APPROX_GROUPS`].
pub fn approx_groups() -> u32 {
    crate::tuning::parse::<u32>("RIDGELINE_APPROX_GROUPS").filter(|&v| v > 0).unwrap_or(APPROX_GROUPS)
}

impl Default for SelectOptions {
    fn default() -> Self {
        SelectOptions {
            int64: Int64Path::Auto,
            max_error_fraction: MAX_ERROR_FRACTION,
            seed: SEED,
            max_sample: MAX_SAMPLE,
            max_filter_bytes: 0,
            oracle: true,
            oracle_max_ranks: ORACLE_MAX_RANKS,
            bracket_min: BRACKET_MIN,
            bracket_sigmas: BRACKET_SIGMAS,
            chain_min: CHAIN_MIN,
            approx_hist_min: APPROX_HIST_MIN,
            approx_hist_subgroups: true,
            approx_hist_items: approx_items(),
            approx_key_cells: true,
            approx_cell_sigmas: APPROX_CELL_SIGMAS,
            approx_hist_groups: approx_groups(),
            approx_sigmas: APPROX_SIGMAS,
            subgroup_sort: true,
            timestamps: crate::tuning::profiling!("ridgeline::profile::select::timestamps"),
        }
    }
}
