//! Partitioning: the rows of a batch's columns regrouped so that every partition
//! is contiguous, keeping the input order inside each partition (a **stable**
//! partition), on the GPU (shaders/partition/) and on the CPU.
//!
//! # Partition ids ([`PartitionFn`])
//!
//! * [`PartitionFn::Radix`]: bits `shift .. shift + bits` of one `u32`/`u64` key
//!   (fan-out `2^bits`, `bits <= 24`); NULL keys go to partition 0.
//! * [`PartitionFn::Direct`]: the `u32` key itself is the id (group ids, dictionary
//!   codes); keys `>= fanout` are clamped to `fanout - 1`; NULL keys go to 0.
//! * [`PartitionFn::Hash`]: a 32-bit hash of one or more `u32`/`u64` key columns
//!   modulo the fan-out. The hash starts at 0 and folds every key word in with
//!   [`hash_combine`] (a boost-style combine followed by the murmur3 32-bit
//!   finalizer; 64-bit keys contribute their low then their high word); a NULL key
//!   contributes the fixed word [`NULL_TAG`] (twice for a 64-bit key), so equal
//!   keys, NULLs included, always land in the same partition. The same function
//!   runs in WGSL (shaders/partition/common.wgsl) and in Rust ([`partition_ids`]).
//!
//! # GPU algorithm
//!
//! 1. With one key column and one digit pass (fan-out at most 256), the digit
//!    kernels below compute every row's partition id from the key as they read
//!    it (no ids array: on the H100 that saved the 0.7 ms the ids kernel took
//!    at 2^27 rows). Otherwise one kernel first computes every row's id into a
//!    `u32` scratch array (hash: one dispatch per key column, folding into the
//!    running hash).
//! 2. Per pass over an 8-bit digit of the id (LSD order; fan-out `F` needs
//!    `ceil(log256 F)` passes, one for `F <= 256`): per tile of
//!    [`PartitionOptions::tile_rows`] rows a histogram of the digit in workgroup
//!    memory (workgroup atomics), written partition-major (`counts[b * W + w]` for
//!    digit `b` and tile `w`); the crate's GPU exclusive scan ([`crate::scan`]) of
//!    that matrix gives every (digit, tile) its first output row; a rank kernel
//!    gives every row its stable destination (rows walk the tile in chunks of one
//!    workgroup in order; the rank inside a chunk is a popcount over a per-digit
//!    ballot mask in workgroup memory, plus the digit's running count in the tile).
//!    Multi-pass: the ids and the row numbers are moved along each pass; at the
//!    end the composed permutation is inverted, so every column is scattered once.
//! 3. Every column (4-byte words; 8-byte columns as `vec2<u32>`; validity bits by
//!    `atomicOr` into the zeroed output bitmap) is scattered by the destinations.
//!
//!    **Fused** ([`PartitionOptions::fused`]; the default on GPUs with subgroups
//!    of 4..=32 lanes, not on CPU adapters, where it measured slower): step 2's
//!    rank and step 3 are one kernel (shaders/partition/scatter.wgsl). Per round of `8 x subgroup size x 4`
//!    rows of a tile it ranks the rows by subgroup ballots, sorts them by digit
//!    in workgroup memory and writes every partition's rows of the round as one
//!    run, so stores are coalesced instead of one per row at random, and no
//!    destinations array is written or read. Up to 8 columns share a dispatch
//!    (as the storage bindings allow). With one key column and one pass the ids
//!    come from the key; otherwise from the ids array, and every pass moves all
//!    columns plus the ids (LSD, stable), through temporary copies of the
//!    columns between passes (so the multi-pass per-row scratch is the ids twice
//!    plus one or two copies of the columns, instead of the permutation arrays).
//!    On the H100 at 2^28 rows (u32 key + u32 payload) it takes 6.1 / 6.0 / 9.9
//!    / 22.7 ms at 2 / 16 / 256 / 4096 partitions where the rank kernel and the
//!    moves take 7.7 / 8.9 / 15.9 / 59.7 ms (docs/benchmarks/history/session-20.md).
//! 4. The fan-out + 1 offsets come from the scanned matrix (one pass) or from the
//!    sorted ids (several passes), and are read back (one synchronisation).
//!
//! Every step is deterministic, so the output equals [`partition_reference`]
//! exactly. All dispatches go into one compute pass of one submission.
//!
//! # Segments
//!
//! Inputs may span several segments (see [`DeviceArray`]); outputs have the
//! input's `seg_rows`. Tiles never straddle segments. A scatter writes anywhere in
//! the output, so each (input segment, output segment) pair is one dispatch that
//! keeps only the rows landing in its output segment: `S^2` dispatches for `S`
//! segments (1 below 2^28 rows with the default segmentation).
//!
//! # Scratch ([`PartitionStats`])
//!
//! Histograms and offsets: two `u32` matrices of `digits * tiles` (with the
//! default 16384-row tiles and 256 digits, `n / 16` bytes each: together 3.1% of
//! a lone `u32` key column, 1.6% of a key plus one `u32` payload), the scan's
//! look-back state and the `F + 1` offsets. Per-row scratch (not in the
//! histogram figure, reported apart): none for the fused kernel with ids from
//! the key; the fused passes over ids keep two ids arrays (8 bytes a row) plus
//! one copy of the columns (two for three passes); the unfused path keeps the
//! ids and the destinations (8 bytes a row), plus for several passes the moved
//! ids, row numbers and the composed permutation (16 more bytes a row).
//!
//! # CPU
//!
//! [`partition_cpu`]: rayon over chunks of rows (a histogram per chunk, the
//! partition-major matrix of chunk histograms prefix-summed by
//! [`crate::cpu_scan::scan`], the cache-partitioned SIMD scan of Zhang,
//! Wang & Ross, then every chunk scatters its rows in order). Identical output to
//! [`partition_reference`] (sequential counting sort) and the GPU.
//!
//! # Layout
//!
//! * this module: the contract ([`PartitionFn`], the hash, [`NULL_TAG`]);
//! * `cpu`: host columns, the reference and the CPU fast path;
//! * `options`: [`PartitionOptions`] (defaults in `crate::tuning::partition`),
//!   the outputs and their scratch accounting;
//! * `gpu`: [`partition_gpu`], the steps above as named functions;
//! * `kernels`: the kernels of shaders/partition/ (appended to common.wgsl) and the pieces
//!   every GPU step shares;
//! * `fused`: the fused rank-and-scatter kernel (shaders/partition/scatter.wgsl);
//! * `unfused`: the rank kernel, the moves and the composed permutation (the
//!   path of adapters without suitable subgroups, and [`PartitionOptions::fused`]
//!   `Some(false)`);
//! * `bench`: [`bench_partition`].
mod bench;
mod cpu;
mod fused;
mod gpu;
mod kernels;
mod options;
mod unfused;

pub use bench::{bench_partition, PartitionBench};
pub use cpu::{
    partition_cpu, partition_ids, partition_reference, HostColumn, HostPartitioned, HostValues, OwnedColumn, OwnedValues,
};
pub use gpu::partition_gpu;
pub use options::{FusedPreload, PartitionOptions, PartitionStats, Partitioned};

/// The word a NULL key contributes to the hash (ASCII "null").
pub const NULL_TAG: u32 = 0x6e75_6c6c;

/// Largest fan-out (and radix width `2^24`).
pub const MAX_FANOUT: u32 = 1 << 24;

/// The murmur3 32-bit finalizer.
#[inline]
pub fn mix32(mut h: u32) -> u32 {
    h ^= h >> 16;
    h = h.wrapping_mul(0x85eb_ca6b);
    h ^= h >> 13;
    h = h.wrapping_mul(0xc2b2_ae35);
    h ^= h >> 16;
    h
}

/// Folds the word `w` into the hash `h` (same as shaders/partition/common.wgsl).
#[inline]
pub fn hash_combine(h: u32, w: u32) -> u32 {
    mix32(h ^ w.wrapping_add(0x9e37_79b9).wrapping_add(h << 6).wrapping_add(h >> 2))
}

/// How rows map to partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionFn {
    /// Bits `shift .. shift + bits` of one u32/u64 key (fan-out `2^bits`).
    Radix {
        /// First bit.
        shift: u32,
        /// Number of bits (0..=24).
        bits: u32,
    },
    /// The u32 key is the partition id (clamped to `fanout - 1`).
    Direct {
        /// Partitions.
        fanout: u32,
    },
    /// Hash of the key columns modulo `fanout`.
    Hash {
        /// Partitions.
        fanout: u32,
    },
}

impl PartitionFn {
    /// Number of partitions.
    pub fn fanout(&self) -> u32 {
        match *self {
            PartitionFn::Radix { bits, .. } => 1 << bits,
            PartitionFn::Direct { fanout } | PartitionFn::Hash { fanout } => fanout,
        }
    }
    /// LSD passes over 8-bit digits the GPU needs.
    pub fn passes(&self) -> u32 {
        let f = self.fanout();
        if f <= 1 {
            1
        } else {
            (32 - (f - 1).leading_zeros()).div_ceil(8)
        }
    }
    pub(crate) fn check(&self, key_widths: &[usize]) -> Result<(), String> {
        let f = self.fanout();
        if f == 0 || f > MAX_FANOUT {
            return Err(format!("fan-out {f} (expected 1..={MAX_FANOUT})"));
        }
        match *self {
            PartitionFn::Radix { shift, bits } => {
                if key_widths.len() != 1 {
                    return Err("radix partitioning takes one key column".into());
                }
                if bits > 24 || shift + bits > 8 * key_widths[0] as u32 {
                    return Err(format!("radix bits {shift}..{} of a {}-byte key", shift + bits, key_widths[0]));
                }
            }
            PartitionFn::Direct { .. } => {
                if key_widths != [4] {
                    return Err("direct partitioning takes one u32 key column".into());
                }
            }
            PartitionFn::Hash { .. } => {
                if key_widths.is_empty() {
                    return Err("hash partitioning needs at least one key column".into());
                }
            }
        }
        Ok(())
    }
}
