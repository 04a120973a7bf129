//! Selection: the keys at given ranks (quantiles, medians), approximate quantiles
//! and top-k, on the GPU by SampleSelect (Ribizel & Anzt, "Parallel selection on
//! GPUs", shaders/select/) and on the CPU.
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
//! lavapipe (example `select_bench`, 2^24 uniform u32, 2 shared cores, noisy) the oracle
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
//! (shaders/select/window.wgsl): `window_count` counts, per window, the keys
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
//! sample (shaders/select/chain*.wgsl: gather, sort, `ch_plan` writes the window
//! and the indirect dispatch size, one window pass copies the keys inside,
//! `ch_check` moves to the window or stops the chain when the sample missed or a
//! window overflowed its region). The host computes the regions' capacities and
//! the number of levels from `n` alone (`chain_caps`), records all levels in one
//! submission and reads back once: the state and the last region (at most S keys)
//! sorted. A stopped chain reruns as the host-driven descent. Top-k of 32-bit keys
//! runs the chain over (key, row) pairs packed into 64-bit keys, windows open
//! below, so ties go to the first rows and the last region holds the answer.
//! Levels after the first sample 1024 keys (cheaper sorts; a top-k with k above
//! 256 keeps S). Approximate calls of one narrow rank range take the chain too
//! (their answers are then exact) where the one histogram pass (below) does not
//! answer them. The first level reads the input once per workgroup chunk: count,
//! reserve the window's slots, copy (the chunk read twice, the second time mostly
//! from the cache). On the H100 at 2^28 keys (`bench select`,
//! docs/benchmarks/history/session-12.md) a median takes 1.34 ms as a chain and
//! top-100 1.25 ms.
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
//! takes 0.63-0.83 ms this way (depending on the lease;
//! docs/benchmarks/history/session-13.md and session-14.md), with a rank error of
//! 0.009% of n.
//!
//! 32-bit keys first try cells of key space instead ([`SelectOptions::approx_key_cells`],
//! shaders/select/approx_kc.wgsl): each window, from its first sample key `lo` to its last,
//! is cut into at most 1024 cells of a power-of-two width, and a key inside adds
//! one to cell `(x - lo) >> shift` in workgroup memory where it is read: no
//! staging and no search. A sample key's cell gives the rank range of its copies,
//! so each rank is answered by the sample key whose range reaches least far from
//! it, and that reach is the reported error. Where keys cluster within a cell so
//! that no reach is within the bound, the splitter pass answers instead (a second
//! pass, for such inputs only). The windows reach 4 standard deviations
//! ([`APPROX_CELL_SIGMAS`]). On the H100 an approximate median of 2^28 keys takes
//! 0.50 ms this way against 0.63 ms with splitters in the same run
//! (docs/benchmarks/history/session-14.md), with a reported bound of 0.012% of n.
//!
//! # The sample sort
//!
//! Every level sorts its sample (up to S = 4096 keys) in one workgroup by a
//! bitonic network. Where the adapter has subgroup operations,
//! `sort_sample_sg` (shaders/select/sample_sort_sg.wgsl) keeps four keys per invocation in
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
//! [`Keys::Device`] takes a [`DeviceArray`] of 4-byte (`u32` keys) or 8-byte (`u64`)
//! elements, any segmentation (e.g. [`DeviceArray::upload`] or a batch's column),
//! and uses its first `len` elements; the array is only read ([`Keys::Host`]
//! uploads the keys first). Inputs larger than one
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
//!
//! # Layout
//!
//! [`contract`]: keys, options and stats; [`keys`]: order keys on the host and the
//! device; [`cpu`]: references and CPU paths; `kernels` and `record`: pipelines
//! (WGSL loading) and dispatch recording; `descent`: the SampleSelect descent;
//! `bracket`: the bracketing level; `chain`: the chain; `approx`: approximate
//! selection in one pass; `topk`: top-k; [`regions`]: grouped selection over
//! regions; `probe`: kernel probes (`bench select --probe`). Tuned constants and
//! the switches: [`crate::tuning::select`].
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};

mod approx;
mod bracket;
mod chain;
pub mod contract;
pub mod cpu;
mod descent;
mod kernels;
pub mod keys;
mod probe;
mod record;
pub mod regions;
mod topk;

pub use crate::tuning::select::{APPROX_CELL_SIGMAS, APPROX_ITEMS, APPROX_SIGMAS, CHAIN_MAX_SPAN};
pub use bracket::bracketed_total;
pub use chain::chained_total;
pub use contract::{SelectKey, SelectOptions, SelectStats};
pub use cpu::{approx_select_cpu, select_cpu, select_reference, topk_cpu, topk_reference};
pub use descent::sample_sort_gpu;
pub use keys::{
    key_f32, key_f64, key_i32, key_i64, keys_f32, keys_f64, keys_i32, keys_i64, to_order_keys_gpu, unkey_f32, unkey_f64, unkey_i32,
    unkey_i64, RawKind,
};
pub use probe::probe_kernels;
pub use regions::select_regions_gpu;

/// The keys a GPU selection reads.
#[derive(Clone, Copy, Debug)]
pub enum Keys<'a, K> {
    /// Host keys, uploaded for the call (nothing is uploaded when there is nothing
    /// to select).
    Host(&'a [K]),
    /// The first `len` elements of a resident device array (`K::BYTES`-byte
    /// elements, any segmentation), only read.
    Device(&'a DeviceArray, usize),
}

/// An upload of host keys, or the device keys as they are, with their count.
enum Resident<'a> {
    Owned(DeviceArray),
    Borrowed(&'a DeviceArray),
}

impl Resident<'_> {
    fn array(&self) -> &DeviceArray {
        match self {
            Resident::Owned(a) => a,
            Resident::Borrowed(a) => a,
        }
    }
}

impl<'a, K: SelectKey> Keys<'a, K> {
    /// The keys on the device and their count; `None` for host keys when `nothing`
    /// (there is nothing to select, so nothing is uploaded).
    fn resident(self, ctx: &GpuContext, nothing: bool) -> GpuResult<Option<(Resident<'a>, usize)>> {
        match self {
            Keys::Host(keys) if keys.is_empty() || nothing => Ok(None),
            Keys::Host(keys) => Ok(Some((Resident::Owned(DeviceArray::upload(ctx, keys)?), keys.len()))),
            Keys::Device(arr, len) => Ok(Some((Resident::Borrowed(arr), len))),
        }
    }

    fn host_len(&self) -> usize {
        match self {
            Keys::Host(keys) => keys.len(),
            Keys::Device(_, len) => *len,
        }
    }
}

/// The answer of a selection with nothing to select (host keys): no ranks, or
/// ranks out of range.
fn sample_select_empty<K: SelectKey>(n: usize, ranks: &[u64], algorithm: &'static str) -> GpuResult<(Vec<K>, SelectStats)> {
    if let Some(r) = ranks.iter().find(|&&r| r >= n as u64) {
        return Err(GpuError::Invalid(format!("rank {r} out of range for {n} keys")));
    }
    Ok((Vec::new(), SelectStats { algorithm, ..Default::default() }))
}

/// Exact GPU selection: the keys at `ranks` (in the order of `ranks`), by the
/// SampleSelect descent, the bracketing level or the chain as the module
/// documentation describes. Callers wanting the defaults pass
/// `&SelectOptions::default()`.
pub fn select_gpu<K: SelectKey>(ctx: &GpuContext, keys: Keys<'_, K>, ranks: &[u64], opts: &SelectOptions) -> GpuResult<(Vec<K>, SelectStats)> {
    let n = keys.host_len();
    match keys.resident(ctx, ranks.is_empty())? {
        None => sample_select_empty(n, ranks, "gpu-sampleselect"),
        Some((arr, len)) => descent::sample_select(ctx, arr.array(), len, ranks, None, opts),
    }
}

/// Approximate GPU selection: every returned key's rank range is within
/// `max_error_fraction * len` ranks of its target rank. From
/// [`SelectOptions::approx_hist_min`] keys, one pass over the keys answers where it
/// can (cells of key space for 32-bit keys, then the sample's keys as splitters;
/// see "Approximate selection in one pass" in the module documentation), otherwise
/// the chain or the SampleSelect descent answers exactly. `stats.rank_error_bound`
/// is the largest reported error (0 where exact); `stats.algorithm` names the path.
pub fn approx_select_gpu<K: SelectKey>(ctx: &GpuContext, keys: Keys<'_, K>, ranks: &[u64], opts: &SelectOptions) -> GpuResult<(Vec<K>, SelectStats)> {
    let n = keys.host_len();
    match keys.resident(ctx, ranks.is_empty())? {
        None => sample_select_empty(n, ranks, "gpu-sampleselect-approx"),
        Some((arr, len)) => {
            let allowed = (opts.max_error_fraction.max(0.0) * len as f64).floor() as u64;
            descent::sample_select(ctx, arr.array(), len, ranks, Some(allowed), opts)
        }
    }
}

/// GPU top-k: the ascending row indices of the `min(k, len)` smallest keys, ties at
/// the threshold to the first rows.
pub fn topk_gpu<K: SelectKey>(ctx: &GpuContext, keys: Keys<'_, K>, k: usize, opts: &SelectOptions) -> GpuResult<(Vec<u32>, SelectStats)> {
    match keys.resident(ctx, k == 0)? {
        None => Ok((Vec::new(), SelectStats { algorithm: "gpu-topk", ..Default::default() })),
        Some((arr, len)) => topk::topk_device::<K>(ctx, arr.array(), len, k, false, opts),
    }
}

/// The candidates of a top-k with further sort keys: the ascending row indices of
/// every key at or below the `k`-th smallest (all keys tied with it included, so
/// later sort keys can settle the ties), `min(k, len)` rows or more.
pub fn topk_ties_gpu<K: SelectKey>(ctx: &GpuContext, keys: Keys<'_, K>, k: usize, opts: &SelectOptions) -> GpuResult<(Vec<u32>, SelectStats)> {
    match keys.resident(ctx, k == 0)? {
        None => Ok((Vec::new(), SelectStats { algorithm: "gpu-topk", ..Default::default() })),
        Some((arr, len)) => topk::topk_device::<K>(ctx, arr.array(), len, k, true, opts),
    }
}
