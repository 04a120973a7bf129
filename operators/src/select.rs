//! Selection: the keys at given ranks (quantiles, medians), approximate quantiles
//! and top-k, on the GPU by SampleSelect (Ribizel & Anzt, "Parallel selection on
//! GPUs", shaders/select.wgsl) and on the CPU.
//!
//! CONTRACT (shared with the SQL layer; keep these names and semantics):
//!
//! * Keys are `u32` or `u64` ([`SelectKey`]) whose unsigned order is the order the
//!   caller wants. [`key_f32`], [`key_f64`], [`key_i32`], [`key_i64`] (and the bulk
//!   `keys_*`) map values to such keys: floats in Arrow's total order (-0.0 < +0.0,
//!   every NaN canonicalised to one key after +inf), signed integers by flipping the
//!   sign bit. Decimal128 (precision <= 18) maps via i64, Date32 via i32,
//!   Date64/Timestamp via i64. DESC: the caller complements keys (`!key`); NULLs: the
//!   caller sets those rows aside.
//! * Ranks are 0-based (`rank < keys.len()`, else [`GpuError::Invalid`] on the GPU
//!   and a panic on the CPU), in any order, duplicates allowed; results come in the
//!   order of `ranks`.
//! * Top-k returns the row indices (ascending) of the `min(k, n)` smallest keys; ties
//!   at the threshold go to the first rows in input order.
//! * Approximate selection returns, for each rank, a key whose true rank range (the
//!   ranks its copies occupy in sorted order) lies within `stats.rank_error_bound` of
//!   the asked rank; the bound is at most [`SelectOptions::max_error_fraction`]
//!   (default 0.1%) of `n`.
//!
//! # GPU algorithm
//!
//! A task is a region of keys (the whole input at level 0, a bucket later) and the
//! ranks that fall in it. Each level, for every task larger than the sample size S
//! (4096 keys when workgroup memory allows, else 2048 or less): gather S keys at
//! pseudo-random positions, sort them in one workgroup (bitonic), take B - 1
//! equidistant splitters (B = 1024 buckets, oversampling 4, when workgroup memory
//! allows), count every key's bucket (binary search over the splitters in workgroup
//! memory, per-workgroup histograms), and read the counts (and splitters) back. The
//! host finds each rank's bucket; a rank in an *equality bucket* (all copies of one
//! splitter value, so few-distinct and all-equal data end at once) is answered by
//! its splitter, other ranks descend into their bucket: one filter pass per level
//! copies all target buckets of all tasks into new buffers (one, unless they hold
//! more than a storage binding). Tasks of at most S keys are sorted in one
//! workgroup (base case) and the answers read back. All ranks (up to 64 distinct
//! ones per descent; more run as further descents) are served in one descent; the
//! tasks of one level share each submission and readback. Between levels the host
//! reads back only the bucket counts and the splitters (a few KiB per task).
//! Levels: about `log_B(n / S) + 1` (3 for 4 * 10^7 distinct keys, 1 when the rank
//! lands in an equality bucket).
//!
//! The count pass stores a **4-bit oracle** per key (its bucket id modulo 16; the
//! paper stores the whole id in a byte), n/2 bytes: the filter reads the oracle and
//! reads a key (and searches its bucket again) only where the nibble matches a
//! target bucket's residue, about 1/16 of the keys per target. It is used for tasks
//! with at most [`SelectOptions::oracle_max_ranks`] (4) distinct ranks; tasks with
//! more (their targets cover most residues) and [`SelectOptions::oracle`] = false
//! recompute every key's bucket in the filter instead (no per-key scratch). On
//! lavapipe (`bench_select`, 2^24 uniform u32, 2 shared cores, noisy) the oracle
//! took the median from 1780-2490 ms to 1510-2040 ms over two runs, and with it
//! for every task 9 deciles went from 2255 to 2465 ms, hence the limit; GPUs bound
//! by memory bandwidth should gain more (the filter reads n/2 bytes instead of 4n
//! for one target), not yet measured there.
//! Histograms aggregate with workgroup atomics, flushed with one global atomic per
//! non-empty bucket and workgroup (no subgroup operations needed).
//!
//! # Device memory
//!
//! With bracketing, the windows' regions (their expected size plus four standard
//! deviations, at most 20% of the keys) and 4 bytes per 4096 keys replace the
//! first level's oracle; the later levels' scratch is a small part of the windows.
//!
//! Without bracketing: the oracle (n/2 bytes:
//! an eighth of a `u32` input, a sixteenth of a `u64` one), per task the sample (S
//! keys), splitters and counts (tens of KiB in all), and the extracted target
//! buckets (about 1.25 n / B keys per distinct target bucket; with at most 64 per
//! descent under 8% of the keys). So about n/2 bytes plus a few percent of the
//! input: within a quarter of the input for 32-bit and 64-bit keys (the tests
//! assert it for 40M keys).
//!
//! # Bracketing (the first level on large inputs)
//!
//! From [`SelectOptions::bracket_min`] keys (2^25) an exact descent starts with a
//! bracketing level in the manner of Floyd & Rivest's sampling select: after the
//! sample of S keys is sorted, each distinct rank gets a *window* of sample indices
//! around its expected position (3 standard deviations of the sample rank either
//! side; windows that overlap merge; at most 4 windows holding at most 20% of the
//! keys, else the plain descent runs). Two lean passes over the keys
//! (select.wgsl, section `window`): `window_count` counts, per window, the keys
//! below it and inside it (and each workgroup's keys inside), `window_copy` copies
//! the keys inside each window into its region. One readback of the counts pins
//! each rank to its window (a rank outside its window, which happens with
//! probability about 3e-3, reruns the plain descent; a window of one value answers
//! its ranks at once; windows that ties at their bounds made larger than their
//! regions are copied again into regions of the exact sizes), and the descent goes
//! on inside the windows, about 6% of the keys for a median. Neither pass searches
//! a splitter tree or keeps per-key state, so both run at 1.6-2 TB/s on the H100
//! (0.55 and 0.67 ms at 2^28, against 1.3 ms for the first level's count kernel
//! and 3-4.5 ms for its filter),
//! and the oracle is only built over the windows. This is the SampleSelect level
//! with three buckets per rank (below, window, above) whose splitters are taken
//! from the sample next to the target instead of equidistant.
//!
//! # Chain (from [`SelectOptions::chain_min`] keys, 2^20)
//!
//! A descent with no host round trip between levels: every level is a bracketing
//! level whose window the device computes from the target ranks and the sorted
//! sample (select.wgsl, section `chain`: gather, sort, `ch_plan` writes the window
//! and the indirect dispatch size, one window pass copies the keys inside,
//! `ch_check` moves to the window or stops the chain when the sample missed or a
//! window overflowed its region). The host computes the regions' capacities and
//! the number of levels from `n` alone ([`chain_caps`]), records all levels in one
//! submission and reads back once: the state and the last region (at most S keys)
//! sorted. A stopped chain reruns as the host-driven descent. Top-k of 32-bit keys
//! runs the chain over (key, row) pairs packed into 64-bit keys, windows open
//! below, so ties go to the first rows and the last region holds the answer.
//! Levels after the first sample 1024 keys (cheaper sorts; a top-k with k above
//! 256 keeps S). Approximate calls of one narrow rank range take the chain too
//! (their answers are then exact) where the one histogram pass (below) does not
//! answer them. The first level reads the input once per workgroup chunk: count,
//! reserve the window's slots, copy (the chunk read twice, the second time mostly
//! from the cache). On the H100 at 2^28 keys (`bench select`, BENCHMARKS.md
//! session 12) a median takes 1.34 ms as a chain and top-100 1.25 ms.
//!
//! # Approximate selection in one pass (from [`SelectOptions::approx_hist_min`])
//!
//! The sorted sample's keys within a few standard deviations of each target rank
//! become splitters; one pass over the keys counts the keys below each window and
//! histograms those inside against its splitters, so the host learns the exact
//! rank range of every splitter and answers each rank with the nearest (its error
//! exact and reported). The windows reach 3 standard deviations of the sample
//! rank either side ([`APPROX_SIGMAS`]; a rank outside its window falls back to
//! the chain). Keys inside a window (about 5%) are staged per subgroup and
//! searched a subgroup at a time. On the H100 an approximate median of 2^28 keys
//! takes 0.63-0.83 ms this way (depending on the lease; BENCHMARKS.md sessions 13
//! and 14), with a rank error of 0.009% of n.
//!
//! 32-bit keys first try cells of key space instead ([`SelectOptions::approx_key_cells`],
//! section approxkc): each window, from its first sample key `lo` to its last,
//! is cut into at most 1024 cells of a power-of-two width, and a key inside adds
//! one to cell `(x - lo) >> shift` in workgroup memory where it is read: no
//! staging and no search. A sample key's cell gives the rank range of its copies,
//! so each rank is answered by the sample key whose range reaches least far from
//! it, and that reach is the reported error. Where keys cluster within a cell so
//! that no reach is within the bound, the splitter pass answers instead (a second
//! pass, for such inputs only). The windows reach 4 standard deviations
//! ([`APPROX_CELL_SIGMAS`]). On the H100 an approximate median of 2^28 keys takes
//! 0.50 ms this way against 0.63 ms with splitters in the same run (BENCHMARKS.md
//! session 14), with a reported bound of 0.012% of n.
//!
//! # The sample sort
//!
//! Every level sorts its sample (up to S = 4096 keys) in one workgroup by a
//! bitonic network. Where the adapter has subgroup operations,
//! `sort_sample_sg` (section sortsg) keeps four keys per invocation in
//! registers: only the steps that span more than a subgroup's keys go through
//! workgroup memory and barriers, the others exchange keys by subgroup shuffles
//! (0.023 ms at S = 4096 on the H100 against 0.052 ms for `sort_sample`, which
//! takes a barrier after every step).
//!
//! # Top-k
//!
//! Top-k does not fuse the lower buckets into the filter (the paper's fusion):
//! it selects the threshold `t` (rank k-1) by SampleSelect, then runs a stable
//! two-pass row filter (`tk_count`: keys < t and == t per block of 4096 rows; the
//! host turns the block counts into offsets; `tk_scatter`: each block writes the
//! row indices of its keys < t and of the first `need = k - #(keys < t)` keys == t
//! in row order). That gives exactly the row-order tie rule, reads the keys twice
//! after the selection, and needs 8 bytes per 4096 rows of scratch plus the `k`
//! output indices (a segmented [`DeviceArray`], so `k` may exceed one binding).
//!
//! # 64-bit keys
//!
//! 64-bit keys use native `u64` when the adapter has SHADER_INT64, otherwise
//! `vec2<u32>` comparisons ([`SelectOptions::int64`] forces either; both are tested).
//!
//! # Device inputs
//!
//! `_device` variants take a [`DeviceArray`] of 4-byte (`u32` keys) or 8-byte (`u64`)
//! elements, any segmentation (e.g. [`DeviceArray::upload`] or a batch's column),
//! and use its first `len` elements; the array is only read. Inputs larger than one
//! binding are processed segment by segment (every kernel launches once per
//! segment). Limits: `n < 2^32 - 1`; one target bucket must fit one storage binding
//! (it holds about n / 1000 keys). Every GPU failure returns `Err` (no panics on the
//! GPU paths); [`GpuError::should_fall_back`] says when to rerun on the CPU.
//!
//! # Workgroup memory
//!
//! S and B follow the adapter's workgroup-memory limit: the sort holds S keys
//! (S = 4096 needs 16 KiB for `u32`, 32 KiB for `u64`), the count and filter
//! kernels B - 1 splitters plus 2B - 1 counters (B = 1024: 12 KiB for `u32`,
//! 16 KiB for `u64`); with 16 KiB a `u64` selection runs with S = 2048, B = 512.
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::scan::Int64Path;
use crate::transfer::Extent;
use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;

const SELECT_WGSL: &str = include_str!("../../shaders/select.wgsl");

// ---------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------

const F32_NAN_KEY: u32 = 0x7fc0_0000 | 0x8000_0000;
const F64_NAN_KEY: u64 = 0x7ff8_0000_0000_0000 | (1 << 63);

/// Order-preserving key of an `f32` (Arrow's total order; all NaNs equal, after +inf).
pub fn key_f32(x: f32) -> u32 {
    if x.is_nan() {
        return F32_NAN_KEY;
    }
    let b = x.to_bits();
    if b & 0x8000_0000 != 0 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// Order-preserving key of an `f64` (Arrow's total order; all NaNs equal, after +inf).
pub fn key_f64(x: f64) -> u64 {
    if x.is_nan() {
        return F64_NAN_KEY;
    }
    let b = x.to_bits();
    if b & (1 << 63) != 0 {
        !b
    } else {
        b | (1 << 63)
    }
}

/// Order-preserving key of an `i32` (sign bit flipped).
pub fn key_i32(x: i32) -> u32 {
    (x as u32) ^ 0x8000_0000
}

/// Order-preserving key of an `i64` (sign bit flipped).
pub fn key_i64(x: i64) -> u64 {
    (x as u64) ^ (1 << 63)
}

/// Inverse of [`key_i32`].
pub fn unkey_i32(k: u32) -> i32 {
    (k ^ 0x8000_0000) as i32
}
/// Inverse of [`key_i64`].
pub fn unkey_i64(k: u64) -> i64 {
    (k ^ (1 << 63)) as i64
}
/// Inverse of [`key_f32`] (NaN keys give the canonical NaN).
pub fn unkey_f32(k: u32) -> f32 {
    f32::from_bits(if k & 0x8000_0000 != 0 { k & 0x7fff_ffff } else { !k })
}
/// Inverse of [`key_f64`] (NaN keys give the canonical NaN).
pub fn unkey_f64(k: u64) -> f64 {
    f64::from_bits(if k & (1 << 63) != 0 { k & !(1 << 63) } else { !k })
}

const BULK_MIN: usize = 1 << 16;

fn bulk<T: Copy + Sync, K: Send>(xs: &[T], f: impl Fn(T) -> K + Sync + Send) -> Vec<K> {
    if xs.len() < BULK_MIN {
        xs.iter().map(|&x| f(x)).collect()
    } else {
        xs.par_iter().with_min_len(BULK_MIN / 4).map(|&x| f(x)).collect()
    }
}

/// [`key_f32`] of every value (parallel).
pub fn keys_f32(xs: &[f32]) -> Vec<u32> {
    bulk(xs, key_f32)
}
/// [`key_f64`] of every value (parallel).
pub fn keys_f64(xs: &[f64]) -> Vec<u64> {
    bulk(xs, key_f64)
}
/// [`key_i32`] of every value (parallel).
pub fn keys_i32(xs: &[i32]) -> Vec<u32> {
    bulk(xs, key_i32)
}
/// [`key_i64`] of every value (parallel).
pub fn keys_i64(xs: &[i64]) -> Vec<u64> {
    bulk(xs, key_i64)
}

/// A selection key: `u32` or `u64`, ordered as unsigned integers.
pub trait SelectKey: bytemuck::Pod + Ord + Copy + Send + Sync + Default + std::fmt::Debug + 'static {
    /// Bytes per key (4 or 8).
    const BYTES: usize;
    /// The largest key.
    const MAX: Self;
    /// Zero-extended bits.
    fn to_u64(self) -> u64;
    /// From bits (truncating for `u32`).
    fn from_u64(v: u64) -> Self;
}

impl SelectKey for u32 {
    const BYTES: usize = 4;
    const MAX: Self = u32::MAX;
    fn to_u64(self) -> u64 {
        self as u64
    }
    fn from_u64(v: u64) -> Self {
        v as u32
    }
}

impl SelectKey for u64 {
    const BYTES: usize = 8;
    const MAX: Self = u64::MAX;
    fn to_u64(self) -> u64 {
        self
    }
    fn from_u64(v: u64) -> Self {
        v
    }
}

/// What a selection did.
#[derive(Clone, Debug, Default)]
pub struct SelectStats {
    /// SampleSelect levels run (bucketing levels plus the base-case level); 0 when no
    /// GPU work was needed.
    pub levels: u32,
    /// Auxiliary device bytes allocated (samples, splitters, counts, extracted
    /// buckets, top-k block counts and the output indices; the input not counted).
    pub device_bytes: u64,
    /// Which algorithm ran.
    pub algorithm: &'static str,
    /// Approximate selection: every returned key's true rank is within this many
    /// ranks of the asked rank (0 for exact results).
    pub rank_error_bound: u64,
    /// Milliseconds of GPU work: the sum of the kernels' compute passes measured by
    /// timestamp queries where the adapter has them, else the wall-clock time of the
    /// device part (submissions and the small readbacks between levels included;
    /// uploads of host inputs never included).
    pub gpu_ms: f64,
}

/// Options of the GPU paths.
#[derive(Clone, Copy, Debug)]
pub struct SelectOptions {
    /// 64-bit keys: native u64 (needs SHADER_INT64), emulated `vec2<u32>`, or Auto.
    pub int64: Int64Path,
    /// Approximate selection: the rank error allowed, as a fraction of `n`.
    pub max_error_fraction: f64,
    /// Seed of the sample positions.
    pub seed: u32,
    /// Cap on the sample size S (a power of two >= 64; the workgroup-memory limit
    /// applies in any case). Smaller samples mean more levels (tests use it).
    pub max_sample: u32,
    /// Cap on the bytes of one buffer of extracted buckets (0: the binding limit).
    /// Target buckets that together exceed it are split over several buffers (tests
    /// use a small cap to exercise that).
    pub max_filter_bytes: u64,
    /// Store a 4-bit oracle per key in the count pass (the bucket id modulo 16, n/2
    /// bytes) so the filter reads half a byte per key and only the keys whose nibble
    /// matches a target bucket (default). `false`: the filter reads every key and
    /// recomputes its bucket, with no per-key scratch at all.
    pub oracle: bool,
    /// The oracle is used for a task with at most this many distinct ranks (with
    /// more, their target buckets cover most of the 16 residues and the filter would
    /// read most keys anyway). Default 4; `usize::MAX` always uses it.
    pub oracle_max_ranks: usize,
    /// Inputs of at least this many keys (and at least 8 samples' worth) start with
    /// the bracketing level (see "Bracketing" in the module documentation) when their
    /// distinct ranks make at most 4 windows; `usize::MAX` never brackets. Default
    /// 2^25: on the H100 the bracketing level pays from about 2^25-2^26 keys and
    /// costs up to 0.5 ms below 2^23 (one more readback than it saves).
    pub bracket_min: usize,
    /// Half-width of a bracketing window in standard deviations of the sample rank
    /// (default 3; tests make it small so that windows miss and overflow).
    pub bracket_sigmas: f64,
    /// Selections of one narrow rank range (at most [`CHAIN_MAX_SPAN`] ranks apart:
    /// a median, a top-k of 32-bit keys) over at least this many keys run as a
    /// *chain*: bracketing levels decided on the device, in one submission (see
    /// "Chain" in the module documentation); `usize::MAX`: never. Default 2^20: on
    /// the H100 the chain was as fast as the host-driven descent at 2^20-2^22 keys
    /// and faster above (BENCHMARKS.md, session 10).
    pub chain_min: usize,
    /// Approximate selections over at least this many keys (and more than four
    /// samples' worth) first try one histogram pass over windows of the sorted
    /// sample (`approx_hist`, select.wgsl section approx); `usize::MAX`: never.
    /// Default 2^20: on the H100 (BENCHMARKS.md, session 13) the pass with
    /// subgroup staging answered an approximate median in 0.66-0.83 ms at 2^28
    /// keys against 1.3-1.6 ms for the (exact) chain, and in 0.35-0.6x the
    /// chain's time at 2^20-2^27; the key-cell pass in 0.50 ms (session 14).
    pub approx_hist_min: usize,
    /// The one histogram pass stages the keys inside its windows per subgroup and
    /// searches them a subgroup at a time (`ap_hist_sg`) where the adapter has
    /// subgroup operations and barriers (default); `false`: each key is searched
    /// where it is read (`ap_hist`, also the kernel without subgroups).
    pub approx_hist_subgroups: bool,
    /// Keys per invocation and chunk of the one histogram pass; 0: the default
    /// ([`APPROX_ITEMS`], or the environment variable `RIDGELINE_APPROX_ITEMS`, a
    /// diagnosis aid).
    pub approx_hist_items: u32,
    /// 32-bit keys: the one pass first cuts each window into cells of key space
    /// (`ap_hist_kc`: no staging, no search) and answers by the sample key whose
    /// cell's rank range is nearest; where the cells are too coarse (keys
    /// clustered within a cell) the splitter kernels answer instead.
    pub approx_key_cells: bool,
    /// Half-width of the key-cell pass's windows in standard deviations of the
    /// sample rank (default [`APPROX_CELL_SIGMAS`]; wider windows cost it almost
    /// nothing, so it misses a rank far more rarely than the splitter kernels).
    pub approx_cell_sigmas: f64,
    /// Most workgroups of the one histogram pass (each loops over chunks); 0: the
    /// default, 8192 (or the environment variable `RIDGELINE_APPROX_GROUPS`).
    pub approx_hist_groups: u32,
    /// Half-width of the one pass's windows in standard deviations of the sample
    /// rank (and one sample key more either side). A rank outside its window is
    /// answered by the chain instead. Default [`APPROX_SIGMAS`].
    pub approx_sigmas: f64,
    /// Sample sorts keep four keys per invocation in registers and exchange them
    /// by subgroup shuffles where the adapter has subgroup operations (default);
    /// `false`: every step of the network through workgroup memory.
    pub subgroup_sort: bool,
}

impl Default for SelectOptions {
    fn default() -> Self {
        SelectOptions {
            int64: Int64Path::Auto,
            max_error_fraction: 0.001,
            seed: 0x2545_f491,
            max_sample: 4096,
            max_filter_bytes: 0,
            oracle: true,
            oracle_max_ranks: 4,
            bracket_min: 1 << 25,
            bracket_sigmas: BRACKET_SIGMAS,
            chain_min: 1 << 20,
            approx_hist_min: 1 << 20,
            approx_hist_subgroups: true,
            approx_hist_items: 0,
            approx_key_cells: true,
            approx_cell_sigmas: APPROX_CELL_SIGMAS,
            approx_hist_groups: 0,
            approx_sigmas: APPROX_SIGMAS,
            subgroup_sort: true,
        }
    }
}

// ---------------------------------------------------------------------------------
// References and CPU paths
// ---------------------------------------------------------------------------------

fn check_ranks(n: usize, ranks: &[u64]) {
    if let Some(r) = ranks.iter().find(|&&r| r >= n as u64) {
        panic!("rank {r} out of range for {n} keys");
    }
}

/// Exact selection by sorting a copy (tests only).
pub fn select_reference<K: SelectKey>(keys: &[K], ranks: &[u64]) -> Vec<K> {
    check_ranks(keys.len(), ranks);
    let mut v = keys.to_vec();
    v.sort_unstable();
    ranks.iter().map(|&r| v[r as usize]).collect()
}

/// Multi-select in place: puts the keys at every rank of `ranks` (sorted, unique,
/// relative to `v`) in their sorted position; recursion splits in parallel.
fn multiselect<K: SelectKey>(v: &mut [K], ranks: &[usize]) {
    if ranks.is_empty() {
        return;
    }
    let mid = ranks.len() / 2;
    let r = ranks[mid];
    v.select_nth_unstable(r);
    let (left, right) = v.split_at_mut(r);
    let lr = &ranks[..mid];
    let rr: Vec<usize> = ranks[mid + 1..].iter().map(|&x| x - r - 1).collect();
    let right = &mut right[1..];
    if left.len() + right.len() > 1 << 15 {
        rayon::join(|| multiselect(left, lr), || multiselect(right, &rr));
    } else {
        multiselect(left, lr);
        multiselect(right, &rr);
    }
}

/// CPU SampleSelect bucketing of `keys` by `spl` (sorted): `2j + (x == spl[j])`.
fn cpu_bucket<K: SelectKey>(spl: &[K], x: K) -> usize {
    let j = spl.partition_point(|s| *s < x);
    2 * j + usize::from(j < spl.len() && spl[j] == x)
}

/// Fast parallel CPU selection of all ranks at once: one parallel SampleSelect level
/// (256 splitters from a sample of 4096, equality buckets, parallel histograms and a
/// parallel filter of the target buckets), then parallel multi-select on the small
/// buckets; small inputs go straight to multi-select on a copy.
pub fn select_cpu<K: SelectKey>(keys: &[K], ranks: &[u64]) -> Vec<K> {
    check_ranks(keys.len(), ranks);
    let n = keys.len();
    if ranks.is_empty() {
        return Vec::new();
    }
    let mut uniq: Vec<usize> = ranks.iter().map(|&r| r as usize).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let answers: Vec<K> = if n < 1 << 18 || uniq.len() > 64 {
        let mut v = keys.to_vec();
        multiselect(&mut v, &uniq);
        uniq.iter().map(|&r| v[r]).collect()
    } else {
        // Sample and splitters.
        let ns = 255usize;
        let mut sample: Vec<K> = (0..4096u64)
            .map(|i| keys[(splitmix(i ^ 0x9e37_79b9) % n as u64) as usize])
            .collect();
        sample.sort_unstable();
        let spl: Vec<K> = (0..ns).map(|j| sample[(j + 1) * sample.len() / (ns + 1)]).collect();
        let nb = 2 * ns + 1;
        let chunk = (n / (rayon::current_num_threads() * 4)).max(1 << 16);
        let counts = keys
            .par_chunks(chunk)
            .map(|c| {
                let mut h = vec![0usize; nb];
                for &x in c {
                    h[cpu_bucket(&spl, x)] += 1;
                }
                h
            })
            .reduce(|| vec![0usize; nb], |mut a, b| {
                a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                a
            });
        let mut start = vec![0usize; nb + 1];
        for b in 0..nb {
            start[b + 1] = start[b] + counts[b];
        }
        let bucket_of_rank = |r: usize| start.partition_point(|&s| s <= r) - 1;
        let mut targets: Vec<usize> = uniq.iter().map(|&r| bucket_of_rank(r)).filter(|b| b % 2 == 0).collect();
        targets.dedup();
        let is_target = {
            let mut t = vec![false; nb];
            for &b in &targets {
                t[b] = true;
            }
            t
        };
        // Extract the target buckets (parallel), then multi-select inside each.
        let parts: Vec<Vec<(usize, K)>> = keys
            .par_chunks(chunk)
            .map(|c| {
                c.iter()
                    .filter_map(|&x| {
                        let b = cpu_bucket(&spl, x);
                        is_target[b].then_some((b, x))
                    })
                    .collect()
            })
            .collect();
        let mut buckets: Vec<Vec<K>> = targets.iter().map(|&b| Vec::with_capacity(counts[b])).collect();
        for p in parts {
            for (b, x) in p {
                let i = targets.binary_search(&b).expect("target bucket");
                buckets[i].push(x);
            }
        }
        let per: Vec<Vec<usize>> = targets
            .iter()
            .map(|&b| uniq.iter().filter(|&&r| bucket_of_rank(r) == b).map(|&r| r - start[b]).collect())
            .collect();
        buckets.par_iter_mut().zip(per.par_iter()).for_each(|(v, rs)| multiselect(v, rs));
        uniq.iter()
            .map(|&r| {
                let b = bucket_of_rank(r);
                if b % 2 == 1 {
                    spl[b / 2]
                } else {
                    let i = targets.binary_search(&b).expect("target bucket");
                    buckets[i][r - start[b]]
                }
            })
            .collect()
    };
    ranks.iter().map(|&r| answers[uniq.binary_search(&(r as usize)).expect("rank")]).collect()
}

/// Approximate selection on the CPU: answers exactly (error bound 0), which meets
/// any approximate contract; the CPU has no cheaper one-level variant that pays.
pub fn approx_select_cpu<K: SelectKey>(keys: &[K], ranks: &[u64]) -> (Vec<K>, SelectStats) {
    let v = select_cpu(keys, ranks);
    (v, SelectStats { algorithm: "cpu-exact", ..Default::default() })
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Top-k by a stable sort of row indices (tests only).
pub fn topk_reference<K: SelectKey>(keys: &[K], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..keys.len() as u32).collect();
    idx.sort_by_key(|&i| (keys[i as usize], i));
    idx.truncate(k);
    idx.sort_unstable();
    idx
}

/// Top-k on the CPU: the threshold by [`select_cpu`], then a parallel two-pass row
/// filter (count the keys equal to the threshold per chunk, then collect the rows
/// below it and the first `need` rows equal to it).
pub fn topk_cpu<K: SelectKey>(keys: &[K], k: usize) -> Vec<u32> {
    let n = keys.len();
    assert!(n <= u32::MAX as usize, "top-k of more than 2^32 rows");
    if k == 0 || n == 0 {
        return Vec::new();
    }
    if k >= n {
        return (0..n as u32).collect();
    }
    let t = select_cpu(keys, &[k as u64 - 1])[0];
    let chunk = (n / (rayon::current_num_threads() * 4)).max(1 << 14);
    let counts: Vec<(usize, usize)> = keys
        .par_chunks(chunk)
        .map(|c| c.iter().fold((0, 0), |(l, e), &x| (l + usize::from(x < t), e + usize::from(x == t))))
        .collect();
    let lt: usize = counts.iter().map(|c| c.0).sum();
    let need = k - lt;
    let mut eq_before = Vec::with_capacity(counts.len());
    let mut acc = 0usize;
    for c in &counts {
        eq_before.push(acc);
        acc += c.1;
    }
    let parts: Vec<Vec<u32>> = keys
        .par_chunks(chunk)
        .zip(eq_before.par_iter())
        .enumerate()
        .map(|(ci, (c, &e0))| {
            let mut e = e0;
            let mut out = Vec::new();
            for (i, &x) in c.iter().enumerate() {
                if x < t {
                    out.push((ci * chunk + i) as u32);
                } else if x == t {
                    if e < need {
                        out.push((ci * chunk + i) as u32);
                    }
                    e += 1;
                }
            }
            out
        })
        .collect();
    let mut out = Vec::with_capacity(k);
    for p in parts {
        out.extend_from_slice(&p);
    }
    out
}

// ---------------------------------------------------------------------------------
// GPU kernels
// ---------------------------------------------------------------------------------

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    off: u32,
    n: u32,
    cnt: u32,
    dst_off: u32,
    seed: u32,
    task: u32,
    mode: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct WinParams {
    off: u32,
    n: u32,
    pad: u32,
    wg_base: u32,
    lo_idx: [u32; 4],
    hi_idx: [u32; 4],
    woff: [u32; 4],
    cap: [u32; 4],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct TkParams {
    n: u32,
    block_base: u32,
    row0: u32,
    need: u32,
    win_lo: u32,
    win_len: u32,
    blocks: u32,
    lt_total: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Repr {
    U32,
    U64,
    U64Emu,
}

const KEY_U32: &str = "alias K = u32;
fn kless(a: K, b: K) -> bool { return a < b; }
fn keq(a: K, b: K) -> bool { return a == b; }
fn kmax() -> K { return 0xffffffffu; }
fn kword(a: K, i: u32) -> u32 { return select(0u, a, i == 0u); }
";
const KEY_U64: &str = "alias K = u64;
fn kless(a: K, b: K) -> bool { return a < b; }
fn keq(a: K, b: K) -> bool { return a == b; }
fn kmax() -> K { return 0xfffffffffffffffflu; }
fn kword(a: K, i: u32) -> u32 { if (i == 0u) { return u32(a & 0xfffffffflu); } return u32(a >> 32u); }
";
const KEY_U64EMU: &str = "alias K = vec2<u32>;
fn kless(a: K, b: K) -> bool { return a.y < b.y || (a.y == b.y && a.x < b.x); }
fn keq(a: K, b: K) -> bool { return all(a == b); }
fn kmax() -> K { return vec2<u32>(0xffffffffu, 0xffffffffu); }
fn kword(a: K, i: u32) -> u32 { return a[i]; }
";

const WG: u32 = 256;
const ITEMS: u32 = 16;
const CHUNK: u32 = WG * ITEMS;
/// Keys per invocation of the count kernels: 16384 keys a workgroup, so the flush of
/// the histogram (up to 2047 global atomics) is amortised over many keys.
const CITEMS: u32 = 64;
const CCHUNK: u32 = WG * CITEMS;
const NONE: u32 = u32::MAX;

/// One configuration of the kernels for a key width on this device.
#[derive(Clone, Copy, Debug)]
struct Kern {
    repr: Repr,
    kb: usize,
    s: u32,
    ns: u32,
    /// Sample sorts by `sort_sample_sg` (section sortsg).
    sg_sort: bool,
}

impl Kern {
    fn new(ctx: &GpuContext, kb: usize, opts: &SelectOptions) -> GpuResult<Kern> {
        let repr = match (kb, opts.int64) {
            (4, _) => Repr::U32,
            (8, Int64Path::Auto) if ctx.has_int64() => Repr::U64,
            (8, Int64Path::Auto) | (8, Int64Path::Emulated) => Repr::U64Emu,
            (8, Int64Path::Native) if ctx.has_int64() => Repr::U64,
            (8, Int64Path::Native) => {
                return Err(GpuError::Invalid("native 64-bit selection without SHADER_INT64 on this device".into()))
            }
            _ => return Err(GpuError::Invalid(format!("key of {kb} bytes (expected 4 or 8)"))),
        };
        let l = ctx.limits();
        if l.max_compute_invocations_per_workgroup < WG || l.max_compute_workgroup_size_x < WG {
            return Err(GpuError::Invalid(format!("selection needs workgroups of {WG} invocations")));
        }
        let mem = l.max_compute_workgroup_storage_size as usize;
        let mut s = opts.max_sample.clamp(64, 4096).next_power_of_two();
        while s > 64 && s as usize * kb > mem {
            s /= 2;
        }
        // B buckets (power of two): B - 1 splitters and 2B - 1 counters must fit,
        // with oversampling S / B >= 4 where possible.
        let mut b = (s / 4).clamp(16, 1024);
        // The oracle filter also holds a 16-entry residue table.
        let need = |b: usize| (b - 1) * kb + (2 * b - 1) * 4 + 64;
        while b > 16 && need(b as usize) > mem {
            b /= 2;
        }
        if s as usize * kb > mem || need(b as usize) > mem {
            return Err(GpuError::Invalid(format!("workgroup memory of {mem} bytes is too small for selection")));
        }
        let sg_sort = opts.subgroup_sort && ctx.has_subgroups() && s / 4 <= l.max_compute_invocations_per_workgroup && s / 4 <= l.max_compute_workgroup_size_x;
        Ok(Kern { repr, kb, s, ns: b - 1, sg_sort })
    }

    fn nb(&self) -> u32 {
        2 * self.ns + 1
    }

    /// The sample sort (bindings 0: keys, 1: output, 2: Params; one workgroup).
    fn sort_pipe(&self, ctx: &GpuContext) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        if !self.sg_sort {
            return self.pipe(ctx, "bitonic+sort", "sort_sample");
        }
        let shx = match self.repr {
            Repr::U32 | Repr::U64Emu => "return subgroupShuffleXor(a, m);",
            Repr::U64 => "let v = subgroupShuffleXor(vec2<u32>(u32(a & 0xfffffffflu), u32(a >> 32u)), m); return u64(v.x) | (u64(v.y) << 32u);",
        };
        self.pipe_with(ctx, "bitonic+sort+sortsg", "sort_sample_sg", &[("SWG", (self.s / 4).to_string()), ("KSHX", shx.to_string())])
    }

    fn pipe(&self, ctx: &GpuContext, section: &str, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.pipe_with(ctx, section, entry, &[])
    }

    /// [`Kern::pipe`] with further placeholder values (`NWIN` of section window).
    fn pipe_with(&self, ctx: &GpuContext, section: &str, entry: &str, extra: &[(&str, String)]) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let (key, kname) = match self.repr {
            Repr::U32 => (KEY_U32, "u32"),
            Repr::U64 => (KEY_U64, "u64"),
            Repr::U64Emu => (KEY_U64EMU, "u64emu"),
        };
        // Sections start at a line beginning with "//@@ name"; `section` may name
        // several, joined by '+' ("bucket+oracle"). Assembled only on a cache miss.
        let source = || {
            let first = SELECT_WGSL.find("\n//@@ ").unwrap_or(SELECT_WGSL.len());
            let mut src = format!("{key}{}", &SELECT_WGSL[..first]);
            for part in section.split('+') {
                let marker = format!("\n//@@ {part}");
                let start = SELECT_WGSL
                    .find(&marker)
                    .ok_or_else(|| GpuError::Invalid(format!("select.wgsl has no section {part}")))?;
                let rest = &SELECT_WGSL[start + marker.len()..];
                src.push_str("\n//");
                src.push_str(&rest[..rest.find("\n//@@ ").unwrap_or(rest.len())]);
            }
            Ok(src)
        };
        let mut defs = vec![
            ("KEY", kname.to_string()),
            ("WG", WG.to_string()),
            ("S", self.s.to_string()),
            ("NS", self.ns.to_string()),
            ("ITEMS", ITEMS.to_string()),
            ("CITEMS", CITEMS.to_string()),
        ];
        defs.extend(extra.iter().cloned());
        ctx.pipeline_lazy(&format!("select-{section}"), entry, &defs, source)
    }
}

fn bind(ctx: &GpuContext, pipe: &wgpu::ComputePipeline, entries: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
    let e: Vec<wgpu::BindGroupEntry<'_>> = entries
        .iter()
        .map(|(b, buf)| wgpu::BindGroupEntry { binding: *b, resource: buf.as_entire_binding() })
        .collect();
    ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("select"),
        layout: &pipe.get_bind_group_layout(0),
        entries: &e,
    })
}

/// Workgroup counts of a dispatch: given, or read from a buffer at an offset.
#[derive(Clone)]
enum Dims {
    Direct(u32, u32, u32),
    Indirect(wgpu::Buffer, u64),
}

/// One recorded dispatch: pipeline, bind group, workgroup counts.
type Dispatch = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, Dims);

/// Records dispatches into one compute pass.
struct Rec<'a> {
    ctx: &'a GpuContext,
    list: Vec<Dispatch>,
}

impl<'a> Rec<'a> {
    fn new(ctx: &'a GpuContext) -> Self {
        Rec { ctx, list: Vec::new() }
    }
    fn dispatch(&mut self, pipe: &Arc<wgpu::ComputePipeline>, entries: &[(u32, &wgpu::Buffer)], groups: u64) -> GpuResult<()> {
        if groups == 0 {
            return Ok(());
        }
        let max = self.ctx.limits().max_compute_workgroups_per_dimension.max(1) as u64;
        if groups > max * max {
            return Err(GpuError::Invalid(format!("dispatch of {groups} workgroups exceeds two dimensions")));
        }
        let bg = lap("bind group", || bind(self.ctx, pipe, entries));
        let (x, y, z) = dispatch_dims(groups, max as u32);
        self.list.push((pipe.clone(), bg, Dims::Direct(x, y, z)));
        Ok(())
    }
    /// A dispatch with a prepared bind group.
    fn push(&mut self, pipe: &Arc<wgpu::ComputePipeline>, bg: &wgpu::BindGroup, dims: Dims) {
        self.list.push((pipe.clone(), bg.clone(), dims));
    }
    fn encode(&self, enc: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        if self.list.is_empty() && timestamps.is_none() {
            return;
        }
        let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("select"), timestamp_writes: timestamps });
        for (p, bg, dims) in &self.list {
            cp.set_pipeline(p);
            cp.set_bind_group(0, bg, &[]);
            match dims {
                Dims::Direct(x, y, z) => cp.dispatch_workgroups(*x, *y, *z),
                Dims::Indirect(buf, off) => cp.dispatch_workgroups_indirect(buf, *off),
            }
        }
    }
}

/// `RIDGELINE_SELECT_PROFILE` set: host steps slower than 0.1 ms are printed.
fn profiling() -> bool {
    static P: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *P.get_or_init(|| std::env::var_os("RIDGELINE_SELECT_PROFILE").is_some())
}

/// Runs `f`, printing its host time when profiling and above 0.1 ms.
fn lap<R>(what: &str, f: impl FnOnce() -> R) -> R {
    if !profiling() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if ms > 0.1 {
        eprintln!("select-profile   host {what}: {ms:.3} ms");
    }
    r
}

fn uni<T: bytemuck::Pod>(ctx: &GpuContext, p: &T) -> wgpu::Buffer {
    lap("uniform", || ctx.uniform(p))
}

/// Kernel time of a call: the sum of its compute passes' timestamps where the
/// adapter has timestamp queries, else the wall-clock time of the whole call.
struct GpuClock {
    start: Instant,
    kernel_ms: f64,
    timed: bool,
    /// `RIDGELINE_SELECT_PROFILE`: wait after each phase and print its wall time.
    profile: Option<Instant>,
}

impl GpuClock {
    fn new(ctx: &GpuContext) -> Self {
        GpuClock {
            start: Instant::now(),
            kernel_ms: 0.0,
            // Timestamps cost a query set, two buffers and a readback per submission
            // (tens of milliseconds of host time on the H100's driver), so only on
            // request; the GPU idles meanwhile and its clock drops, so kernel times
            // taken this way run up to 4x the normal (BENCHMARKS.md, session 12):
            // compare variants by wall time without it.
            timed: ctx.has_timestamps() && std::env::var_os("RIDGELINE_SELECT_TIMESTAMPS").is_some(),
            profile: profiling().then(Instant::now),
        }
    }
    /// With `RIDGELINE_SELECT_PROFILE`: waits for the device and prints the wall
    /// time since the previous mark (a diagnosis aid; it serialises the phases).
    fn mark(&mut self, ctx: &GpuContext, what: std::fmt::Arguments<'_>) -> GpuResult<()> {
        if let Some(t) = self.profile {
            ctx.wait()?;
            eprintln!("select-profile {what}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
            self.profile = Some(Instant::now());
        }
        Ok(())
    }
    /// Encodes `recs` as one compute pass each (timed), submits `enc`.
    fn submit(&mut self, ctx: &GpuContext, mut enc: wgpu::CommandEncoder, recs: &[&Rec<'_>]) -> GpuResult<()> {
        let timer = if self.timed { crate::timing::KernelTimer::new(ctx, recs.len() as u32) } else { None };
        for (i, r) in recs.iter().enumerate() {
            r.encode(&mut enc, timer.as_ref().and_then(|t| t.writes(i as u32)));
        }
        if let Some(t) = &timer {
            t.resolve(&mut enc);
        }
        lap("submit", || ctx.submit(enc))?;
        if let Some(t) = timer {
            self.kernel_ms += t.read_ms(ctx)?.iter().sum::<f64>();
        }
        Ok(())
    }
    fn ms(&self) -> f64 {
        if self.timed {
            self.kernel_ms
        } else {
            self.start.elapsed().as_secs_f64() * 1e3
        }
    }
}

/// Reads `count` elements of `T` from the start of `buf`.
fn read_buf<T: bytemuck::Pod + Default>(ctx: &GpuContext, buf: &wgpu::Buffer, count: usize) -> GpuResult<Vec<T>> {
    let mut v = vec![T::default(); count];
    let bytes = (count * std::mem::size_of::<T>()) as u64;
    if bytes == 0 {
        return Ok(v);
    }
    if !bytes.is_multiple_of(4) {
        return Err(GpuError::Invalid("readback of a size that is not a multiple of 4".into()));
    }
    lap("download", || ctx.download_stream(&[Extent { buffer: buf, offset: 0, stream_offset: 0, len: bytes }], bytemuck::cast_slice_mut(&mut v)))?;
    Ok(v)
}

/// Scratch allocations of one call, with their byte total.
struct Scratch<'a> {
    ctx: &'a GpuContext,
    bytes: u64,
}

impl Scratch<'_> {
    fn alloc(&mut self, bytes: u64) -> GpuResult<GpuBuffer> {
        let b = lap("alloc", || self.ctx.pool().alloc(bytes.max(4).div_ceil(4) * 4))?;
        self.bytes += b.size();
        Ok(b)
    }
    fn with_data(&mut self, data: &[u8]) -> GpuResult<GpuBuffer> {
        let b = self.alloc(data.len() as u64)?;
        if !data.is_empty() {
            lap("small write", || self.ctx.write_small(b.raw(), 0, data))?;
        }
        Ok(b)
    }
}

/// Where a task's keys live.
#[derive(Clone, Copy, Debug)]
enum Src {
    /// The input array's first `len` elements.
    Input,
    /// The input array's elements `start .. start + n` (a region).
    Range { start: u64 },
    /// `bufs[buf][off..off + n]`.
    Buf { buf: usize, off: u64 },
}

#[derive(Clone, Debug)]
struct Task {
    src: Src,
    /// Keys in the task.
    n: u64,
    /// Global rank of the task's smallest key.
    lo: u64,
    /// (output index, global rank).
    ranks: Vec<(usize, u64)>,
    /// The key at global rank `lo - 1`, when known (approximate answers).
    below: Option<u64>,
    /// The key at global rank `lo + n`, when known.
    above: Option<u64>,
}

/// The pieces of a task's keys, one per buffer: (buffer, first element, count).
fn pieces<'a>(input: &'a DeviceArray, len: usize, bufs: &'a [GpuBuffer], t: &Task) -> Vec<(&'a wgpu::Buffer, u32, u32)> {
    match t.src {
        Src::Input => (0..input.num_segments())
            .filter_map(|i| {
                let (buf, start, rows) = input.segment(i);
                let rows = rows.min(len.saturating_sub(start));
                (rows > 0).then_some((buf, 0u32, rows as u32))
            })
            .collect(),
        Src::Buf { buf, off } => vec![(bufs[buf].raw(), off as u32, t.n as u32)],
        Src::Range { start } => (0..input.num_segments())
            .filter_map(|i| {
                let (buf, s0, rows) = input.segment(i);
                let (a, b) = ((s0 as u64).max(start), ((s0 + rows) as u64).min(start + t.n));
                (a < b).then(|| (buf, (a - s0 as u64) as u32, (b - a) as u32))
            })
            .collect(),
    }
}

fn check_device_input<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize) -> GpuResult<()> {
    if keys.elem_size() != K::BYTES {
        return Err(GpuError::Invalid(format!(
            "selection of {}-byte keys from an array of {}-byte elements",
            K::BYTES,
            keys.elem_size()
        )));
    }
    if len > keys.len() {
        return Err(GpuError::Invalid(format!("selection of {len} keys from an array of {}", keys.len())));
    }
    if len as u64 >= u32::MAX as u64 {
        return Err(GpuError::Invalid(format!("selection of {len} keys (at most 2^32 - 2)")));
    }
    ctx.check()
}

/// Distinct ranks served by one descent. Each distinct target bucket is extracted
/// (about 1.25 n / B keys for a random rank with B = 1024 buckets), so 64 ranks keep
/// the extracted keys near 8% of the input; more ranks run in further descents.
const RANKS_PER_DESCENT: usize = 64;

/// [`sample_select_once`] over batches of at most [`RANKS_PER_DESCENT`] distinct
/// ranks (neighbouring ranks share a batch, so they share buckets).
fn sample_select<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    ranks: &[u64],
    approx: Option<u64>,
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let mut uniq: Vec<u64> = ranks.to_vec();
    uniq.sort_unstable();
    uniq.dedup();
    if uniq.len() <= RANKS_PER_DESCENT {
        return sample_select_once(ctx, input, len, ranks, approx, opts);
    }
    let mut vals: Vec<K> = Vec::with_capacity(uniq.len());
    let mut stats = SelectStats::default();
    for batch in uniq.chunks(RANKS_PER_DESCENT) {
        let (v, st) = sample_select_once::<K>(ctx, input, len, batch, approx, opts)?;
        vals.extend(v);
        stats.levels = stats.levels.max(st.levels);
        stats.device_bytes = stats.device_bytes.max(st.device_bytes);
        stats.rank_error_bound = stats.rank_error_bound.max(st.rank_error_bound);
        stats.gpu_ms += st.gpu_ms;
        stats.algorithm = st.algorithm;
    }
    let out = ranks.iter().map(|r| vals[uniq.binary_search(r).expect("rank in its batch")]).collect();
    Ok((out, stats))
}

/// The SampleSelect descent for all `ranks` at once. `approx`: the rank error
/// allowed (None = exact).
fn sample_select_once<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    ranks: &[u64],
    approx: Option<u64>,
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let mut clock = GpuClock::new(ctx);
    check_device_input::<K>(ctx, input, len)?;
    if let Some(r) = ranks.iter().find(|&&r| r >= len as u64) {
        return Err(GpuError::Invalid(format!("rank {r} out of range for {len} keys")));
    }
    if ranks.is_empty() {
        let algorithm = if approx.is_some() { "gpu-sampleselect-approx" } else { "gpu-sampleselect" };
        return Ok((Vec::new(), SelectStats { algorithm, ..Default::default() }));
    }
    let whole = Task {
        src: Src::Input,
        n: len as u64,
        lo: 0,
        ranks: ranks.iter().copied().enumerate().collect(),
        below: None,
        above: None,
    };
    // Approximate (when enabled): one histogram pass over the keys where the
    // sample's keys near the ranks are close enough.
    if let Some(allowed) = approx {
        let mut uniq: Vec<u64> = ranks.to_vec();
        uniq.sort_unstable();
        uniq.dedup();
        let mut scratch = Scratch { ctx, bytes: 0 };
        // Cells of key space first (32-bit keys, where enabled), then splitters.
        let mut found = None;
        for cells in [true, false] {
            if found.is_none() && (opts.approx_key_cells || !cells) {
                found = approx_hist::<K>(ctx, input, len, &uniq, allowed, cells, opts, &mut clock, &mut scratch)?;
            }
        }
        if let Some((vals, bound, algorithm)) = found {
            let out = ranks.iter().map(|r| vals[uniq.binary_search(r).expect("a rank")]).collect();
            let stats = SelectStats { levels: 1, device_bytes: scratch.bytes, algorithm, rank_error_bound: bound, gpu_ms: clock.ms() };
            return Ok((out, stats));
        }
    }
    // Otherwise the chain answers exactly; on the H100 it is faster than one
    // approximate level of the descent (1.8 against 2.5 ms at 2^28, session 10), so
    // approximate calls take it too (bound 0).
    {
        let (rlo, rhi) = (ranks.iter().copied().min().unwrap_or(0), ranks.iter().copied().max().unwrap_or(0));
        let mut scratch = Scratch { ctx, bytes: 0 };
        if let Some((end, levels)) = chain::<K>(ctx, input, len, rlo, rhi, false, opts, &mut clock, &mut scratch)? {
            let out = match end {
                ChainEnd::One(v) => vec![v; ranks.len()],
                ChainEnd::Region(keys, shift, _) => ranks.iter().map(|&r| keys[(r - shift) as usize]).collect(),
            };
            let stats = SelectStats { levels, device_bytes: scratch.bytes, algorithm: "gpu-sampleselect+chain", rank_error_bound: 0, gpu_ms: clock.ms() };
            return Ok((out, stats));
        }
    }
    // Approximate selection needs one bucketing level over the keys (1.3 ms at 2^28
    // on the H100), less than the bracketing level and the level after it.
    let bracketed = if approx.is_none() { bracket::<K>(ctx, input, len, &whole, opts, &mut clock)? } else { None };
    if let Some((tasks, start)) = bracketed {
        let (out, mut stats) = sample_select_tasks(ctx, input, len, tasks, ranks.len(), approx, opts, clock, start)?;
        stats.algorithm = "gpu-sampleselect+bracket";
        return Ok((out, stats));
    }
    sample_select_tasks(ctx, input, len, vec![whole], ranks.len(), approx, opts, clock, Start::default())
}

/// Where a descent starts when a bracketing level ran before it.
#[derive(Default)]
struct Start {
    /// Buffers that the first tasks read (`Src::Buf`).
    bufs: Vec<GpuBuffer>,
    /// Levels already run.
    level: u32,
    /// Scratch bytes already allocated.
    bytes: u64,
    /// Answers already known: (output index, key).
    answered: Vec<(usize, u64)>,
}

static BRACKETED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bracketing levels in this process that pinned every rank of their task to a
/// window (a diagnostic counter: tests check that a path really bracketed).
pub fn bracketed_total() -> u64 {
    BRACKETED.load(std::sync::atomic::Ordering::Relaxed)
}

/// How many standard deviations of the sample rank a bracketing window reaches on
/// either side of the target (the chance that a rank falls outside its window is
/// about 2.7e-3; then the call reruns without bracketing).
const BRACKET_SIGMAS: f64 = 3.0;
/// Largest share of the input that the bracketing windows may hold together (with
/// the later levels' scratch, auxiliary memory stays under a quarter of the input).
const BRACKET_MAX_SHARE: f64 = 0.2;
/// Windows of one bracketing pass (NWIN in select.wgsl).
const BRACKET_WINDOWS: usize = 4;

/// A bracketing window: sample index range `a ..= b` (`None`: unbounded on that
/// side), the ranks it serves, and the capacity of its region.
#[derive(Clone, Debug)]
struct Window {
    a: Option<u64>,
    b: Option<u64>,
    ranks: Vec<u64>,
    cap: u64,
}

/// The bracketing windows of `ranks` (sorted, distinct) for `n` keys and a sorted
/// sample of `s`; empty when there are more than [`BRACKET_WINDOWS`] after merging
/// or they would hold too much.
fn bracket_windows(n: u64, s: u64, ranks: &[u64], sigmas: f64) -> Vec<Window> {
    let mut ws: Vec<(i64, i64, Vec<u64>)> = Vec::new();
    for &r in ranks {
        let q = (r as f64 + 0.5) / n as f64;
        let p = q * s as f64 - 0.5;
        let sd = (s as f64 * q * (1.0 - q)).sqrt() + 1.0;
        // Sample indices; -1 and s stand for "unbounded".
        let a = ((p - sigmas * sd).floor() as i64 - 1).max(-1);
        let b = ((p + sigmas * sd).ceil() as i64 + 1).min(s as i64);
        match ws.last_mut() {
            Some(last) if a <= last.1 + 1 => {
                last.1 = last.1.max(b);
                last.2.push(r);
            }
            _ => ws.push((a, b, vec![r])),
        }
    }
    if ws.len() > BRACKET_WINDOWS {
        return Vec::new();
    }
    let out: Vec<Window> = ws
        .into_iter()
        .map(|(a, b, ranks)| {
            // Keys between two sample order statistics m apart: about m / (s + 1) of
            // them, standard deviation about sqrt(m) / (s + 1); 4 deviations of slack.
            let m = (b - a) as f64;
            let cap = (((m + 4.0 * m.sqrt() + 8.0) / (s as f64 + 1.0)) * n as f64).ceil() as u64;
            Window { a: (a >= 0).then_some(a as u64), b: (b < s as i64).then_some(b as u64), ranks, cap: cap.min(n) }
        })
        .collect();
    if out.iter().map(|w| w.cap).sum::<u64>() as f64 > BRACKET_MAX_SHARE * n as f64 {
        return Vec::new();
    }
    out
}

/// The bracketing level (select.wgsl, section `window`): sample, sort the sample,
/// one pass counting and copying the keys of each rank's window, one readback. Returns the
/// first tasks (one per window holding a rank) and where the descent starts, or
/// `None` when bracketing does not apply or did not pin every rank to a window
/// (the caller then runs the plain descent).
fn bracket<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    whole: &Task,
    opts: &SelectOptions,
    clock: &mut GpuClock,
) -> GpuResult<Option<(Vec<Task>, Start)>> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let (s, kb) = (kern.s as u64, kern.kb as u64);
    let n = whole.n;
    if n < opts.bracket_min as u64 || n < 8 * s || whole.lo != 0 {
        return Ok(None);
    }
    let mut uniq: Vec<u64> = whole.ranks.iter().map(|x| x.1).collect();
    uniq.sort_unstable();
    uniq.dedup();
    let windows = bracket_windows(n, s, &uniq, opts.bracket_sigmas);
    let total_cap: u64 = windows.iter().map(|w| w.cap).sum();
    let max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    if windows.is_empty() || total_cap * kb > max_binding {
        return Ok(None);
    }
    let p_gather = kern.pipe(ctx, "gather", "gather")?;
    let p_sort = kern.sort_pipe(ctx)?;
    let nwin = windows.len();
    let nw_def = [("NWIN", nwin.to_string())];
    let p_count = kern.pipe_with(ctx, "window", "window_count", &nw_def)?;
    let p_copy = kern.pipe_with(ctx, "window", "window_copy", &nw_def)?;
    let ps = pieces(input, len, &[], whole);
    let mut scratch = Scratch { ctx, bytes: 0 };
    let samples = scratch.alloc(s * kb)?;
    let sorted = scratch.alloc(s * kb)?;
    let counts = scratch.alloc(8 * BRACKET_WINDOWS as u64 * 4)?;
    let wout = scratch.alloc(total_cap * kb)?;
    let total_groups: u64 = ps.iter().map(|p| (p.2 as u64).div_ceil(CHUNK as u64)).sum();
    let per_group = scratch.alloc(total_groups * nwin as u64 * 4)?;
    let mut wp: WinParams = bytemuck::Zeroable::zeroed();
    for (i, w) in windows.iter().enumerate() {
        wp.lo_idx[i] = w.a.map_or(NONE, |a| a as u32);
        wp.hi_idx[i] = w.b.map_or(NONE, |b| b as u32);
    }
    // The windows' regions back to back in one buffer, `sizes[i]` keys each.
    let lay_out = |wp: &mut WinParams, sizes: &mut dyn Iterator<Item = u64>| {
        let mut acc = 0u64;
        for (i, sz) in sizes.enumerate() {
            wp.woff[i] = acc as u32;
            wp.cap[i] = sz as u32;
            acc += sz;
        }
    };
    lay_out(&mut wp, &mut windows.iter().map(|w| w.cap));
    let mut enc = ctx.encoder("select-bracket");
    enc.clear_buffer(counts.raw(), 0, None);
    let (mut r_sample, mut r_sort, mut r_count, mut r_copy) = (Rec::new(ctx), Rec::new(ctx), Rec::new(ctx), Rec::new(ctx));
    // The copy pass over every piece, with the windows' regions of `wp` in `out`.
    let copy_dispatches = |r: &mut Rec<'_>, wp: &WinParams, out: &GpuBuffer| -> GpuResult<()> {
        let mut wg_base = 0u64;
        for &(buf, off, pn) in &ps {
            let groups = (pn as u64).div_ceil(CHUNK as u64);
            let ub = uni(ctx, &WinParams { off, n: pn, wg_base: wg_base as u32, ..*wp });
            r.dispatch(&p_copy, &[(0, buf), (1, sorted.raw()), (2, counts.raw()), (3, &ub), (4, out.raw()), (5, per_group.raw())], groups)?;
            wg_base += groups;
        }
        Ok(())
    };
    let mut taken = 0u64;
    let mut wg_base = 0u64;
    for (pi, &(buf, off, pn)) in ps.iter().enumerate() {
        let cnt = if pi + 1 == ps.len() { s - taken } else { s * pn as u64 / n };
        let seed = opts.seed ^ 0x5bd1_e995 ^ (pi as u32);
        let ub = uni(ctx, &Params { off, n: pn, cnt: cnt as u32, dst_off: taken as u32, seed, task: 0, mode: 0, pad: 0 });
        r_sample.dispatch(&p_gather, &[(0, buf), (1, samples.raw()), (2, &ub)], cnt.div_ceil(WG as u64))?;
        taken += cnt;
        let groups = (pn as u64).div_ceil(CHUNK as u64);
        let ub = uni(ctx, &WinParams { off, n: pn, wg_base: wg_base as u32, ..wp });
        // The count pass does not use binding 4 (not in its layout).
        r_count.dispatch(&p_count, &[(0, buf), (1, sorted.raw()), (2, counts.raw()), (3, &ub), (5, per_group.raw())], groups)?;
        wg_base += groups;
    }
    copy_dispatches(&mut r_copy, &wp, &wout)?;
    let ub = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    r_sort.dispatch(&p_sort, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?;
    clock.submit(ctx, enc, &[&r_sample, &r_sort, &r_count, &r_copy])?;
    clock.mark(ctx, format_args!("bracket sample+sort+window ({} windows)", windows.len()))?;
    let c: Vec<u32> = read_buf(ctx, counts.raw(), 8 * BRACKET_WINDOWS)?;
    clock.mark(ctx, format_args!("bracket read counts"))?;

    let word = |w: usize, at: usize| K::from_u64(c[8 * w + at] as u64 | ((c[8 * w + at + 1] as u64) << 32));
    let mut answered = Vec::new();
    // Per window: Some(ranks to descend into) when its keys are needed.
    let mut needed: Vec<Option<Vec<(usize, u64)>>> = vec![None; nwin];
    for (wi, w) in windows.iter().enumerate() {
        let (below, inside) = (c[8 * wi] as u64, c[8 * wi + 1] as u64);
        let (lo, hi) = (word(wi, 2), word(wi, 4));
        if wi + 1 < nwin {
            // Windows must be disjoint in key space: the next one starts above this one.
            let next_lo = word(wi + 1, 2);
            if w.b.is_none() || windows[wi + 1].a.is_none() || next_lo <= hi {
                return Ok(None);
            }
        }
        let mine: Vec<(usize, u64)> = whole.ranks.iter().copied().filter(|x| w.ranks.contains(&x.1)).collect();
        if mine.iter().any(|&(_, r)| !(below <= r && r < below + inside)) {
            // The sample missed: a rank lies outside its window.
            return Ok(None);
        }
        if w.a.is_some() && w.b.is_some() && lo == hi {
            // A window of one value answers its ranks at once.
            answered.extend(mine.iter().map(|&(i, _)| (i, lo.to_u64())));
        } else if !mine.is_empty() {
            needed[wi] = Some(mine);
        }
    }
    let inside = |wi: usize| c[8 * wi + 1] as u64;
    let overflow = (0..nwin).any(|wi| needed[wi].is_some() && inside(wi) > windows[wi].cap);
    let (wout, wp) = if !overflow {
        (wout, wp)
    } else {
        // Ties at the bounds made a window larger than its region: copy again into
        // regions of the exact sizes (the counts stay valid), unless that is too much.
        let sizes: Vec<u64> = (0..nwin).map(|wi| if needed[wi].is_some() { inside(wi) } else { 0 }).collect();
        let total: u64 = sizes.iter().sum();
        if total as f64 > BRACKET_MAX_SHARE * n as f64 || total * kb > max_binding {
            return Ok(None);
        }
        scratch.bytes -= wout.size();
        drop(wout);
        let wout = scratch.alloc(total * kb)?;
        let mut wp2 = wp;
        lay_out(&mut wp2, &mut sizes.iter().copied());
        let mut enc = ctx.encoder("select-bracket-recopy");
        for wi in 0..nwin {
            enc.clear_buffer(counts.raw(), (8 * wi as u64 + 6) * 4, Some(4));
        }
        let mut r_copy = Rec::new(ctx);
        copy_dispatches(&mut r_copy, &wp2, &wout)?;
        clock.submit(ctx, enc, &[&r_copy])?;
        clock.mark(ctx, format_args!("bracket copy again ({total} keys)"))?;
        (wout, wp2)
    };
    let mut tasks: Vec<Task> = Vec::new();
    for (wi, ranks) in needed.into_iter().enumerate() {
        if let Some(ranks) = ranks {
            let below = c[8 * wi] as u64;
            tasks.push(Task { src: Src::Buf { buf: 0, off: wp.woff[wi] as u64 }, n: inside(wi), lo: below, ranks, below: None, above: None });
        }
    }
    let bytes = scratch.bytes;
    drop((samples, sorted, counts, per_group));
    BRACKETED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(Some((tasks, Start { bufs: vec![wout], level: 1, bytes, answered })))
}

// ---------------------------------------------------------------------------------
// The chain: bracketing levels decided on the device (select.wgsl, section chain)
// ---------------------------------------------------------------------------------

/// Largest distance between the smallest and the largest rank of a chain.
pub const CHAIN_MAX_SPAN: u64 = 64;
/// Sample size of a chain's levels after the first (their regions hold a few
/// percent of the input, and a sort of 1024 keys costs a fraction of one of 4096).
const CHAIN_LATER_SAMPLE: u32 = 1024;
/// Most levels of a chain (ChainU.cap holds 16).
const CHAIN_MAX_LEVELS: usize = 16;

/// One input segment of a chain's first level (select.wgsl PieceU).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct PieceU {
    off: u32,
    n: u32,
    row0: u32,
    dst: u32,
    cnt: u32,
    wg_base: u32,
    pad: [u32; 2],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ChainU {
    rlo: u32,
    rhi: u32,
    topk: u32,
    seed: u32,
    sig: f32,
    pad: [u32; 3],
    cap: [u32; CHAIN_MAX_LEVELS],
}

static CHAINED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Chains in this process that answered their call (a diagnostic counter: tests
/// check that a path really ran as a chain).
pub fn chained_total() -> u64 {
    CHAINED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Capacities of a chain's regions, level by level, for `n` keys, samples of `s1`
/// keys on the first level and `s2` later, ranks `rlo ..= rhi` (`topk`: windows open below) and windows of `sig` standard
/// deviations: each bounds the keys of the level's window (expected size plus four
/// standard deviations, as [`bracket_windows`]) given the previous bound as the
/// region's size, and is at least `s2` so a region the device copies whole fits.
/// The last is `s2` (the final sort's size). `None` when that takes more than
/// [`CHAIN_MAX_LEVELS`] levels or a level would not shrink its region.
fn chain_caps(n: u64, s1: u64, s2: u64, rlo: u64, rhi: u64, topk: bool, sig: f64) -> Option<Vec<u64>> {
    let mut caps = Vec::new();
    let mut m = n;
    while m > s2 {
        // The first level samples s1 keys, later levels s2.
        let sf = if caps.is_empty() { s1 } else { s2 } as f64;
        let mf = m as f64;
        // Sample indices spanned by the window: the device's a and b (ch_plan) with
        // the largest standard deviation the ranks can have in a region of m keys.
        let mw = if topk {
            let q = ((rhi as f64 + 0.5) / mf).min(1.0);
            let sd = (sf * q * (1.0 - q)).sqrt() + 1.0;
            q * sf + sig * sd + 3.0
        } else {
            let sd = (sf * 0.25).sqrt() + 1.0;
            (rhi - rlo) as f64 / mf * sf + 2.0 * sig * sd + 4.0
        };
        let cap = (((mw + 4.0 * mw.sqrt() + 8.0) / (sf + 1.0)) * mf).ceil() as u64;
        let cap = cap.max(s2);
        if cap >= m || caps.len() == CHAIN_MAX_LEVELS {
            return None;
        }
        caps.push(cap);
        m = cap;
    }
    Some(caps)
}

/// The parameters of a first level's input pieces (`ps`, of `n` keys in all), one
/// buffer each: offsets, first rows, each piece's share of the `s` samples, and its
/// first workgroup (of CHUNK keys) among all pieces'.
fn piece_params(ps: &[(&wgpu::Buffer, u32, u32)], s: u64, n: u64, scratch: &mut Scratch<'_>) -> GpuResult<Vec<GpuBuffer>> {
    let mut bufs = Vec::with_capacity(ps.len());
    let (mut row0, mut taken, mut wg_base) = (0u64, 0u64, 0u64);
    for (pi, &(_, off, pn)) in ps.iter().enumerate() {
        let cnt = if pi + 1 == ps.len() { s - taken } else { s * pn as u64 / n };
        let pu = PieceU { off, n: pn, row0: row0 as u32, dst: taken as u32, cnt: cnt as u32, wg_base: wg_base as u32, pad: [0; 2] };
        bufs.push(scratch.with_data(bytemuck::bytes_of(&pu))?);
        row0 += pn as u64;
        taken += cnt;
        wg_base += (pn as u64).div_ceil(CHUNK as u64);
    }
    Ok(bufs)
}

/// The pipelines of a chain's first level: one fused pass, or count and copy.
enum FirstPipes {
    Fused(Arc<wgpu::ComputePipeline>),
    TwoPass(Arc<wgpu::ComputePipeline>, Arc<wgpu::ComputePipeline>),
}

/// What a chain found.
enum ChainEnd<K> {
    /// The last region sorted (at most S keys), the number of input keys below it,
    /// and the tightest upper bound of its window (`None`: never bounded).
    Region(Vec<K>, u64, Option<K>),
    /// A one-value window held every rank: its value.
    One(K),
}

/// Runs a chain for ranks `rlo ..= rhi` of the first `len` keys of `input`
/// (select.wgsl, section chain). `pack`: the input holds 32-bit keys, the chain's
/// keys `K` (64-bit) are each key above its row index, and windows are open below
/// (top-k). `Ok(None)`: the chain does not apply or stopped (the sample missed, a
/// window overflowed); the caller runs the host-driven descent.
#[allow(clippy::too_many_arguments)]
fn chain<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    rlo: u64,
    rhi: u64,
    pack: bool,
    opts: &SelectOptions,
    clock: &mut GpuClock,
    scratch: &mut Scratch<'_>,
) -> GpuResult<Option<(ChainEnd<K>, u32)>> {
    let t0 = Instant::now();
    // The first level samples S keys; later levels (regions of at most a few
    // percent of the input) sample fewer, whose sorts are cheaper.
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    // (A top-k's last region holds k keys and more, so large k keep S.)
    let later = if pack && rhi + 1 > (CHAIN_LATER_SAMPLE / 4) as u64 { opts.max_sample } else { opts.max_sample.min(CHAIN_LATER_SAMPLE) };
    let kern2 = Kern::new(ctx, K::BYTES, &SelectOptions { max_sample: later, ..*opts })?;
    let (s, s2, kb) = (kern.s as u64, kern2.s as u64, kern.kb as u64);
    let n = len as u64;
    if len < opts.chain_min || n <= 2 * s || rhi < rlo || rhi - rlo > CHAIN_MAX_SPAN || rhi >= n {
        return Ok(None);
    }
    let whole = Task { src: Src::Input, n, lo: 0, ranks: Vec::new(), below: None, above: None };
    let ps = pieces(input, len, &[], &whole);
    if pack && input.elem_size() != 4 {
        return Ok(None);
    }
    let Some(caps) = chain_caps(n, s, s2, rlo, rhi, pack, opts.bracket_sigmas) else {
        return Ok(None);
    };
    let max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    if caps[0] * kb > max_binding {
        return Ok(None);
    }
    let (src_ty, src_key) = match (pack, kern.repr) {
        (false, _) => ("K", "return x;"),
        (true, Repr::U64) => ("u32", "return (u64(x) << 32u) | u64(row);"),
        (true, Repr::U64Emu) => ("u32", "return vec2<u32>(row, x);"),
        (true, Repr::U32) => return Ok(None),
    };
    let defs = [("SRC", src_ty.to_string()), ("SRCKEY", src_key.to_string()), ("SLOT", s.to_string())];
    let pipe = |sections: &str, entry: &str| kern.pipe_with(ctx, sections, entry, &defs);
    let pipe2 = |sections: &str, entry: &str| kern2.pipe_with(ctx, sections, entry, &defs);
    let p_gather1 = pipe("chain+chfirst+chgather", "ch_gather")?;
    let p_gather = pipe2("chain+chnext+chgather", "ch_gather")?;
    let p_sort1 = kern.sort_pipe(ctx)?;
    let p_sort = kern2.sort_pipe(ctx)?;
    let p_plan1 = pipe("chain+chplan", "ch_plan")?;
    let p_plan = pipe2("chain+chplan", "ch_plan")?;
    let p_window = pipe2("chain+chnext+chwindow", "ch_window")?;
    // The first level as one pass: each workgroup counts its chunk, reserves its
    // slots and copies, reading the chunk twice (the second read mostly from the
    // cache). On the H100 this took the 2^28 median from 1.93 to 1.34 ms and
    // top-100 from 1.59 to 1.25 ms against a count pass and a copy pass
    // (BENCHMARKS.md, session 12; earlier sessions measured the opposite with
    // per-pass timestamps, which slowed the GPU's clock). RIDGELINE_CHAIN_FUSED=0:
    // the two passes (kept for comparison).
    let p_first = if std::env::var_os("RIDGELINE_CHAIN_FUSED").is_none_or(|v| v != "0") {
        FirstPipes::Fused(pipe("chain+chfirst+chwindow", "ch_window")?)
    } else {
        FirstPipes::TwoPass(pipe("chain+chfirst+chwindow", "ch_count1")?, pipe("chain+chfirst+chwindow", "ch_copy1")?)
    };
    let p_check = pipe2("chain+chnext+chwindow", "ch_check")?;
    let p_pad = pipe2("chain+chnext+chwindow", "ch_pad")?;

    let t_pipes = t0.elapsed();
    let mut u: ChainU = bytemuck::Zeroable::zeroed();
    u.rlo = rlo as u32;
    u.rhi = rhi as u32;
    u.topk = pack as u32;
    u.seed = opts.seed ^ 0x27d4_eb2f;
    u.sig = opts.bracket_sigmas as f32;
    for (l, &c) in caps.iter().enumerate() {
        u.cap[l] = c as u32;
    }
    let ubuf = scratch.with_data(bytemuck::bytes_of(&u))?;
    let mut st0 = [0u32; 8];
    st0[0] = n as u32;
    let st = scratch.with_data(bytemuck::cast_slice(&st0))?;
    // The gathered sample; the sorted sample, lo, hi and the sorted final region
    // (lo starts at the smallest key, hi at the largest).
    let raw_smp = scratch.alloc(s * kb)?;
    let smp = scratch.alloc((s + 2 + s2) * kb)?;
    let mut bounds = vec![0u8; 2 * kb as usize];
    bounds[kb as usize..].fill(0xff);
    ctx.write_small(smp.raw(), s * kb, &bounds)?;
    let args = scratch.alloc(16)?;
    let regions = [scratch.alloc(caps[0] * kb)?, scratch.alloc(caps.get(1).copied().unwrap_or(1).max(s2) * kb)?];
    let groups1: u64 = ps.iter().map(|p| (p.2 as u64).div_ceil(CHUNK as u64)).sum();
    let per_group = scratch.alloc(groups1 * 4)?;

    let t_bufs = t0.elapsed();
    let bg = |p: &Arc<wgpu::ComputePipeline>, e: &[(u32, &wgpu::Buffer)]| lap("bind group", || bind(ctx, p, e));
    let (stb, smpb, rawb, ub, argb, wgb) = (st.raw(), smp.raw(), raw_smp.raw(), ubuf.raw(), args.raw(), per_group.raw());
    // Per input piece: its parameters, and the first level's gather and passes.
    let piece_bufs = piece_params(&ps, s, n, scratch)?;
    struct First {
        gather: wgpu::BindGroup,
        // The fused pass's bind group, or the count and copy passes'.
        passes: Vec<wgpu::BindGroup>,
        n: u64,
    }
    let first: Vec<First> = ps
        .iter()
        .zip(&piece_bufs)
        .map(|(&(inbuf, _, pn), pb)| {
            let (pb, r0) = (pb.raw(), regions[0].raw());
            First {
                gather: bg(&p_gather1, &[(0, inbuf), (3, stb), (4, rawb), (5, ub), (7, pb)]),
                passes: match &p_first {
                    FirstPipes::Fused(p) => vec![bg(p, &[(0, inbuf), (2, r0), (3, stb), (4, smpb), (5, ub), (7, pb)])],
                    FirstPipes::TwoPass(count, copy) => vec![
                        bg(count, &[(0, inbuf), (3, stb), (4, smpb), (7, pb), (8, wgb)]),
                        bg(copy, &[(0, inbuf), (2, r0), (3, stb), (4, smpb), (5, ub), (7, pb), (8, wgb)]),
                    ],
                },
                n: pn as u64,
            }
        })
        .collect();
    let g_gather = [0, 1].map(|i| bg(&p_gather, &[(1, regions[i].raw()), (3, stb), (4, rawb), (5, ub)]));
    let sort_u1 = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort1 = bg(&p_sort1, &[(0, rawb), (1, smpb), (2, &sort_u1)]);
    let sort_u = uni(ctx, &Params { off: 0, n: s2 as u32, cnt: s2 as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort = bg(&p_sort, &[(0, rawb), (1, smpb), (2, &sort_u)]);
    let g_plan1 = bg(&p_plan1, &[(3, stb), (4, smpb), (5, ub), (6, argb)]);
    let g_plan = bg(&p_plan, &[(3, stb), (4, smpb), (5, ub), (6, argb)]);
    let g_window = [0, 1].map(|i| bg(&p_window, &[(1, regions[i].raw()), (2, regions[1 - i].raw()), (3, stb), (4, smpb), (5, ub)]));
    let g_check = bg(&p_check, &[(3, stb), (4, smpb), (5, ub)]);
    let gather_groups1 = Dims::Direct((s as u32).div_ceil(WG), 1, 1);
    let gather_groups = Dims::Direct((s2 as u32).div_ceil(WG), 1, 1);
    let one = Dims::Direct(1, 1, 1);
    // RIDGELINE_CHAIN_PASSES (a diagnosis aid, with timestamp queries): every
    // dispatch in its own timed pass, the times printed.
    let passes = std::env::var_os("RIDGELINE_CHAIN_PASSES").is_some() && ctx.has_timestamps();
    let mut recs: Vec<(String, Rec<'_>)> = vec![("chain".into(), Rec::new(ctx))];
    let mut push = |what: String, p: &Arc<wgpu::ComputePipeline>, g: &wgpu::BindGroup, d: Dims| {
        if passes {
            recs.push((what, Rec::new(ctx)));
        }
        recs.last_mut().expect("a pass").1.push(p, g, d);
    };
    let max = ctx.limits().max_compute_workgroups_per_dimension.max(1);
    for l in 0..caps.len() {
        // Level l reads the input (l = 0, one dispatch per piece) or region
        // (l - 1) % 2, and writes region l % 2.
        if l == 0 {
            for f in &first {
                push(format!("{l} gather"), &p_gather1, &f.gather, gather_groups1.clone());
            }
            push(format!("{l} sort"), &p_sort1, &g_sort1, one.clone());
            push(format!("{l} plan"), &p_plan1, &g_plan1, one.clone());
        } else {
            push(format!("{l} gather"), &p_gather, &g_gather[(l - 1) % 2], gather_groups.clone());
            push(format!("{l} sort"), &p_sort, &g_sort, one.clone());
            push(format!("{l} plan"), &p_plan, &g_plan, one.clone());
        }
        if l == 0 {
            let dims = |f: &First| {
                let (x, y, z) = dispatch_dims(f.n.div_ceil(CHUNK as u64), max);
                Dims::Direct(x, y, z)
            };
            // Two passes: every piece's count, then every piece's copy.
            let steps: Vec<(&str, &Arc<wgpu::ComputePipeline>)> = match &p_first {
                FirstPipes::Fused(p) => vec![("window", p)],
                FirstPipes::TwoPass(count, copy) => vec![("count", count), ("copy", copy)],
            };
            for (i, (what, p)) in steps.into_iter().enumerate() {
                for f in &first {
                    push(format!("{l} {what}"), p, &f.passes[i], dims(f));
                }
            }
        } else {
            push(format!("{l} window"), &p_window, &g_window[(l - 1) % 2], Dims::Indirect(argb.clone(), 0));
        }
        push(format!("{l} check"), &p_check, &g_check, one.clone());
    }
    // The last region padded to S keys and sorted behind lo and hi.
    let last = regions[(caps.len() - 1) % 2].raw();
    let g_pad = bg(&p_pad, &[(2, last), (3, stb)]);
    push("pad".into(), &p_pad, &g_pad, gather_groups.clone());
    let final_u = uni(ctx, &Params { off: 0, n: s2 as u32, cnt: s2 as u32, dst_off: (s + 2) as u32, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_final = bg(&p_sort, &[(0, last), (1, smpb), (2, &final_u)]);
    push("final sort".into(), &p_sort, &g_final, one);
    if profiling() {
        eprintln!(
            "select-profile   chain host: kernels {:.3} ms, buffers {:.3} ms, all {:.3} ms",
            t_pipes.as_secs_f64() * 1e3,
            (t_bufs - t_pipes).as_secs_f64() * 1e3,
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    clock.mark(ctx, format_args!("chain record ({} levels)", caps.len()))?;
    if passes {
        let mut enc = ctx.encoder("select-chain");
        let timer = crate::timing::KernelTimer::new(ctx, recs.len() as u32).ok_or_else(|| GpuError::Invalid("no timer".into()))?;
        for (i, (_, r)) in recs.iter().enumerate() {
            r.encode(&mut enc, timer.writes(i as u32));
        }
        timer.resolve(&mut enc);
        ctx.submit(enc)?;
        let ms = timer.read_ms(ctx)?;
        let line: Vec<String> = recs.iter().zip(&ms).skip(1).map(|((w, _), t)| format!("{w} {t:.3}")).collect();
        eprintln!("chain passes (n {n}, ms): {}", line.join(", "));
    } else {
        let all: Vec<&Rec<'_>> = recs.iter().map(|r| &r.1).collect();
        clock.submit(ctx, ctx.encoder("select-chain"), &all)?;
    }
    clock.mark(ctx, format_args!("chain kernels"))?;
    // One readback: the state words, then lo, hi and the final region.
    let st_bytes = 8 * 4;
    let tail = (2 + s2) * kb;
    let mut raw = vec![0u32; ((st_bytes + tail) / 4) as usize];
    lap("download", || {
        ctx.download_stream(
            &[
                Extent { buffer: stb, offset: 0, stream_offset: 0, len: st_bytes },
                Extent { buffer: smpb, offset: s * kb, stream_offset: st_bytes, len: tail },
            ],
            bytemuck::cast_slice_mut(&mut raw),
        )
    })?;
    clock.mark(ctx, format_args!("chain readback"))?;
    let (m, shift, fail, done, levels) = (raw[0] as u64, raw[1] as u64, raw[2], raw[3], raw[4]);
    let keys: Vec<K> = bytemuck::cast_slice::<u32, u8>(&raw[8..]).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    let (lo, hi) = (keys[0], keys[1]);
    if fail != 0 {
        return Ok(None);
    }
    CHAINED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if done != 0 {
        return Ok(Some((ChainEnd::One(lo), levels + 1)));
    }
    if m > s2 || shift > rlo || rhi - shift >= m {
        return Err(GpuError::Validation(format!("chain ended with {m} keys above {shift} for ranks {rlo}..={rhi}")));
    }
    let hi = (hi.to_u64() != K::MAX.to_u64()).then_some(hi);
    Ok(Some((ChainEnd::Region(keys[2..2 + m as usize].to_vec(), shift, hi), levels + 1)))
}

/// Most windows of a one-pass approximate selection (select.wgsl section approx).
const APPROX_MAX_WINDOWS: usize = 8;
/// Keys per invocation and chunk of its pass (4: 0.77 ms a median at 2^28 on the
/// H100 against 0.87 with 2 and 0.93 with 8, interleaved calls of one run,
/// BENCHMARKS.md session 13; the key-cell pass: 4 and 8 within noise of each
/// other over three runs, 2 slower, session 14).
pub const APPROX_ITEMS: u32 = 4;
/// Default half-width of the one pass's windows, in standard deviations of the
/// sample rank (3: a window misses its rank about once in 300 calls, which the
/// chain then answers; 5% faster than 4 at 2^28 on the H100, BENCHMARKS.md
/// session 13).
pub const APPROX_SIGMAS: f64 = 3.0;
/// Default half-width of the key-cell pass's windows (4 sd: a window misses its
/// rank about once in 15,000 calls; as fast as 2.5 or 3 at 2^28 on the H100,
/// BENCHMARKS.md session 14).
pub const APPROX_CELL_SIGMAS: f64 = 4.0;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ApU {
    first: [u32; APPROX_MAX_WINDOWS],
    len: [u32; APPROX_MAX_WINDOWS],
    off: [u32; APPROX_MAX_WINDOWS],
}

/// Cells of key space a one pass holds, all windows together (4 KiB).
const APPROX_CELLS: u64 = 1024;

/// The shift of a window of cells spanning `span` + 1 keys (select.wgsl's kc_shift):
/// the least that leaves at most `cw` cells.
fn kc_shift(span: u32, cw: u64) -> u32 {
    if (span as u64) < cw {
        0
    } else {
        32 - span.leading_zeros() - cw.trailing_zeros()
    }
}

/// Answers of the key-cell pass (select.wgsl, section approxkc): every sample key of
/// a window lies in a cell whose rank range the counts give, so its copies' ranks
/// are in that range; each rank is answered by the sample key whose range reaches
/// least far from it. Cells of width 1 (shift 0) hold one key's copies only, so
/// their ranges are exact: a rank inside one is answered with error 0. Returns the
/// answers and the largest error bound, or `None` where some bound exceeds
/// `allowed` (cells too coarse in rank).
fn cells_answer<K: SelectKey>(
    n: u64,
    wins: &[(u64, u64)],
    counts: &[u32],
    cw: u64,
    sample: &[K],
    uniq: &[u64],
    allowed: u64,
) -> GpuResult<Option<(Vec<K>, u64)>> {
    // (key, lowest and highest rank of its cell, the cell holds only this key).
    let mut cands: Vec<(K, u64, u64, bool)> = Vec::new();
    for (w, &(a, b)) in wins.iter().enumerate() {
        let lo = sample[a as usize].to_u64() as u32;
        let span = (sample[b as usize].to_u64() as u32).wrapping_sub(lo);
        let sh = kc_shift(span, cw);
        let bins = &counts[APPROX_MAX_WINDOWS + w * cw as usize..][..cw as usize];
        let mut pre = Vec::with_capacity(cw as usize + 1);
        let mut acc = counts[w] as u64;
        pre.push(acc);
        for &c in bins {
            acc += c as u64;
            pre.push(acc);
        }
        if acc > n {
            return Err(GpuError::Validation(format!("approximate selection counted {acc} keys of {n}")));
        }
        for y in &sample[a as usize..=b as usize] {
            let c = ((y.to_u64() as u32).wrapping_sub(lo) >> sh) as usize;
            if pre[c + 1] == pre[c] {
                return Err(GpuError::Validation(format!("sample key {y:?} missing from its cell's count")));
            }
            cands.push((*y, pre[c], pre[c + 1] - 1, sh == 0));
        }
    }
    let mut out = Vec::with_capacity(uniq.len());
    let mut worst = 0u64;
    for &r in uniq {
        let reach = |c: &(K, u64, u64, bool)| {
            if c.3 {
                c.1.saturating_sub(r).max(r.saturating_sub(c.2))
            } else {
                r.abs_diff(c.1).max(r.abs_diff(c.2))
            }
        };
        let Some(best) = cands.iter().min_by_key(|c| reach(c)) else {
            return Ok(None);
        };
        let d = reach(best);
        if d > allowed {
            return Ok(None);
        }
        worst = worst.max(d);
        out.push(best.0);
    }
    Ok(Some((out, worst)))
}

/// Windows of sorted-sample indices `[a, b]` around the sorted distinct `ranks` of
/// `n` keys with a sample of `s`, `sig` standard deviations of the sample rank
/// either side (and one index more), overlapping ones merged.
fn approx_windows(n: u64, s: u64, ranks: &[u64], sig: f64) -> Vec<(u64, u64)> {
    let mut w: Vec<(u64, u64)> = Vec::new();
    let (sf, nf) = (s as f64, n as f64);
    for &r in ranks {
        let q = (r as f64 + 0.5) / nf;
        let sd = (sf * q * (1.0 - q)).sqrt() + 1.0;
        let a = (q * sf - 0.5 - sig * sd).floor() - 1.0;
        let b = (q * sf - 0.5 + sig * sd).ceil() + 1.0;
        let (a, b) = (a.clamp(0.0, sf - 1.0) as u64, b.clamp(0.0, sf - 1.0) as u64);
        match w.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => w.push((a, b)),
        }
    }
    w
}

/// Approximate selection in one pass (select.wgsl, section approx): the sorted
/// sample's keys near each rank become splitters whose exact rank ranges one
/// histogram pass over the keys finds; each rank is answered by the nearest.
/// Returns the answers for the sorted distinct `uniq` ranks, the largest rank
/// error and the algorithm's name (which kernel ran), or `None` when it does not apply or
/// an error exceeds `allowed` (the sample missed a rank; the caller runs a descent).
#[allow(clippy::too_many_arguments)]
fn approx_hist<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    uniq: &[u64],
    allowed: u64,
    cells: bool,
    opts: &SelectOptions,
    clock: &mut GpuClock,
    scratch: &mut Scratch<'_>,
) -> GpuResult<Option<(Vec<K>, u64, &'static str)>> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let (s, kb) = (kern.s as u64, kern.kb as u64);
    let n = len as u64;
    if len < opts.approx_hist_min || n <= 4 * s || uniq.is_empty() {
        return Ok(None);
    }
    let wins = approx_windows(n, s, uniq, if cells && K::BYTES == 4 { opts.approx_cell_sigmas } else { opts.approx_sigmas });
    let total: u64 = wins.iter().map(|w| w.1 - w.0 + 1).sum();
    if wins.len() > APPROX_MAX_WINDOWS {
        return Ok(None);
    }
    // Splitters held (a power of two from 256, for few pipeline variants), within
    // the adapter's workgroup memory.
    let aw = total.next_power_of_two().max(256);
    let mem = ctx.limits().max_compute_workgroup_storage_size as u64;
    // Cells per window (all windows together APPROX_CELLS), and their memory.
    let cw = APPROX_CELLS >> wins.len().next_power_of_two().trailing_zeros();
    let cells = cells && K::BYTES == 4 && (wins.len() as u64 * cw) * 4 + 64 <= mem;
    // Keys per invocation and chunk, and the most workgroups (a diagnosis aid:
    // RIDGELINE_APPROX_ITEMS, RIDGELINE_APPROX_GROUPS).
    let env = |name: &str, dflt: u64| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok()).filter(|&v| v > 0).unwrap_or(dflt);
    let items = match opts.approx_hist_items {
        0 => env("RIDGELINE_APPROX_ITEMS", APPROX_ITEMS as u64),
        i => i as u64,
    }
    .min(32) as u32;
    let max_groups = match opts.approx_hist_groups {
        0 => env("RIDGELINE_APPROX_GROUPS", 8192),
        g => g as u64,
    }
    .min(65535);
    // Splitters, histogram and counters; the subgroup kernel also stages three
    // keys per invocation.
    let wg_mem = aw * kb + 2 * aw * 4 + 64;
    if wg_mem > mem {
        return Ok(None);
    }
    let sg = opts.approx_hist_subgroups && ctx.has_subgroup_barriers() && wg_mem + 3 * WG as u64 * kb <= mem;
    let whole = Task { src: Src::Input, n, lo: 0, ranks: Vec::new(), below: None, above: None };
    let ps = pieces(input, len, &[], &whole);
    let defs = [
        ("SRC", "K".to_string()),
        ("SRCKEY", "return x;".to_string()),
        ("SLOT", s.to_string()),
        ("NW", wins.len().to_string()),
        ("AW", aw.to_string()),
        ("AITEMS", items.to_string()),
        ("SGW", ctx.info().subgroup_max_size.div_ceil(32).clamp(1, 4).to_string()),
    ];
    let p_gather = kern.pipe_with(ctx, "chain+chfirst+chgather", "ch_gather", &defs[..3])?;
    let p_sort = kern.sort_pipe(ctx)?;
    let p_hist = if cells {
        let mut d = defs.to_vec();
        d.push(("KCW", cw.to_string()));
        kern.pipe_with(ctx, "chain+chfirst+approx+approxkc", "ap_hist_kc", &d)?
    } else if sg {
        kern.pipe_with(ctx, "chain+chfirst+approx+approxsg", "ap_hist_sg", &defs)?
    } else {
        kern.pipe_with(ctx, "chain+chfirst+approx", "ap_hist", &defs)?
    };

    let mut u: ApU = bytemuck::Zeroable::zeroed();
    let mut off = 0u64;
    for (i, &(a, b)) in wins.iter().enumerate() {
        u.first[i] = a as u32;
        u.len[i] = (b - a + 1) as u32;
        u.off[i] = off as u32;
        off += b - a + 1;
    }
    let ubuf = scratch.with_data(bytemuck::bytes_of(&u))?;
    // ch_gather reads the chain's state: keys in the region (above S: sample).
    let mut chu: ChainU = bytemuck::Zeroable::zeroed();
    chu.seed = opts.seed ^ 0x1656_67b1;
    let chbuf = scratch.with_data(bytemuck::bytes_of(&chu))?;
    let mut st0 = [0u32; 8];
    st0[0] = n as u32;
    let st = scratch.with_data(bytemuck::cast_slice(&st0))?;
    let raw_smp = scratch.alloc(s * kb)?;
    let smp = scratch.alloc(s * kb)?;
    let ncnt = APPROX_MAX_WINDOWS as u64 + if cells { wins.len() as u64 * cw } else { 2 * aw };
    let cnt = scratch.with_data(&vec![0u8; (ncnt * 4) as usize])?;
    let (stb, smpb, rawb, ub, chb, cntb) = (st.raw(), smp.raw(), raw_smp.raw(), ubuf.raw(), chbuf.raw(), cnt.raw());
    let mut rec = Rec::new(ctx);
    let piece_bufs = piece_params(&ps, s, n, scratch)?;
    for (&(inbuf, _, _), pb) in ps.iter().zip(&piece_bufs) {
        let g = bind(ctx, &p_gather, &[(0, inbuf), (3, stb), (4, rawb), (5, chb), (7, pb.raw())]);
        rec.push(&p_gather, &g, Dims::Direct((s as u32).div_ceil(WG), 1, 1));
    }
    let sort_u = uni(ctx, &Params { off: 0, n: s as u32, cnt: s as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let g_sort = bind(ctx, &p_sort, &[(0, rawb), (1, smpb), (2, &sort_u)]);
    rec.push(&p_sort, &g_sort, Dims::Direct(1, 1, 1));
    if profiling() {
        // The host's setup (pipelines, buffers, bind groups) before any submission,
        // then the sample on its own, so the profile shows the histogram pass alone.
        clock.mark(ctx, format_args!("approx setup"))?;
        clock.submit(ctx, ctx.encoder("select-approx-sample"), &[&rec])?;
        clock.mark(ctx, format_args!("approx sample"))?;
        rec = Rec::new(ctx);
    }
    // Workgroups loop over chunks: enough to fill a large GPU, few enough that the
    // per-workgroup histogram flushes stay a small part of the pass.
    for (&(inbuf, _, pn), pb) in ps.iter().zip(&piece_bufs) {
        let chunks = (pn as u64).div_ceil((WG * items) as u64);
        let g = bind(ctx, &p_hist, &[(0, inbuf), (4, smpb), (7, pb.raw()), (9, ub), (10, cntb)]);
        rec.push(&p_hist, &g, Dims::Direct(chunks.clamp(1, max_groups) as u32, 1, 1));
    }
    clock.mark(ctx, format_args!("approx record ({} windows, {total} splitters)", wins.len()))?;
    clock.submit(ctx, ctx.encoder("select-approx"), &[&rec])?;
    clock.mark(ctx, format_args!("approx kernels"))?;
    let cnt_bytes = ncnt * 4;
    let mut raw = vec![0u32; ((cnt_bytes + s * kb) / 4) as usize];
    lap("download", || {
        ctx.download_stream(
            &[
                Extent { buffer: cntb, offset: 0, stream_offset: 0, len: cnt_bytes },
                Extent { buffer: smpb, offset: 0, stream_offset: cnt_bytes, len: s * kb },
            ],
            bytemuck::cast_slice_mut(&mut raw),
        )
    })?;
    clock.mark(ctx, format_args!("approx readback"))?;
    let (counts, rest) = raw.split_at(ncnt as usize);
    let sample: Vec<K> = bytemuck::cast_slice::<u32, u8>(rest).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    if cells {
        return Ok(cells_answer(n, &wins, counts, cw, &sample, uniq, allowed)?.map(|(v, e)| (v, e, "gpu-sampleselect-approx-1pass-cells")));
    }
    // Rank ranges of the windows' distinct keys: (key, first rank, last rank).
    let bins = &counts[APPROX_MAX_WINDOWS..];
    let mut cands: Vec<(K, u64, u64)> = Vec::new();
    for (w, &(a, b)) in wins.iter().enumerate() {
        let o = u.off[w] as usize;
        let mut lt = counts[w] as u64;
        // A key equal to a later window's first key was counted there.
        let next_lo = wins.get(w + 1).map(|&(a2, _)| sample[a2 as usize]);
        for (t, j) in (a as usize..=b as usize).enumerate() {
            let v = sample[j];
            let g = o + t;
            if t > 0 {
                lt += bins[2 * g] as u64;
                if v == sample[j - 1] {
                    continue;
                }
            }
            let eq = bins[2 * g + 1] as u64;
            if next_lo != Some(v) && eq > 0 {
                cands.push((v, lt, lt + eq - 1));
            }
            lt += eq;
        }
        if lt > n {
            return Err(GpuError::Validation(format!("approximate selection counted {lt} keys of {n}")));
        }
    }
    let mut out = Vec::with_capacity(uniq.len());
    let mut worst = 0u64;
    for &r in uniq {
        let dist = |c: &(K, u64, u64)| if r < c.1 { c.1 - r } else { r.saturating_sub(c.2) };
        let Some(best) = cands.iter().min_by_key(|c| dist(c)) else {
            return Ok(None);
        };
        let d = dist(best);
        if d > allowed {
            return Ok(None);
        }
        worst = worst.max(d);
        out.push(best.0);
    }
    let algorithm = if sg { "gpu-sampleselect-approx-1pass-subgroup" } else { "gpu-sampleselect-approx-1pass" };
    Ok(Some((out, worst, algorithm)))
}

/// The SampleSelect descent from the first-level `tasks` (every rank of a task
/// relative to the task's source, `lo` 0), filling `nout` answers.
#[allow(clippy::too_many_arguments)]
fn sample_select_tasks<K: SelectKey>(
    ctx: &GpuContext,
    input: &DeviceArray,
    len: usize,
    mut tasks: Vec<Task>,
    nout: usize,
    approx: Option<u64>,
    opts: &SelectOptions,
    mut clock: GpuClock,
    start: Start,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let algorithm = if approx.is_some() { "gpu-sampleselect-approx" } else { "gpu-sampleselect" };
    let mut stats = SelectStats { algorithm, ..Default::default() };
    let mut out = vec![K::default(); nout];
    for &(i, v) in &start.answered {
        out[i] = K::from_u64(v);
    }
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let (s, ns, nb, kb) = (kern.s as u64, kern.ns as u64, kern.nb() as u64, kern.kb as u64);
    let p_gather = kern.pipe(ctx, "gather", "gather")?;
    let p_sort = kern.sort_pipe(ctx)?;
    let p_count = kern.pipe(ctx, "bucket", "count")?;
    let p_filter = kern.pipe(ctx, "bucket", "filter_buckets")?;
    let (p_count_o, p_filter_o) = if opts.oracle {
        (Some(kern.pipe(ctx, "bucket+oracle", "count_oracle")?), Some(kern.pipe(ctx, "bucket+oracle", "filter_oracle")?))
    } else {
        (None, None)
    };
    let mut max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    if opts.max_filter_bytes > 0 {
        max_binding = max_binding.min(opts.max_filter_bytes);
    }

    let mut scratch = Scratch { ctx, bytes: start.bytes };
    let mut bufs: Vec<GpuBuffer> = start.bufs;
    let mut max_err = 0u64;
    let mut level = start.level;
    while !tasks.is_empty() {
        level += 1;
        if level > 64 {
            return Err(GpuError::Invalid("selection made no progress after 64 levels".into()));
        }
        // Base cases: at most S keys in one buffer (a small input spread over several
        // segments takes one bucketing level first).
        let (small, big): (Vec<Task>, Vec<Task>) =
            tasks.into_iter().partition(|t| t.n <= s && pieces(input, len, &bufs, t).len() == 1);
        let nbig = big.len() as u64;
        let samples = scratch.alloc(nbig * s * kb)?;
        let spl = scratch.alloc(nbig * ns * kb)?;
        let counts = scratch.alloc(nbig * nb * 4)?;
        let small_total: u64 = small.iter().map(|t| t.n).sum();
        let sorted = scratch.alloc(small_total * kb)?;

        let mut enc = ctx.encoder("select-level");
        enc.clear_buffer(counts.raw(), 0, None);
        let mut r_sample = Rec::new(ctx);
        let mut r_sort = Rec::new(ctx);
        let mut r_count = Rec::new(ctx);
        // Oracles of each task's pieces (none where the task does not use one).
        let mut oracles: Vec<Vec<GpuBuffer>> = Vec::with_capacity(big.len());
        for (ti, t) in big.iter().enumerate() {
            let ps = pieces(input, len, &bufs, t);
            let distinct = {
                let mut r: Vec<u64> = t.ranks.iter().map(|x| x.1).collect();
                r.sort_unstable();
                r.dedup();
                r.len()
            };
            let use_oracle = p_count_o.is_some() && distinct <= opts.oracle_max_ranks;
            let mut task_oracles = Vec::new();
            let mut taken = 0u64;
            for (pi, &(buf, off, n)) in ps.iter().enumerate() {
                let cnt = if pi + 1 == ps.len() { s - taken } else { s * n as u64 / t.n };
                let seed = opts.seed ^ (level.wrapping_mul(0x9e37_79b9)) ^ ((ti as u32) << 8) ^ (pi as u32);
                let ub = uni(ctx, &Params {
                    off,
                    n,
                    cnt: cnt as u32,
                    dst_off: (ti as u64 * s + taken) as u32,
                    seed,
                    task: ti as u32,
                    mode: 0,
                    pad: 0,
                });
                r_sample.dispatch(&p_gather, &[(0, buf), (1, samples.raw()), (2, &ub)], cnt.div_ceil(WG as u64))?;
                taken += cnt;
                let ub = uni(ctx, &Params { off, n, cnt: 0, dst_off: 0, seed: 0, task: ti as u32, mode: 0, pad: 0 });
                let groups = (n as u64).div_ceil(CCHUNK as u64);
                if let (true, Some(pc)) = (use_oracle, &p_count_o) {
                    // Whole blocks of WG words (the oracle's layout, select.wgsl).
                    let ob = scratch.alloc((n as u64).div_ceil(8 * WG as u64) * WG as u64 * 4)?;
                    r_count.dispatch(pc, &[(0, buf), (1, spl.raw()), (2, counts.raw()), (3, &ub), (7, ob.raw())], groups)?;
                    task_oracles.push(ob);
                } else {
                    r_count.dispatch(&p_count, &[(0, buf), (1, spl.raw()), (2, counts.raw()), (3, &ub)], groups)?;
                }
            }
            oracles.push(task_oracles);
            let ub = uni(ctx, &Params {
                off: (ti as u64 * s) as u32,
                n: s as u32,
                cnt: s as u32,
                dst_off: (ti as u64 * ns) as u32,
                seed: 0,
                task: ti as u32,
                mode: 1,
                pad: 0,
            });
            r_sort.dispatch(&p_sort, &[(0, samples.raw()), (1, spl.raw()), (2, &ub)], 1)?;
        }
        let mut small_off = Vec::with_capacity(small.len());
        let mut acc = 0u64;
        for t in &small {
            small_off.push(acc);
            let ps = pieces(input, len, &bufs, t);
            if ps.len() != 1 {
                return Err(GpuError::Invalid("a base-case task spans several segments".into()));
            }
            let (buf, off, n) = ps[0];
            let ub = uni(ctx, &Params { off, n, cnt: n, dst_off: acc as u32, seed: 0, task: 0, mode: 0, pad: 0 });
            r_sort.dispatch(&p_sort, &[(0, buf), (1, sorted.raw()), (2, &ub)], 1)?;
            acc += t.n;
        }
        clock.mark(ctx, format_args!("level {level} record ({} tasks)", big.len() + small.len()))?;
        clock.submit(ctx, enc, &[&r_sample, &r_sort, &r_count])?;
        clock.mark(ctx, format_args!("level {level} sample+sort+count"))?;

        // Base cases: read the sorted buckets, answer their ranks.
        if !small.is_empty() {
            let keys: Vec<K> = read_buf(ctx, sorted.raw(), small_total as usize)?;
            for (t, &o) in small.iter().zip(&small_off) {
                for &(i, r) in &t.ranks {
                    out[i] = keys[(o + r - t.lo) as usize];
                }
            }
        }
        if big.is_empty() {
            break;
        }
        let cnt: Vec<u32> = read_buf(ctx, counts.raw(), (nbig * nb) as usize)?;
        let spl_keys: Vec<K> = read_buf(ctx, spl.raw(), (nbig * ns) as usize)?;
        clock.mark(ctx, format_args!("level {level} read counts"))?;

        // Host: each rank's bucket; children for the range buckets still to descend.
        let mut children: Vec<Task> = Vec::new();
        let mut child_of: Vec<(usize, u64)> = Vec::new(); // (parent task, bucket)
        let mut child_index: std::collections::HashMap<(usize, u64), usize> = std::collections::HashMap::new();
        for (ti, t) in big.iter().enumerate() {
            let c = &cnt[ti * nb as usize..(ti + 1) * nb as usize];
            let sp = &spl_keys[ti * ns as usize..(ti + 1) * ns as usize];
            let total: u64 = c.iter().map(|&x| x as u64).sum();
            if total != t.n {
                return Err(GpuError::Validation(format!("bucket counts sum to {total}, expected {}", t.n)));
            }
            let mut start = vec![0u64; nb as usize + 1];
            for b in 0..nb as usize {
                start[b + 1] = start[b] + c[b] as u64;
            }
            for &(i, r) in &t.ranks {
                let local = r - t.lo;
                let b = start.partition_point(|&x| x <= local) - 1;
                if b % 2 == 1 {
                    out[i] = sp[b / 2];
                    continue;
                }
                let j = b / 2;
                let size = c[b] as u64;
                let below = if j > 0 { Some(sp[j - 1].to_u64()) } else { t.below };
                let above = if j < ns as usize { Some(sp[j].to_u64()) } else { t.above };
                if let Some(allowed) = approx {
                    let bound = match (below, above) {
                        (Some(_), Some(_)) => size.div_ceil(2),
                        (None, Some(_)) | (Some(_), None) => size,
                        (None, None) => u64::MAX,
                    };
                    if bound <= allowed {
                        // The nearer neighbour: rank start-1 (below) or start+size (above).
                        let d_below = local - start[b] + 1;
                        let d_above = start[b] + size - local;
                        let pick = match (below, above) {
                            (Some(lo), Some(hi)) => if d_below <= d_above { lo } else { hi },
                            (Some(lo), None) => lo,
                            (None, Some(hi)) => hi,
                            (None, None) => unreachable!("bound is finite"),
                        };
                        out[i] = K::from_u64(pick);
                        max_err = max_err.max(bound);
                        continue;
                    }
                }
                let ci = match child_index.get(&(ti, b as u64)) {
                    Some(&ci) => ci,
                    None => {
                        child_index.insert((ti, b as u64), children.len());
                        child_of.push((ti, b as u64));
                        children.push(Task {
                            src: Src::Input,
                            n: size,
                            lo: t.lo + start[b],
                            ranks: Vec::new(),
                            below,
                            above,
                        });
                        children.len() - 1
                    }
                };
                children[ci].ranks.push((i, r));
            }
        }
        if children.is_empty() {
            break;
        }
        // Filter: the child buckets into new buffers, as few as the binding limit
        // allows (one for all of them unless they hold more than one binding).
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let mut group_keys = 0u64;
        for (ci, c) in children.iter().enumerate() {
            if c.n * kb > max_binding {
                return Err(GpuError::Invalid(format!(
                    "a bucket of {} keys exceeds one storage binding ({max_binding} bytes)",
                    c.n
                )));
            }
            if groups.is_empty() || (group_keys + c.n) * kb > max_binding {
                groups.push(Vec::new());
                group_keys = 0;
            }
            groups.last_mut().expect("a group").push(ci);
            group_keys += c.n;
        }
        let mut new_bufs = Vec::with_capacity(groups.len());
        let mut keep: Vec<GpuBuffer> = Vec::new();
        let mut enc = ctx.encoder("select-filter");
        let mut r_filter = Rec::new(ctx);
        for group in &groups {
            let keys_in: u64 = group.iter().map(|&ci| children[ci].n).sum();
            let outbuf = scratch.alloc(keys_in * kb)?;
            let mut slot = vec![NONE; (nbig * nb) as usize];
            let mut outoff = Vec::with_capacity(group.len());
            let mut acc = 0u64;
            for (si, &ci) in group.iter().enumerate() {
                let (p, b) = child_of[ci];
                slot[p * nb as usize + b as usize] = si as u32;
                outoff.push(acc as u32);
                children[ci].src = Src::Buf { buf: bufs.len() + new_bufs.len(), off: acc };
                acc += children[ci].n;
            }
            let slot_buf = scratch.with_data(bytemuck::cast_slice(&slot))?;
            let off_buf = scratch.with_data(bytemuck::cast_slice(&outoff))?;
            let cursors = scratch.alloc(group.len() as u64 * 4)?;
            enc.clear_buffer(cursors.raw(), 0, None);
            for (ti, t) in big.iter().enumerate() {
                let ps = pieces(input, len, &bufs, t);
                if !group.iter().any(|&ci| child_of[ci].0 == ti) {
                    continue;
                }
                for (pi, (buf, off, n)) in ps.into_iter().enumerate() {
                    let ub = uni(ctx, &Params { off, n, cnt: 0, dst_off: 0, seed: 0, task: ti as u32, mode: 0, pad: 0 });
                    let mut entries = vec![
                        (0, buf),
                        (1, spl.raw()),
                        (2, cursors.raw()),
                        (3, &ub),
                        (4, slot_buf.raw()),
                        (5, off_buf.raw()),
                        (6, outbuf.raw()),
                    ];
                    let pipe = match (oracles[ti].get(pi), &p_filter_o) {
                        (Some(ob), Some(pf)) => {
                            entries.push((7, ob.raw()));
                            pf
                        }
                        _ => &p_filter,
                    };
                    r_filter.dispatch(pipe, &entries, (n as u64).div_ceil(CHUNK as u64))?;
                }
            }
            // Pool buffers go back to the pool when dropped, and the next group's
            // allocations (and their queue writes) could take them before this
            // submission: keep them until it is submitted (queue order does the rest).
            new_bufs.push(outbuf);
            keep.extend([slot_buf, off_buf, cursors]);
        }
        clock.mark(ctx, format_args!("level {level} filter record"))?;
        clock.submit(ctx, enc, &[&r_filter])?;
        clock.mark(ctx, format_args!("level {level} filter ({} keys out)", children.iter().map(|c| c.n).sum::<u64>()))?;
        drop(keep);
        bufs.extend(new_bufs);
        tasks = children;
    }
    ctx.wait()?;
    stats.levels = level;
    stats.device_bytes = scratch.bytes;
    stats.rank_error_bound = max_err;
    stats.gpu_ms = clock.ms();
    Ok((out, stats))
}

/// Sorts up to S keys (the sample size of `opts` on this adapter) with the
/// selection's sample-sort kernel, as every level's sample is sorted; returns the
/// sorted keys and whether the subgroup kernel (`sort_sample_sg`) ran. For tests.
#[doc(hidden)]
pub fn sample_sort_gpu<K: SelectKey>(ctx: &GpuContext, keys: &[K], opts: &SelectOptions) -> GpuResult<(Vec<K>, bool)> {
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let m = keys.len();
    if m > kern.s as usize {
        return Err(GpuError::Invalid(format!("{m} keys to sort, more than the sample size {}", kern.s)));
    }
    let mut scratch = Scratch { ctx, bytes: 0 };
    let src = scratch.with_data(bytemuck::cast_slice(keys))?;
    let dst = scratch.alloc((m * K::BYTES) as u64)?;
    let ub = uni(ctx, &Params { off: 0, n: m as u32, cnt: m as u32, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.sort_pipe(ctx)?;
    let mut r = Rec::new(ctx);
    r.dispatch(&p, &[(0, src.raw()), (1, dst.raw()), (2, &ub)], 1)?;
    let mut enc = ctx.encoder("select-sort-test");
    r.encode(&mut enc, None);
    ctx.submit(enc)?;
    let raw: Vec<u32> = read_buf(ctx, dst.raw(), m * K::BYTES / 4)?;
    let out = bytemuck::cast_slice::<u32, u8>(&raw).chunks_exact(K::BYTES).map(bytemuck::pod_read_unaligned).collect();
    Ok((out, kern.sg_sort))
}

// ---------------------------------------------------------------------------------
// Probes (bench select --probe)
// ---------------------------------------------------------------------------------

const PROBE_WGSL: &str = include_str!("../../shaders/probe.wgsl");

/// Device milliseconds (timestamp queries, median of `reps`) of one pass over the
/// first `n` keys of `keys` (u32; at most its first segment) for: plain load-and-sum probes
/// (shaders/probe.wgsl) in scalar and vec4 shapes, with and without contention on
/// one global counter; the bracketing level's count and copy passes (one window of
/// sample indices 1900..=2200, about 7% of the keys); one level's sample gather and
/// sort; and the first level's count kernel (1023 splitters, with and without the
/// oracle, and with parts left out or the former sorted-array search). `sample` is a sorted sample of the keys (4096 of them). Empty when
/// the adapter has no timestamp queries.
pub fn probe_kernels(ctx: &GpuContext, keys: &DeviceArray, n: usize, sample: &[u32], reps: usize) -> GpuResult<Vec<(String, f64)>> {
    check_device_input::<u32>(ctx, keys, n)?;
    if !ctx.has_timestamps() || sample.len() != 4096 {
        return Ok(Vec::new());
    }
    // The first segment (all of the keys unless they exceed one binding).
    let (buf, _, rows) = keys.segment(0);
    let n = n.min(rows);
    let time = |what: &str, pipe: &Arc<wgpu::ComputePipeline>, entries: &[(u32, &wgpu::Buffer)], groups: u64| -> GpuResult<(String, f64)> {
        // Warm up (the clock of an idle GPU drops; see timing::warm_up).
        crate::timing::warm_up(200.0, || -> GpuResult<()> {
            let mut r = Rec::new(ctx);
            r.dispatch(pipe, entries, groups)?;
            let mut enc = ctx.encoder("probe-warm-up");
            r.encode(&mut enc, None);
            ctx.submit(enc)?;
            ctx.wait()
        })?;
        let mut v = Vec::new();
        for _ in 0..reps.max(1) {
            let mut r = Rec::new(ctx);
            r.dispatch(pipe, entries, groups)?;
            let timer = crate::timing::KernelTimer::new(ctx, 1).ok_or_else(|| GpuError::Invalid("no timestamps".into()))?;
            let mut enc = ctx.encoder("probe");
            r.encode(&mut enc, timer.writes(0));
            timer.resolve(&mut enc);
            ctx.submit(enc)?;
            v.push(timer.read_ms(ctx)?[0]);
        }
        v.sort_by(f64::total_cmp);
        Ok((what.to_string(), v[v.len() / 2]))
    };
    let mut out = Vec::new();
    let acc = ctx.pool().alloc(4096 * 4)?;
    for items in [16u32, 64] {
        let defs = [("ITEMS", items.to_string())];
        let ps = ctx.pipeline("probe", PROBE_WGSL, "sum_scalar", &defs)?;
        let pv = ctx.pipeline("probe", PROBE_WGSL, "sum_vec4", &defs)?;
        let groups = (n as u64).div_ceil(256 * items as u64);
        for mode in [0u32, 1] {
            let ub = ctx.uniform(&[n as u32, mode, 0, 0]);
            let e: [(u32, &wgpu::Buffer); 3] = [(0, buf), (2, acc.raw()), (3, &ub)];
            out.push(time(&format!("sum scalar x{items} mode {mode}"), &ps, &e, groups)?);
            let e: [(u32, &wgpu::Buffer); 3] = [(1, buf), (2, acc.raw()), (3, &ub)];
            out.push(time(&format!("sum vec4 x{items} mode {mode}"), &pv, &e, groups)?);
        }
    }
    // The window pass over one window of sample indices 1900..=2200.
    let kern = Kern::new(ctx, 4, &SelectOptions::default())?;
    let smp = ctx.pool().alloc(4096 * 4)?;
    ctx.write_small(smp.raw(), 0, bytemuck::cast_slice(sample))?;
    let counts = ctx.pool().alloc(32 * 4)?;
    let cap = n as u64 / 5;
    let wout = ctx.pool().alloc(cap * 4)?;
    let wp = WinParams {
        off: 0,
        n: n as u32,
        pad: 0,
        wg_base: 0,
        lo_idx: [1900, 0, 0, 0],
        hi_idx: [2200, 0, 0, 0],
        woff: [0; 4],
        cap: [cap as u32, 0, 0, 0],
    };
    let ub = ctx.uniform(&wp);
    let groups = (n as u64).div_ceil(CHUNK as u64);
    let per_group = ctx.pool().alloc(groups * 4)?;
    let defs = [("NWIN", "1".to_string())];
    let p = kern.pipe_with(ctx, "window", "window_count", &defs)?;
    out.push(time("window count", &p, &[(0, buf), (1, smp.raw()), (2, counts.raw()), (3, &ub), (5, per_group.raw())], groups)?);
    let p = kern.pipe_with(ctx, "window", "window_copy", &defs)?;
    out.push(time("window copy", &p, &[(0, buf), (1, smp.raw()), (2, counts.raw()), (3, &ub), (4, wout.raw()), (5, per_group.raw())], groups)?);
    // One level's sample: the gather of S keys and their sort in one workgroup.
    let samples = ctx.pool().alloc(kern.s as u64 * 4)?;
    let sorted = ctx.pool().alloc(kern.s as u64 * 4)?;
    let ub = ctx.uniform(&Params { off: 0, n: n as u32, cnt: kern.s, dst_off: 0, seed: 7, task: 0, mode: 0, pad: 0 });
    let p = kern.pipe(ctx, "gather", "gather")?;
    out.push(time("gather S", &p, &[(0, buf), (1, samples.raw()), (2, &ub)], (kern.s as u64).div_ceil(WG as u64))?);
    let ub = ctx.uniform(&Params { off: 0, n: kern.s, cnt: kern.s, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.sort_pipe(ctx)?;
    out.push(time(if kern.sg_sort { "sort S (subgroup shuffles)" } else { "sort S" }, &p, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?);
    let p = kern.pipe(ctx, "bitonic+sort", "sort_sample")?;
    out.push(time("sort S (every step through workgroup memory)", &p, &[(0, samples.raw()), (1, sorted.raw()), (2, &ub)], 1)?);
    // The count kernel with the oracle, 1023 splitters from the sample.
    let spl: Vec<u32> = (0..kern.ns as usize).map(|j| sample[(j + 1) * 4096 / (kern.ns as usize + 1)]).collect();
    let splb = ctx.pool().alloc(spl.len() as u64 * 4)?;
    ctx.write_small(splb.raw(), 0, bytemuck::cast_slice(&spl))?;
    let cnt = ctx.pool().alloc(kern.nb() as u64 * 4)?;
    let ob = ctx.pool().alloc((n as u64).div_ceil(8 * WG as u64) * WG as u64 * 4)?;
    let ub = ctx.uniform(&Params { off: 0, n: n as u32, cnt: 0, dst_off: 0, seed: 0, task: 0, mode: 0, pad: 0 });
    let p = kern.pipe(ctx, "bucket+oracle", "count_oracle")?;
    out.push(time("count (oracle)", &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub), (7, ob.raw())], (n as u64).div_ceil(CCHUNK as u64))?);
    let p = kern.pipe(ctx, "bucket", "count")?;
    out.push(time("count (no oracle)", &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub)], (n as u64).div_ceil(CCHUNK as u64))?);
    for (what, entry) in [("count, histogram only", "count_nosearch"), ("count, search only", "count_noatomic"), ("count, sorted-array search (before)", "count_sorted")] {
        let p = kern.pipe(ctx, "bucket+countprobe", entry)?;
        out.push(time(what, &p, &[(0, buf), (1, splb.raw()), (2, cnt.raw()), (3, &ub)], (n as u64).div_ceil(CCHUNK as u64))?);
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------
// Keys on the device
// ---------------------------------------------------------------------------------

/// What 8-byte device values hold, for [`to_order_keys_gpu`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawKind {
    /// `i64` (also decimals by their unscaled value, timestamps, Date64).
    I64,
    /// `f64`.
    F64,
}

/// Turns the 8-byte values of `arr` into their order-preserving keys in place
/// ([`key_i64`] / [`key_f64`] of every element), one dispatch per segment.
pub fn to_order_keys_gpu(ctx: &GpuContext, arr: &DeviceArray, kind: RawKind) -> GpuResult<()> {
    to_order_keys_gpu_dir(ctx, arr, kind, false)
}

/// [`to_order_keys_gpu`], complemented when `descending` (so the largest value
/// has the smallest key).
pub fn to_order_keys_gpu_dir(ctx: &GpuContext, arr: &DeviceArray, kind: RawKind, descending: bool) -> GpuResult<()> {
    if arr.elem_size() != 8 {
        return Err(GpuError::Invalid(format!("order keys of {}-byte values (expected 8)", arr.elem_size())));
    }
    if arr.is_empty() {
        return Ok(());
    }
    let k = Kern::new(ctx, 8, &SelectOptions::default())?;
    let pipe = k.pipe(ctx, "keys", "to_key")?;
    let mode = match kind {
        RawKind::I64 => 0,
        RawKind::F64 => 1,
    } | if descending { 2 } else { 0 };
    let mut rec = Rec::new(ctx);
    let mut uniforms = Vec::new();
    for s in 0..arr.num_segments() {
        let (buf, _, rows) = arr.segment(s);
        let ub = ctx.uniform(&Params { off: 0, n: rows as u32, cnt: 0, dst_off: 0, seed: 0, task: 0, mode, pad: 0 });
        rec.dispatch(&pipe, &[(0, buf), (2, &ub)], (rows as u64).div_ceil(WG as u64))?;
        uniforms.push(ub);
    }
    let mut enc = ctx.encoder("order-keys");
    rec.encode(&mut enc, None);
    ctx.submit(enc)?;
    Ok(())
}

// ---------------------------------------------------------------------------------
// GPU entry points
// ---------------------------------------------------------------------------------

fn upload<K: SelectKey>(ctx: &GpuContext, keys: &[K]) -> GpuResult<DeviceArray> {
    DeviceArray::upload(ctx, keys)
}

/// Exact GPU selection of host keys: uploads, then [`select_gpu_device`].
pub fn select_gpu<K: SelectKey>(ctx: &GpuContext, keys: &[K], ranks: &[u64]) -> GpuResult<(Vec<K>, SelectStats)> {
    select_gpu_with(ctx, keys, ranks, &SelectOptions::default())
}

/// [`select_gpu`] with options.
pub fn select_gpu_with<K: SelectKey>(ctx: &GpuContext, keys: &[K], ranks: &[u64], opts: &SelectOptions) -> GpuResult<(Vec<K>, SelectStats)> {
    if keys.is_empty() || ranks.is_empty() {
        return sample_select_empty(keys.len(), ranks, "gpu-sampleselect");
    }
    let arr = upload(ctx, keys)?;
    select_gpu_device_with(ctx, &arr, keys.len(), ranks, opts)
}

fn sample_select_empty<K: SelectKey>(n: usize, ranks: &[u64], algorithm: &'static str) -> GpuResult<(Vec<K>, SelectStats)> {
    if let Some(r) = ranks.iter().find(|&&r| r >= n as u64) {
        return Err(GpuError::Invalid(format!("rank {r} out of range for {n} keys")));
    }
    Ok((Vec::new(), SelectStats { algorithm, ..Default::default() }))
}

/// Exact GPU selection of the first `len` keys of a resident device array
/// (`K::BYTES`-byte elements, any segmentation).
pub fn select_gpu_device<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize, ranks: &[u64]) -> GpuResult<(Vec<K>, SelectStats)> {
    select_gpu_device_with(ctx, keys, len, ranks, &SelectOptions::default())
}

/// [`select_gpu_device`] with options.
pub fn select_gpu_device_with<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    ranks: &[u64],
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    sample_select(ctx, keys, len, ranks, None, opts)
}

/// Exact GPU selection in many regions of one device array at once: region `i`
/// is elements `regions[i].0 .. regions[i].0 + regions[i].1`, and its answers are
/// its keys at `ranks[i]` (ranks within the region). All regions descend together,
/// level by level (one submission and one readback of bucket counts per level for
/// all of them); regions of at most one sample's keys are sorted whole in one
/// workgroup. Regions with more than [`RANKS_PER_DESCENT`] distinct ranks are
/// served over several rounds.
pub fn select_regions_gpu_device<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    regions: &[(u64, u64)],
    ranks: &[Vec<u64>],
) -> GpuResult<Vec<Vec<K>>> {
    select_regions_gpu_device_with(ctx, keys, regions, ranks, &SelectOptions::default())
}

/// [`select_regions_gpu_device`] with options (regions of at least
/// [`SelectOptions::bracket_min`] keys start with the bracketing level).
pub fn select_regions_gpu_device_with<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    regions: &[(u64, u64)],
    ranks: &[Vec<u64>],
    opts: &SelectOptions,
) -> GpuResult<Vec<Vec<K>>> {
    if regions.len() != ranks.len() {
        return Err(GpuError::Invalid(format!("{} regions, {} rank lists", regions.len(), ranks.len())));
    }
    let len = regions.iter().map(|r| r.0 + r.1).max().unwrap_or(0) as usize;
    check_device_input::<K>(ctx, keys, len)?;
    for (&(_, n), rs) in regions.iter().zip(ranks) {
        if let Some(r) = rs.iter().find(|&&r| r >= n) {
            return Err(GpuError::Invalid(format!("rank {r} out of range for a region of {n} keys")));
        }
    }
    // Distinct ranks per region, in rounds of at most RANKS_PER_DESCENT each.
    let uniq: Vec<Vec<u64>> = ranks
        .iter()
        .map(|r| {
            let mut u = r.clone();
            u.sort_unstable();
            u.dedup();
            u
        })
        .collect();
    let mut vals: Vec<Vec<K>> = uniq.iter().map(|u| vec![K::default(); u.len()]).collect();
    let rounds = uniq.iter().map(|u| u.len().div_ceil(RANKS_PER_DESCENT)).max().unwrap_or(0);
    let opts = *opts;
    for round in 0..rounds {
        let mut tasks = Vec::new();
        let mut slots: Vec<(usize, usize)> = Vec::new(); // output index -> (region, index in uniq)
        for (ri, u) in uniq.iter().enumerate() {
            let lo = round * RANKS_PER_DESCENT;
            if lo >= u.len() {
                continue;
            }
            let hi = (lo + RANKS_PER_DESCENT).min(u.len());
            let mut tr = Vec::with_capacity(hi - lo);
            for (j, &r) in u.iter().enumerate().take(hi).skip(lo) {
                tr.push((slots.len(), r));
                slots.push((ri, j));
            }
            tasks.push(Task { src: Src::Range { start: regions[ri].0 }, n: regions[ri].1, lo: 0, ranks: tr, below: None, above: None });
        }
        let mut clock = GpuClock::new(ctx);
        // Large regions start with the bracketing level (one pass each over the
        // region); their windows' buffers join the descent's.
        let mut start = Start::default();
        let mut first = Vec::with_capacity(tasks.len());
        for t in tasks {
            match bracket::<K>(ctx, keys, len, &t, &opts, &mut clock)? {
                Some((wtasks, st)) => {
                    let shift = start.bufs.len();
                    for mut wt in wtasks {
                        if let Src::Buf { buf, off } = wt.src {
                            wt.src = Src::Buf { buf: buf + shift, off };
                        }
                        first.push(wt);
                    }
                    start.bufs.extend(st.bufs);
                    start.bytes += st.bytes;
                    start.answered.extend(st.answered);
                    start.level = 1;
                }
                None => first.push(t),
            }
        }
        let (out, _) = sample_select_tasks::<K>(ctx, keys, len, first, slots.len(), None, &opts, clock, start)?;
        for (o, &(ri, j)) in out.into_iter().zip(&slots) {
            vals[ri][j] = o;
        }
    }
    Ok(ranks
        .iter()
        .zip(uniq.iter().zip(&vals))
        .map(|(rs, (u, v))| rs.iter().map(|r| v[u.binary_search(r).expect("a rank")]).collect())
        .collect())
}

/// Approximate GPU selection of host keys: uploads, then [`approx_select_gpu_device`].
pub fn approx_select_gpu<K: SelectKey>(ctx: &GpuContext, keys: &[K], ranks: &[u64]) -> GpuResult<(Vec<K>, SelectStats)> {
    approx_select_gpu_with(ctx, keys, ranks, &SelectOptions::default())
}

/// [`approx_select_gpu`] with options.
pub fn approx_select_gpu_with<K: SelectKey>(ctx: &GpuContext, keys: &[K], ranks: &[u64], opts: &SelectOptions) -> GpuResult<(Vec<K>, SelectStats)> {
    if keys.is_empty() || ranks.is_empty() {
        return sample_select_empty(keys.len(), ranks, "gpu-sampleselect-approx");
    }
    let arr = upload(ctx, keys)?;
    approx_select_gpu_device_with(ctx, &arr, keys.len(), ranks, opts)
}

/// Approximate GPU selection on a resident array: every returned key's rank range
/// is within `max_error_fraction * len` ranks of its target rank. From
/// [`SelectOptions::approx_hist_min`] keys, one pass over the keys answers where it
/// can (cells of key space for 32-bit keys, then the sample's keys as splitters;
/// see "Approximate selection in one pass" in the module documentation), otherwise
/// the chain or the SampleSelect descent answers exactly. `stats.rank_error_bound`
/// is the largest reported error (0 where exact); `stats.algorithm` names the path.
pub fn approx_select_gpu_device<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize, ranks: &[u64]) -> GpuResult<(Vec<K>, SelectStats)> {
    approx_select_gpu_device_with(ctx, keys, len, ranks, &SelectOptions::default())
}

/// [`approx_select_gpu_device`] with options.
pub fn approx_select_gpu_device_with<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    ranks: &[u64],
    opts: &SelectOptions,
) -> GpuResult<(Vec<K>, SelectStats)> {
    let allowed = (opts.max_error_fraction.max(0.0) * len as f64).floor() as u64;
    sample_select(ctx, keys, len, ranks, Some(allowed), opts)
}

/// GPU top-k of host keys: uploads, then [`topk_gpu_device`].
pub fn topk_gpu<K: SelectKey>(ctx: &GpuContext, keys: &[K], k: usize) -> GpuResult<(Vec<u32>, SelectStats)> {
    topk_gpu_with(ctx, keys, k, &SelectOptions::default())
}

/// [`topk_gpu`] with options.
pub fn topk_gpu_with<K: SelectKey>(ctx: &GpuContext, keys: &[K], k: usize, opts: &SelectOptions) -> GpuResult<(Vec<u32>, SelectStats)> {
    if keys.is_empty() || k == 0 {
        return Ok((Vec::new(), SelectStats { algorithm: "gpu-topk", ..Default::default() }));
    }
    let arr = upload(ctx, keys)?;
    topk_gpu_device_with::<K>(ctx, &arr, keys.len(), k, opts)
}

/// GPU top-k of the first `len` keys of a resident array: the ascending row indices
/// of the `min(k, len)` smallest keys, ties at the threshold to the first rows.
pub fn topk_gpu_device<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize, k: usize) -> GpuResult<(Vec<u32>, SelectStats)> {
    topk_gpu_device_with::<K>(ctx, keys, len, k, &SelectOptions::default())
}

/// [`topk_gpu_device`] with options.
pub fn topk_gpu_device_with<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    k: usize,
    opts: &SelectOptions,
) -> GpuResult<(Vec<u32>, SelectStats)> {
    topk_device::<K>(ctx, keys, len, k, false, opts)
}

/// The candidates of a top-k with further sort keys: the ascending row indices of
/// every key at or below the `k`-th smallest (all keys tied with it included, so
/// later sort keys can settle the ties), `min(k, len)` rows or more.
pub fn topk_ties_gpu_device<K: SelectKey>(ctx: &GpuContext, keys: &DeviceArray, len: usize, k: usize) -> GpuResult<(Vec<u32>, SelectStats)> {
    topk_device::<K>(ctx, keys, len, k, true, &SelectOptions::default())
}

/// [`topk_ties_gpu_device`] with options.
pub fn topk_ties_gpu_device_with<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    k: usize,
    opts: &SelectOptions,
) -> GpuResult<(Vec<u32>, SelectStats)> {
    topk_device::<K>(ctx, keys, len, k, true, opts)
}

fn topk_device<K: SelectKey>(
    ctx: &GpuContext,
    keys: &DeviceArray,
    len: usize,
    k: usize,
    ties: bool,
    opts: &SelectOptions,
) -> GpuResult<(Vec<u32>, SelectStats)> {
    check_device_input::<K>(ctx, keys, len)?;
    let mut stats = SelectStats { algorithm: "gpu-topk", ..Default::default() };
    if k == 0 || len == 0 {
        return Ok((Vec::new(), stats));
    }
    if k >= len {
        return Ok(((0..len as u32).collect(), stats));
    }
    if K::BYTES == 4 {
        // The chain over (key, row) pairs: exact, ties to the first rows, one submission.
        let mut clock = GpuClock::new(ctx);
        let mut scratch = Scratch { ctx, bytes: 0 };
        let kk = k as u64 - 1;
        if let Some((ChainEnd::Region(pairs, 0, hi), levels)) = chain::<u64>(ctx, keys, len, kk, kk, true, opts, &mut clock, &mut scratch)? {
            let key_t = pairs[k - 1] >> 32;
            // With ties, every key equal to the threshold must be in the last region:
            // its window's upper bound lies above the threshold's key (or is open).
            if !ties || hi.is_none_or(|h| h >> 32 > key_t) {
                let take = if ties { pairs.partition_point(|&p| p >> 32 <= key_t) } else { k };
                let mut idx: Vec<u32> = pairs[..take].iter().map(|&p| p as u32).collect();
                idx.sort_unstable();
                stats.levels = levels;
                stats.device_bytes = scratch.bytes;
                stats.gpu_ms = clock.ms();
                stats.algorithm = "gpu-topk+chain";
                return Ok((idx, stats));
            }
        }
    }
    let (t, st) = sample_select::<K>(ctx, keys, len, &[k as u64 - 1], None, opts)?;
    let mut clock = GpuClock::new(ctx);
    clock.mark(ctx, format_args!("top-k threshold"))?;
    let t = t[0];
    let kern = Kern::new(ctx, K::BYTES, opts)?;
    let p_count = kern.pipe(ctx, "topk", "tk_count")?;
    let p_scatter = kern.pipe(ctx, "topk", "tk_scatter")?;
    let mut scratch = Scratch { ctx, bytes: 0 };

    // Segments (of the first len rows) and their blocks.
    let segs: Vec<(&wgpu::Buffer, usize, usize)> = (0..keys.num_segments())
        .map(|i| keys.segment(i))
        .map(|(b, start, rows)| (b, start, rows.min(len.saturating_sub(start))))
        .filter(|s| s.2 > 0)
        .collect();
    let mut block_base = Vec::with_capacity(segs.len());
    let mut blocks = 0u64;
    for s in &segs {
        block_base.push(blocks);
        blocks += (s.2 as u64).div_ceil(CHUNK as u64);
    }
    let thr = scratch.with_data(bytemuck::bytes_of(&t))?;
    let counts = scratch.alloc(2 * blocks * 4)?;
    let params = |si: usize, need: u32, win_lo: u32, win_len: u32| TkParams {
        n: segs[si].2 as u32,
        block_base: block_base[si] as u32,
        row0: segs[si].1 as u32,
        need,
        win_lo,
        win_len,
        blocks: blocks as u32,
        lt_total: 0,
    };
    let mut rec = Rec::new(ctx);
    for (si, s) in segs.iter().enumerate() {
        let ub = uni(ctx, &params(si, 0, 0, 0));
        // The scatter's output binding is unused by tk_count (not in its layout).
        rec.dispatch(&p_count, &[(0, s.0), (1, thr.raw()), (2, counts.raw()), (3, &ub)], (s.2 as u64).div_ceil(CHUNK as u64))?;
    }
    clock.submit(ctx, ctx.encoder("topk-count"), &[&rec])?;
    clock.mark(ctx, format_args!("top-k count"))?;
    let c: Vec<u32> = read_buf(ctx, counts.raw(), 2 * blocks as usize)?;
    // Exclusive offsets of both halves (keys < t, keys == t), in place.
    let mut offs = c.clone();
    let (mut lt, mut eq) = (0u64, 0u64);
    for b in 0..blocks as usize {
        offs[b] = lt as u32;
        lt += c[b] as u64;
        offs[blocks as usize + b] = eq as u32;
        eq += c[blocks as usize + b] as u64;
    }
    let k64 = k as u64;
    if !(lt < k64 && k64 <= lt + eq) {
        return Err(GpuError::Validation(format!("top-k threshold is inconsistent: {lt} keys below, {eq} equal, k = {k}")));
    }
    // With ties, every key equal to the threshold comes along.
    let (need, k) = if ties { (eq as u32, (lt + eq) as usize) } else { ((k64 - lt) as u32, k) };
    ctx.write_small(counts.raw(), 0, bytemuck::cast_slice(&offs))?;
    let out = DeviceArray::alloc(ctx, k, 4)?;
    scratch.bytes += out.device_bytes();
    let mut rec = Rec::new(ctx);
    for oi in 0..out.num_segments() {
        let (obuf, ostart, orows) = out.segment(oi);
        for (si, s) in segs.iter().enumerate() {
            let ub = uni(ctx, &TkParams { lt_total: lt as u32, ..params(si, need, ostart as u32, orows as u32) });
            rec.dispatch(
                &p_scatter,
                &[(0, s.0), (1, thr.raw()), (2, counts.raw()), (3, &ub), (4, obuf)],
                (s.2 as u64).div_ceil(CHUNK as u64),
            )?;
        }
    }
    clock.submit(ctx, ctx.encoder("topk-scatter"), &[&rec])?;
    clock.mark(ctx, format_args!("top-k scatter"))?;
    let idx = out.download::<u32>(ctx)?;
    stats.levels = st.levels;
    stats.device_bytes = st.device_bytes + scratch.bytes;
    stats.gpu_ms = st.gpu_ms + clock.ms();
    Ok((idx, stats))
}
