//! Tuned constants and switches of radix partitioning (fused and unfused multi-split).
//!
//! Each constant says what it controls, the value chosen, and the measurement that
//! chose it (BENCHMARKS.md or docs/benchmarks/history/).
//! [`crate::partition::PartitionOptions`]'s `Default` reads them, with the
//! switches' overrides.

super::switches! {
    "RIDGELINE_PARTITION_FUSED", Tuning, "0 | 1 (default: 1 on adapters with subgroups of 4..=32 lanes, 0 on CPU adapters)", "Whether partitions rank and scatter in the fused kernel (0: the rank kernel and per-column moves, also inside whole operators).";
    "RIDGELINE_PARTITION_SWG", Tuning, "power of two, 32..=256 (default 8 x the smallest subgroup size)", "Invocations per workgroup of the fused rank-and-scatter kernel.";
    "RIDGELINE_PARTITION_ITEMS", Tuning, "1..=16 (default 4 for digits of up to 4 bits, else 8)", "Rows per invocation and round of the fused rank-and-scatter kernel.";
    "RIDGELINE_PARTITION_PRELOAD", Tuning, "late | round | ahead (default round for digits of up to 4 bits, else ahead)", "When the fused kernel loads the moved columns' values.";
}

/// Invocations per workgroup of the histogram, rank and move kernels: 256, the
/// largest the rank kernel's ballot masks in workgroup memory hold (256 digits x
/// 256 / 32 words).
pub const WORKGROUP_SIZE: u32 = 256;

/// Rows per histogram tile: 16384, so the two `digits x tiles` matrices take `n / 16`
/// bytes each at 256 digits (3.1% of a lone `u32` key column together, under the 5%
/// scratch target; `scratch_is_small_and_errors_are_typed` checks it).
pub const TILE_ROWS: u32 = 16384;

/// Subgroups of the smallest size per workgroup of the fused kernel: 8 (so the
/// workgroup is 32..=256 invocations; RIDGELINE_PARTITION_SWG overrides the product).
pub const FUSED_SUBGROUPS: u32 = 8;

/// Registers per row the fused kernel may spend on preloaded column values: 6
/// (columns beyond it are read late, where they are staged).
pub const FUSED_PRELOAD_WORDS: u32 = 6;

/// Digits of at most this many bits take the narrow shape of the fused kernel
/// ([`FUSED_ITEMS_NARROW`] rows a round, preload at the round's start); wider digits
/// take [`FUSED_ITEMS_WIDE`] rows a round read a round ahead.
pub const FUSED_NARROW_DIGIT_BITS: u32 = 4;

/// Rows per invocation and round of the fused kernel for narrow digits: 4. On the
/// H100 (2^28 rows, u32 key + u32 payload, docs/benchmarks/history/session-22.md,
/// device ms of the whole partition) 2-way took 2.34 ms with 4 (8: 3.02, 16: 4.48).
pub const FUSED_ITEMS_NARROW: u32 = 4;

/// Rows per invocation and round of the fused kernel for wide digits: 8. On the H100
/// (docs/benchmarks/history/session-22.md) 32/64-way took 3.3/3.75 ms with 8 (16:
/// 4.9/5.1) and 256-way 7.0 ms with 8 rows read a round ahead (4: 9.5). 12 and 16
/// rows took 256-way to 6.35 and 5.65 ms in most processes, but in about a quarter
/// of the processes with 16 rows every kernel, the histogram included, then ran 2-5x
/// slower for the rest of the process (never seen with 8 rows in some 15
/// processes), so they stay opt-in (RIDGELINE_PARTITION_ITEMS).
pub const FUSED_ITEMS_WIDE: u32 = 8;
