//! CPU prefix sums (scans): the sequential reference and the multithreaded SIMD fast
//! path that every CPU fallback in Ridgeline uses (scan-based operators, and the offsets
//! step of partitioning: histogram -> prefix sum -> scatter).
//!
//! One entry per operation: [`scan`] (out of place) and [`scan_in_place`], both with a
//! [`ScanConfig`] saying inclusive or exclusive ([`ScanKind`]), sequential reference or
//! fast path, and the fast path's threads and partition size.
//!
//! The module's parts, by role:
//!
//! * `mod.rs`: the public API (this file).
//! * `cache.rs`: cache sizes detected once (the partition size follows the L2).
//! * `elem.rs`: the element types, mapped onto the four kernel types, and the
//!   instruction set detected once.
//! * `lanes.rs`: the kernels: the portable scalar loops, and the SSE2/AVX2 lanes
//!   generated once by a macro over each vector type's intrinsics.
//! * `scheduler.rs`: the partition scheduler of the parallel path (workers, look-back,
//!   stealing).
//!
//! Tuned constants live in [`crate::tuning::cpu_scan`].
//!
//! # Algorithm
//!
//! The fast path follows Zhang, Wang & Ross, "Parallel Prefix Sum with SIMD" (ADMS 2020),
//! in its cache-friendly partitioned form with the sums computed in the first pass and
//! the prefix sums in the second (their "SIMD2-P", the most robust variant):
//!
//! * The input is cut into partitions of about half the per-core L2 cache
//!   ([`ScanConfig::partition_bytes`], see [`default_partition_bytes`]).
//! * Pass one: a worker sums one partition (SIMD reduction, no writes). This pulls the
//!   partition into the worker's L2 cache.
//! * The tiny sequential scan over the partition sums gives the partition its offset.
//! * Pass two: the same worker scans the partition again, now from its cache, with an
//!   in-register SIMD scan (log2(lanes) shift+add steps, the paper's horizontal
//!   variant) plus the offset, and writes the result.
//!
//! Workers claim partitions in increasing order from a shared counter, so each worker
//! does both passes of a partition on the same core (the paper pins threads for the same
//! reason), and a worker that finishes early simply takes the next partition. Instead of
//! the paper's barrier per round of `threads` partitions, partitions publish their sum
//! and then their inclusive prefix in a slot, and a worker finds its offset by looking
//! back over its predecessors' slots (the "decoupled look-back" of single-pass GPU
//! scans): normally it only waits for its neighbour to finish that neighbour's pass
//! one. If the neighbour's thread is descheduled (a busy machine: Ridgeline's executor
//! threads share the cores with rayon's), the waiting worker sums the neighbour's
//! partition itself after waiting about twice as long as its own pass one took, so one
//! slow thread never stalls the others. No worker waits for another indefinitely,
//! whatever number of the requested workers actually get a thread.
//!
//! Out-of-place scans whose input and output together exceed the last-level cache write
//! the output with non-temporal (streaming) stores, which skip reading each output line
//! from memory before overwriting it: a third less memory traffic for a memory-bound
//! operation. Smaller outputs are written normally and stay cached for their consumer.
//!
//! The calling thread is the first worker and starts at once; the other `threads - 1`
//! are jobs spawned on rayon's current pool (the global pool unless the call is made
//! inside `ThreadPool::install`), which join as the pool gets to them. No threads or
//! pools are created per call. The caller returns as soon as every partition is done:
//! it never waits for a helper that did not get a thread in time (a late helper finds
//! nothing left to claim), so a busy pool makes the scan less parallel, not slower than
//! the caller alone.
//!
//! Inputs smaller than [`MIN_PARALLEL_PARTITIONS`] partitions, and all calls with
//! `threads <= 1`, go straight to the single-threaded one-pass SIMD scan.
//!
//! On the 2-core machine the fast path scans 2^26 u32 in 1.93x less time than the
//! sequential loop (the memory bandwidth's ceiling there); on the H100 machine's 16
//! cores it is 10-12x from 2^26 up (BENCHMARKS.md, "CPU prefix sum" and "Prefix sums").
//!
//! # SIMD
//!
//! On x86_64 the kernels use SSE2 (always available there) or AVX2, chosen once at run
//! time with `is_x86_feature_detected!` and cached. 32-bit and 64-bit integers, `f32`
//! and `f64` all have SIMD kernels (signed integers and `usize`/`isize` share the
//! unsigned kernels: wrapping addition is the same bit operation). Other targets use a
//! portable scalar loop.
//!
//! # Arithmetic
//!
//! * Integers use **wrapping** addition: a prefix sum never panics or saturates on
//!   overflow. SQL overflow checks, where a query needs them, happen elsewhere (for
//!   example on the widened type or on the total). Wrapping addition is associative,
//!   so every integer result is bit-identical to the sequential reference
//!   ([`ScanConfig::sequential`]) whatever the configuration.
//! * Floats use plain IEEE addition, which is not associative. The fast path adds in a
//!   different order from the sequential loop (in-register tree steps, per-partition
//!   sums, multiple SIMD accumulators), so results can differ from the sequential
//!   reference by rounding, and consecutive outputs at a partition boundary are not
//!   guaranteed to be monotone even for non-negative inputs. For a given input, SIMD
//!   level and partition size the result is deterministic: it does not depend on the
//!   number of threads or on their timing (the one-pass single-threaded path, taken
//!   for `threads <= 1` and small inputs, adds in yet another order). Use
//!   [`ScanConfig::sequential`] when a bit-exact sequential float result is required.
//!
//! # Lengths
//!
//! [`scan`] takes `input: &[T]` and `out: &mut [T]`. It never panics on a length
//! mismatch: if `out.len() != input.len()` it returns `Err(ScanLenMismatch)` and leaves
//! `out` untouched. [`scan_in_place`] cannot mismatch and returns a plain value. Both
//! return the total of all elements (for an inclusive scan the last output; for an
//! exclusive scan the value an `(n + 1)`-th output would have, which is what
//! partitioning needs for the size of the scattered output).

mod cache;
mod elem;
mod lanes;
mod scheduler;
#[cfg(test)]
mod tests;

use std::fmt;

pub use crate::tuning::cpu_scan::{DEFAULT_L2_BYTES, DEFAULT_LLC_BYTES, MIN_PARALLEL_PARTITIONS};
pub use cache::{default_partition_bytes, l2_cache_bytes, last_level_cache_bytes};
#[doc(hidden)]
pub use elem::{KernelElem, Level};
pub use elem::ScanElem;
#[doc(hidden)]
pub use lanes::Kernels;

use elem::simd_level;
use scheduler::{scan_in_place_tuned, scan_out_of_place_tuned, Tuning};

/// `out.len() != input.len()` in an out-of-place scan. The output is left untouched.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScanLenMismatch {
    /// Length of the input slice.
    pub input_len: usize,
    /// Length of the output slice.
    pub output_len: usize,
}

impl fmt::Display for ScanLenMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "prefix sum output length {} does not match input length {}",
            self.output_len, self.input_len
        )
    }
}

impl std::error::Error for ScanLenMismatch {}

/// Inclusive or exclusive prefix sum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScanKind {
    /// `out[i] = input[0] + ... + input[i]`.
    Inclusive,
    /// `out[i] = input[0] + ... + input[i - 1]`, `out[0] = ZERO`.
    Exclusive,
}

/// What one scan computes and how: the options of [`scan`] and [`scan_in_place`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanConfig {
    /// Inclusive or exclusive.
    pub kind: ScanKind,
    /// The sequential reference: one loop adding left to right, no SIMD, no threads
    /// (bit-exact sequential float results); `threads` and `partition_bytes` are then
    /// unused. Off: the fast path.
    pub sequential: bool,
    /// Number of workers of the fast path: the calling thread plus `threads - 1` jobs
    /// on rayon's current pool. `0` and `1` mean single-threaded.
    pub threads: usize,
    /// Size of one partition in bytes (rounded down to whole elements, at least one
    /// element; at 64 bytes or more also down to a multiple of a 64-byte cache line).
    /// About half the per-core L2 cache is best (the paper's finding); see
    /// [`default_partition_bytes`].
    pub partition_bytes: usize,
}

impl Default for ScanConfig {
    /// An inclusive fast-path scan on all threads of rayon's current pool, partitions
    /// of [`default_partition_bytes`].
    fn default() -> Self {
        ScanConfig {
            kind: ScanKind::Inclusive,
            sequential: false,
            threads: rayon::current_num_threads().max(1),
            partition_bytes: default_partition_bytes(),
        }
    }
}

impl ScanConfig {
    /// The default inclusive scan (fast path).
    pub fn inclusive() -> Self {
        ScanConfig::default()
    }

    /// The default exclusive scan (fast path).
    pub fn exclusive() -> Self {
        ScanConfig {
            kind: ScanKind::Exclusive,
            ..ScanConfig::default()
        }
    }

    /// The sequential reference scan of `kind`.
    pub fn sequential(kind: ScanKind) -> Self {
        ScanConfig {
            kind,
            sequential: true,
            ..ScanConfig::default()
        }
    }

    /// This configuration with `threads` workers.
    pub fn with_threads(self, threads: usize) -> Self {
        ScanConfig { threads, ..self }
    }

    /// This configuration with partitions of `partition_bytes`.
    pub fn with_partition_bytes(self, partition_bytes: usize) -> Self {
        ScanConfig {
            partition_bytes,
            ..self
        }
    }

    /// Partition length in elements of `size` bytes.
    fn partition_elems(&self, size: usize) -> usize {
        let mut elems = (self.partition_bytes / size).max(1);
        let line = 64 / size;
        if elems >= line {
            elems -= elems % line;
        }
        elems
    }
}

/// Prefix sum of `input` into `out` as `cfg` says (inclusive or exclusive, reference
/// or fast path). Returns the total of all elements. Errors (leaving `out` untouched)
/// if the lengths differ.
pub fn scan<T: ScanElem>(input: &[T], out: &mut [T], cfg: &ScanConfig) -> Result<T, ScanLenMismatch> {
    if input.len() != out.len() {
        return Err(ScanLenMismatch {
            input_len: input.len(),
            output_len: out.len(),
        });
    }
    Ok(if cfg.sequential {
        sequential(cfg.kind, input.iter().copied(), out)
    } else {
        scan_out_of_place(cfg, simd_level(), cfg.kind, input, out)
    })
}

/// Prefix sum of `data` in place as `cfg` says; returns the total of all elements.
pub fn scan_in_place<T: ScanElem>(data: &mut [T], cfg: &ScanConfig) -> T {
    if cfg.sequential {
        // Each element is read (into the iterator's item) before it is written.
        let mut acc = T::ZERO;
        for x in data.iter_mut() {
            let v = *x;
            match cfg.kind {
                ScanKind::Inclusive => {
                    acc = acc.scan_add(v);
                    *x = acc;
                }
                ScanKind::Exclusive => {
                    *x = acc;
                    acc = acc.scan_add(v);
                }
            }
        }
        acc
    } else {
        scan_in_place_tuned(cfg, simd_level(), cfg.kind, data, Tuning::PLAIN)
    }
}

/// The sequential reference: adds left to right; returns the total.
fn sequential<T: ScanElem>(kind: ScanKind, input: impl Iterator<Item = T>, out: &mut [T]) -> T {
    let mut acc = T::ZERO;
    for (o, x) in out.iter_mut().zip(input) {
        match kind {
            ScanKind::Inclusive => {
                acc = acc.scan_add(x);
                *o = acc;
            }
            ScanKind::Exclusive => {
                *o = acc;
                acc = acc.scan_add(x);
            }
        }
    }
    acc
}

/// Name of the SIMD kernels the fast path uses on this machine: `"avx2"`, `"sse2"` or
/// `"scalar"`. For logs and benchmark reports.
pub fn simd_level_name() -> &'static str {
    match simd_level() {
        Level::Scalar => "scalar",
        Level::Sse2 => "sse2",
        Level::Avx2 => "avx2",
    }
}

/// The fast path out of place, streaming stores where the output exceeds the cache.
fn scan_out_of_place<T: ScanElem>(
    cfg: &ScanConfig,
    level: Level,
    kind: ScanKind,
    input: &[T],
    out: &mut [T],
) -> T {
    let tuning = Tuning {
        stream: use_streaming_stores(std::mem::size_of_val(out)),
        eager_steal: false,
    };
    scan_out_of_place_tuned(cfg, level, kind, input, out, tuning)
}

/// The fast path in place (never streaming).
#[cfg(test)]
fn scan_in_place_fast<T: ScanElem>(cfg: &ScanConfig, level: Level, kind: ScanKind, data: &mut [T]) -> T {
    scan_in_place_tuned(cfg, level, kind, data, Tuning::PLAIN)
}

/// Out-of-place outputs are written with non-temporal (streaming) stores when input and
/// output together exceed the last-level cache: they would not stay cached anyway, and
/// streaming stores skip reading the output lines from memory before overwriting them
/// (a third of the memory traffic of a scan).
fn use_streaming_stores(out_bytes: usize) -> bool {
    cfg!(target_arch = "x86_64") && out_bytes.saturating_mul(2) > last_level_cache_bytes()
}
