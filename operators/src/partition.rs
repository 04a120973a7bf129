//! Partitioning: the rows of a batch's columns regrouped so that every partition
//! is contiguous, keeping the input order inside each partition (a **stable**
//! partition), on the GPU (shaders/partition.wgsl) and on the CPU.
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
//!   runs in WGSL and in Rust ([`partition_ids`]).
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
//!    rank and step 3 are one kernel (shaders/partition_scatter.wgsl). Per round of `8 x subgroup size x 4`
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
//!    moves take 7.7 / 8.9 / 15.9 / 59.7 ms (BENCHMARKS.md, session 20).
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
//! [`crate::cpu_scan::exclusive_scan`], the cache-partitioned SIMD scan of Zhang,
//! Wang & Ross, then every chunk scatters its rows in order). Identical output to
//! [`partition_reference`] (sequential counting sort) and the GPU.
use crate::array::DeviceArray;
use crate::compact::{Column, CompactedColumn};
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::scan::{Pass, ScanKernel, ScanKind, ScanOptions, ScanType};
use crate::timing::KernelTimer;
use rayon::prelude::*;

const PARTITION_WGSL: &str = include_str!("../../shaders/partition.wgsl");
const SCATTER_WGSL: &str = include_str!("../../shaders/partition_scatter.wgsl");

/// The word a NULL key contributes to the hash (ASCII "null").
pub const NULL_TAG: u32 = 0x6e75_6c6c;

/// Largest fan-out (and radix width `2^24`).
pub const MAX_FANOUT: u32 = 1 << 24;

const F_FIRST: u32 = 1;
const F_LAST: u32 = 2;
const F_VALID: u32 = 4;
const F_DIRECT: u32 = 8;
const F_PREV: u32 = 16;
const F_HASH: u32 = 32;
const F_MULTI: u32 = 64;

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

/// Folds the word `w` into the hash `h` (same as shaders/partition.wgsl).
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
    fn check(&self, key_widths: &[usize]) -> Result<(), String> {
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

// ---------------------------------------------------------------------------------
// Host columns, CPU reference and fast path
// ---------------------------------------------------------------------------------

/// Values of a host column.
#[derive(Clone, Copy, Debug)]
pub enum HostValues<'a> {
    /// 4-byte values (u32, i32, f32, dates, ...).
    U32(&'a [u32]),
    /// 8-byte values (u64, i64, f64, ...).
    U64(&'a [u64]),
}

impl HostValues<'_> {
    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            HostValues::U32(v) => v.len(),
            HostValues::U64(v) => v.len(),
        }
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn width(&self) -> usize {
        match self {
            HostValues::U32(_) => 4,
            HostValues::U64(_) => 8,
        }
    }
}

/// A host column: values and an optional validity bitmap (bit `i % 32` of word
/// `i / 32` set = row `i` not NULL, like Arrow).
#[derive(Clone, Copy, Debug)]
pub struct HostColumn<'a> {
    /// Values.
    pub values: HostValues<'a>,
    /// Validity bitmap (`ceil(len / 32)` words).
    pub validity: Option<&'a [u32]>,
}

impl<'a> HostColumn<'a> {
    /// A u32 column without NULLs.
    pub fn u32(v: &'a [u32]) -> Self {
        HostColumn { values: HostValues::U32(v), validity: None }
    }
    /// A u64 column without NULLs.
    pub fn u64(v: &'a [u64]) -> Self {
        HostColumn { values: HostValues::U64(v), validity: None }
    }
    /// The same column with a validity bitmap.
    pub fn with_validity(mut self, bits: &'a [u32]) -> Self {
        self.validity = Some(bits);
        self
    }
    fn valid(&self, i: usize) -> bool {
        self.validity.is_none_or(|b| (b[i / 32] >> (i % 32)) & 1 != 0)
    }
}

/// Owned values of a partitioned host column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnedValues {
    /// 4-byte values.
    U32(Vec<u32>),
    /// 8-byte values.
    U64(Vec<u64>),
}

/// A partitioned host column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedColumn {
    /// Values in partition order.
    pub values: OwnedValues,
    /// Validity bitmap (`ceil(len / 32)` words, bits past `len` zero), when the
    /// input had one.
    pub validity: Option<Vec<u32>>,
}

/// A partitioned batch on the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPartitioned {
    /// `fanout + 1` offsets: partition `b` is rows `offsets[b] .. offsets[b + 1]`.
    pub offsets: Vec<u64>,
    /// The columns, in input order.
    pub columns: Vec<OwnedColumn>,
}

fn check_host(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> usize {
    let n = columns.first().map_or(0, |c| c.values.len());
    for c in columns {
        assert_eq!(c.values.len(), n, "columns of different lengths");
        if let Some(v) = c.validity {
            assert!(v.len() >= n.div_ceil(32), "validity bitmap too short");
        }
    }
    for &k in keys {
        assert!(k < columns.len(), "key column {k} out of range");
    }
    let widths: Vec<usize> = keys.iter().map(|&k| columns[k].values.width()).collect();
    if let Err(e) = func.check(&widths) {
        panic!("{e}");
    }
    n
}

fn row_id(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn, i: usize) -> u32 {
    let word = |c: &HostColumn<'_>| -> (u32, u32) {
        match c.values {
            HostValues::U32(v) => (v[i], 0),
            HostValues::U64(v) => (v[i] as u32, (v[i] >> 32) as u32),
        }
    };
    match *func {
        PartitionFn::Radix { shift, bits } => {
            let c = &columns[keys[0]];
            if !c.valid(i) {
                return 0;
            }
            let (lo, hi) = word(c);
            let v = ((hi as u64) << 32) | lo as u64;
            ((v >> shift) as u32) & ((1u64 << bits) - 1) as u32
        }
        PartitionFn::Direct { fanout } => {
            let c = &columns[keys[0]];
            if !c.valid(i) {
                return 0;
            }
            word(c).0.min(fanout - 1)
        }
        PartitionFn::Hash { fanout } => {
            let mut h = 0u32;
            for &k in keys {
                let c = &columns[k];
                let wide = c.values.width() == 8;
                let (lo, hi) = if c.valid(i) { word(c) } else { (NULL_TAG, NULL_TAG) };
                h = hash_combine(h, lo);
                if wide {
                    h = hash_combine(h, hi);
                }
            }
            h % fanout
        }
    }
}

/// The partition id of every row (what the GPU's first kernel computes).
pub fn partition_ids(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> Vec<u32> {
    let n = check_host(columns, keys, func);
    let mut ids = vec![0u32; n];
    ids.par_chunks_mut(1 << 16).enumerate().for_each(|(c, out)| {
        for (j, o) in out.iter_mut().enumerate() {
            *o = row_id(columns, keys, func, c * (1 << 16) + j);
        }
    });
    ids
}

fn gather_column(c: &HostColumn<'_>, order: &[u32]) -> OwnedColumn {
    let values = match c.values {
        HostValues::U32(v) => OwnedValues::U32(order.iter().map(|&i| v[i as usize]).collect()),
        HostValues::U64(v) => OwnedValues::U64(order.iter().map(|&i| v[i as usize]).collect()),
    };
    let validity = c.validity.map(|_| {
        let mut bits = vec![0u32; order.len().div_ceil(32)];
        for (j, &i) in order.iter().enumerate() {
            if c.valid(i as usize) {
                bits[j / 32] |= 1 << (j % 32);
            }
        }
        bits
    });
    OwnedColumn { values, validity }
}

/// The sequential reference: a stable counting sort by partition id. Panics on
/// invalid arguments (mismatched lengths, a bad [`PartitionFn`]).
pub fn partition_reference(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> HostPartitioned {
    let n = check_host(columns, keys, func);
    let f = func.fanout() as usize;
    let ids: Vec<u32> = (0..n).map(|i| row_id(columns, keys, func, i)).collect();
    let mut offsets = vec![0u64; f + 1];
    for &id in &ids {
        offsets[id as usize + 1] += 1;
    }
    for b in 0..f {
        offsets[b + 1] += offsets[b];
    }
    let mut next: Vec<u64> = offsets[..f].to_vec();
    let mut order = vec![0u32; n];
    for (i, &id) in ids.iter().enumerate() {
        order[next[id as usize] as usize] = i as u32;
        next[id as usize] += 1;
    }
    HostPartitioned { offsets, columns: columns.iter().map(|c| gather_column(c, &order)).collect() }
}

struct SyncPtr<T>(*mut T);
unsafe impl<T> Send for SyncPtr<T> {}
unsafe impl<T> Sync for SyncPtr<T> {}
impl<T> SyncPtr<T> {
    /// # Safety
    /// `i` in bounds and written by one thread only.
    unsafe fn write(&self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
}

/// The CPU fast path: parallel histograms per chunk, the chunk-histogram matrix
/// (partition-major) prefix-summed by [`crate::cpu_scan::exclusive_scan`], a
/// parallel stable scatter of the row numbers, then every column gathered in
/// parallel. Same output as [`partition_reference`].
pub fn partition_cpu(columns: &[HostColumn<'_>], keys: &[usize], func: &PartitionFn) -> HostPartitioned {
    let n = check_host(columns, keys, func);
    let f = func.fanout() as usize;
    let threads = rayon::current_num_threads().max(1);
    // chunks: enough for the threads, few enough that the matrix stays small
    let chunk = n.div_ceil(threads * 4).max(1 << 14).max(f * 4);
    let nchunks = n.div_ceil(chunk).max(1);
    let ids = partition_ids(columns, keys, func);
    let hists: Vec<Vec<u32>> = (0..nchunks)
        .into_par_iter()
        .map(|c| {
            let mut h = vec![0u32; f];
            for &id in &ids[(c * chunk).min(n)..((c + 1) * chunk).min(n)] {
                h[id as usize] += 1;
            }
            h
        })
        .collect();
    let mut matrix = vec![0u64; f * nchunks];
    for (c, h) in hists.iter().enumerate() {
        for b in 0..f {
            matrix[b * nchunks + c] = h[b] as u64;
        }
    }
    let total = crate::cpu_scan::scan_in_place(&mut matrix, &crate::cpu_scan::ScanConfig::exclusive());
    debug_assert_eq!(total, n as u64);
    let mut offsets: Vec<u64> = (0..f).map(|b| matrix[b * nchunks]).collect();
    offsets.push(n as u64);
    let mut order = vec![0u32; n];
    let ptr = SyncPtr(order.as_mut_ptr());
    (0..nchunks).into_par_iter().for_each(|c| {
        let mut next: Vec<u64> = (0..f).map(|b| matrix[b * nchunks + c]).collect();
        let start = (c * chunk).min(n);
        for (j, &id) in ids[start..((c + 1) * chunk).min(n)].iter().enumerate() {
            let d = &mut next[id as usize];
            // SAFETY: the destinations of all chunks are disjoint and below n.
            unsafe { ptr.write(*d as usize, (start + j) as u32) };
            *d += 1;
        }
    });
    let cols = columns.par_iter().map(|c| gather_column_par(c, &order)).collect();
    HostPartitioned { offsets, columns: cols }
}

fn gather_column_par(c: &HostColumn<'_>, order: &[u32]) -> OwnedColumn {
    let values = match c.values {
        HostValues::U32(v) => OwnedValues::U32(order.par_iter().map(|&i| v[i as usize]).collect()),
        HostValues::U64(v) => OwnedValues::U64(order.par_iter().map(|&i| v[i as usize]).collect()),
    };
    let validity = c.validity.map(|_| {
        order
            .par_chunks(32)
            .map(|ch| ch.iter().enumerate().fold(0u32, |w, (k, &i)| w | ((c.valid(i as usize) as u32) << k)))
            .collect()
    });
    OwnedColumn { values, validity }
}

// ---------------------------------------------------------------------------------
// GPU
// ---------------------------------------------------------------------------------

/// Tuning of [`partition_gpu_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    /// Invocations per workgroup: 32, 64, 128 or 256.
    pub workgroup_size: u32,
    /// Rows per tile (one histogram column), a multiple of `workgroup_size`.
    pub tile_rows: u32,
    /// On adapters with subgroups of 4 to 32 lanes: rank and scatter in one
    /// kernel per digit pass that sorts each round of a tile by digit in
    /// workgroup memory and writes every partition's rows of it as one run
    /// (shaders/partition_scatter.wgsl). `Some(false)` keeps the rank kernel and
    /// the per-column moves (and, for several passes, the composed permutation).
    /// `None` (the default) fuses except on CPU adapters: on lavapipe the fused
    /// kernel measured 1.7-1.9x slower than the rank kernel and moves (`cargo
    /// bench --bench partition`, 2^22 rows), on the H100 1.05-2.6x faster.
    pub fused: Option<bool>,
}

impl Default for PartitionOptions {
    /// 256 invocations, 16384-row tiles (histogram scratch 1/16 of a u32 column
    /// per 256 digits, see the module documentation).
    fn default() -> Self {
        PartitionOptions { workgroup_size: 256, tile_rows: 16384, fused: None }
    }
}

/// Memory accounting of a GPU partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PartitionStats {
    /// LSD digit passes.
    pub passes: u32,
    /// Tiles (histogram columns).
    pub tiles: u64,
    /// Device bytes of the histogram matrices, their scans (look-back state and
    /// total included) and the `fanout + 1` offsets: the scratch the 5% target is
    /// about.
    pub histogram_bytes: u64,
    /// Device bytes of per-row scratch (ids; destinations and, for several
    /// passes, moved ids, row numbers and the composed permutation without
    /// fusion; copies of the columns between fused passes).
    pub row_scratch_bytes: u64,
    /// Logical bytes of the input columns (values plus validity).
    pub input_bytes: u64,
}

/// A partitioned batch on the device.
#[derive(Debug)]
pub struct Partitioned {
    /// `fanout + 1` offsets: partition `b` is rows `offsets[b] .. offsets[b + 1]`.
    pub offsets: Vec<u64>,
    /// The columns in input order, partitioned (the input's `seg_rows`; validity
    /// bitmaps `seg_rows / 32` words per segment, bits past the length zero).
    pub columns: Vec<CompactedColumn>,
    /// Scratch accounting.
    pub stats: PartitionStats,
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    tiles: u32,
    tile_base: u32,
    total_tiles: u32,
    shift: u32,
    mask: u32,
    fanout: u32,
    flags: u32,
    out_first: u32,
    out_rows: u32,
    row_base: u32,
    nb: u32,
    dshift: u32,
    total: u32,
    pad0: u32,
    pad1: u32,
}

struct Kernels {
    wg: u32,
    chunks: u32,
}

impl Kernels {
    fn pipe(&self, ctx: &GpuContext, wide: bool, entry: &str) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        self.build(ctx, wide, wide, false, entry)
    }

    /// A digit kernel (`histogram`, `rank`) computing each row's id from the one
    /// key column itself.
    fn pipe_inline(&self, ctx: &GpuContext, key_wide: bool, entry: &str) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        self.build(ctx, key_wide, false, true, entry)
    }

    fn build(&self, ctx: &GpuContext, key_wide: bool, val_wide: bool, inline: bool, entry: &str) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        let defs = [
            ("KT", word(key_wide).to_string()),
            ("T", word(val_wide).to_string()),
            ("KEY_FNS", key_fns(key_wide).to_string()),
            ("WG", self.wg.to_string()),
            ("CHUNKS", self.chunks.to_string()),
            ("ROW_RAW", if inline { "return key_words(r);" } else { "return vec3<u32>(pid_in[r], 0u, 1u);" }.to_string()),
            ("RAW_PID", if inline { "return words_pid(w);" } else { "return w.x;" }.to_string()),
        ];
        ctx.pipeline("partition", PARTITION_WGSL, entry, &defs)
    }
}

/// The WGSL type of a 4- or 8-byte value.
fn word(wide: bool) -> &'static str {
    if wide {
        "vec2<u32>"
    } else {
        "u32"
    }
}

/// The key accessors of shaders/partition.wgsl for a 4- or 8-byte key.
fn key_fns(key_wide: bool) -> &'static str {
    if key_wide {
        "fn klo(k: vec2<u32>) -> u32 { return k.x; }\nfn khi(k: vec2<u32>) -> u32 { return k.y; }\nconst KWIDE: bool = true;"
    } else {
        "fn klo(k: u32) -> u32 { return k; }\nfn khi(k: u32) -> u32 { return 0u; }\nconst KWIDE: bool = false;"
    }
}

/// Where the digit kernels read segment `s`'s ids: the ids array, or the key
/// column (and its validity) with the id computed inline.
fn id_entries<'a>(ids: Option<&'a DeviceArray>, key: &Column<'a>, s: usize) -> Vec<wgpu::BindGroupEntry<'a>> {
    match ids {
        Some(a) => vec![entry(3, a.segment(s).0)],
        None => {
            let kb = key.values.segment(s).0;
            vec![entry(0, kb), entry(1, key.validity.map_or(kb, |v| v.segment(s).0))]
        }
    }
}

fn entry(binding: u32, buf: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() }
}

/// A segmented `u32` scratch array plus its bytes.
fn scratch(ctx: &GpuContext, n: usize, seg: usize, bytes: &mut u64) -> GpuResult<DeviceArray> {
    let a = DeviceArray::alloc_segmented(ctx, n, 4, seg)?;
    *bytes += a.device_bytes();
    Ok(a)
}

/// Records `out[idx[i]] = src[i]` (or the row number `i` when `src` is `None`) for
/// all rows, one dispatch per (input segment, output segment).
fn record_move(
    ctx: &GpuContext,
    k: &Kernels,
    pass: &mut Pass,
    idx: &DeviceArray,
    src: Option<&DeviceArray>,
    out: &DeviceArray,
) -> GpuResult<()> {
    let wide = src.is_some_and(|s| s.elem_size() == 8);
    let pipe = k.pipe(ctx, wide, if src.is_some() { "move_values" } else { "move_iota" })?;
    for s in 0..idx.num_segments() {
        let (ib, row_base, rows) = idx.segment(s);
        for t in 0..out.num_segments() {
            let (ob, out_first, out_rows) = out.segment(t);
            let ub = ctx.uniform(&Params {
                n: rows as u32,
                out_first: out_first as u32,
                out_rows: out_rows as u32,
                row_base: row_base as u32,
                ..Default::default()
            });
            let mut e = vec![entry(7, ib), entry(9, ob), entry(15, &ub)];
            if let Some(sa) = src {
                e.push(entry(8, sa.segment(s).0));
            }
            pass.dispatch(ctx, &pipe, &e, (rows as u64).div_ceil(k.wg as u64))?;
        }
    }
    Ok(())
}

fn record_move_validity(ctx: &GpuContext, k: &Kernels, pass: &mut Pass, idx: &DeviceArray, vin: &DeviceArray, vout: &DeviceArray) -> GpuResult<()> {
    let pipe = k.pipe(ctx, false, "move_validity")?;
    let seg = idx.seg_rows();
    for s in 0..idx.num_segments() {
        let (ib, _, rows) = idx.segment(s);
        for t in 0..vout.num_segments() {
            let (ob, _, _) = vout.segment(t);
            let out_first = t * seg;
            let out_rows = (idx.len() - out_first).min(seg);
            let ub = ctx.uniform(&Params { n: rows as u32, out_first: out_first as u32, out_rows: out_rows as u32, ..Default::default() });
            pass.dispatch(
                ctx,
                &pipe,
                &[entry(7, ib), entry(10, vin.segment(s).0), entry(11, ob), entry(15, &ub)],
                (rows as u64).div_ceil(k.wg as u64),
            )?;
        }
    }
    Ok(())
}

/// Workgroup shape of the fused rank-and-scatter kernel on this adapter, or
/// `None` where it cannot run (no subgroups, subgroups outside 4..=32 lanes, too
/// little workgroup memory or too few storage bindings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FusedShape {
    /// Invocations: 8 subgroups of the smallest size, 32..=256.
    swg: u32,
    /// Rows per invocation and round (`for_digits` sets it per pass).
    items: u32,
    /// The most rows per invocation the workgroup memory allows.
    max_items: u32,
    /// Rows per invocation asked for by RIDGELINE_PARTITION_ITEMS.
    items_set: Option<u32>,
    /// Subgroups a workgroup can have (counters in workgroup memory).
    nsgmax: u32,
    /// When the column values are read (for the first columns, up to
    /// `PRELOAD_WORDS` registers per item).
    preload: Preload,
    /// The preload asked for by RIDGELINE_PARTITION_PRELOAD.
    preload_set: Option<Preload>,
    /// Whether the key words are loaded a round ahead.
    key_ahead: bool,
}

/// The fused kernel's digits of a round, read where they are needed ...
const KEY_DIGITS: &str = "        //@unroll
        {
            let row = sbase + @K * istride;
            var d = 0u;
            if (row < tend) { d = digit(row_pid(row)); }
            dig[@K] = d;
        }
        //@end
";

/// ... or from key words loaded a round earlier, issuing the next round's
/// loads at once (`KEY_PREFETCH` loads the first round's before the loop).
const KEY_PREFETCH: &str = "    var pk: array<vec3<u32>, ITEMS>;
    //@unroll
    if (sbase0 + @K * istride < tend) { pk[@K] = row_raw(sbase0 + @K * istride); }
    //@end
";
const KEY_DIGITS_AHEAD: &str = "        //@unroll
        {
            let row = sbase + @K * istride;
            var d = 0u;
            if (row < tend) { d = digit(raw_pid(pk[@K])); }
            dig[@K] = d;
{{KEY_KEEP}}            if (row + R < tend) { pk[@K] = row_raw(row + R); }
        }
        //@end
";

/// Registers per item the fused kernel may spend on preloaded column values.
const PRELOAD_WORDS: u32 = 6;

fn fused_shape(ctx: &GpuContext) -> Option<FusedShape> {
    // RIDGELINE_PARTITION_FUSED=0 turns the fused kernel off everywhere (to
    // compare the paths inside whole operators, as `bench aggregate` does).
    if !ctx.has_subgroups() || std::env::var("RIDGELINE_PARTITION_FUSED").is_ok_and(|v| v == "0") {
        return None;
    }
    let (smin, smax) = (ctx.info().subgroup_min_size, ctx.info().subgroup_max_size);
    if smin < 4 || smax > 32 || smin > smax {
        return None;
    }
    // RIDGELINE_PARTITION_SWG (a power of two, 32..=256) is for measuring
    let swg = std::env::var("RIDGELINE_PARTITION_SWG")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|w| w.is_power_of_two() && (32..=256).contains(w))
        .unwrap_or((8 * smin).clamp(32, 256));
    if swg % smax != 0 || ctx.limits().max_storage_buffers_per_shader_stage < 8 {
        return None;
    }
    let nsgmax = swg / smin;
    // subgroup counters, two staging arrays of R words, three digit arrays
    let storage = |items: u32| 4 * 256 * nsgmax + 8 * swg * items + 3 * 1024 + 64;
    let mut max_items = 16;
    while max_items > 1 && storage(max_items) > ctx.limits().max_compute_workgroup_storage_size {
        max_items /= 2;
    }
    if storage(max_items) > ctx.limits().max_compute_workgroup_storage_size {
        return None;
    }
    // RIDGELINE_PARTITION_ITEMS (1..=16), RIDGELINE_PARTITION_PRELOAD
    // (late|round|ahead) and RIDGELINE_PARTITION_KEYAHEAD=0 are for measuring.
    let items = std::env::var("RIDGELINE_PARTITION_ITEMS").ok().and_then(|v| v.parse::<u32>().ok()).filter(|i| (1..=16).contains(i));
    let preload = match std::env::var("RIDGELINE_PARTITION_PRELOAD").as_deref() {
        Ok("late") => Some(Preload::Late),
        Ok("round") => Some(Preload::Round),
        Ok("ahead") => Some(Preload::Ahead),
        _ => None,
    };
    let key_ahead = !std::env::var("RIDGELINE_PARTITION_KEYAHEAD").is_ok_and(|v| v == "0");
    Some(FusedShape { swg, items: 4, max_items, items_set: items, nsgmax, preload: Preload::Round, preload_set: preload, key_ahead })
}

impl FusedShape {
    /// The shape of a pass over digits of `dbits` bits. Measured on the H100
    /// (2^28 rows, u32 key + u32 payload, BENCHMARKS.md session 22, device ms
    /// of the whole partition): 2-way 2.34 with 4 rows per invocation and round
    /// (8: 3.02, 16: 4.48); 32/64-way 3.3/3.75 with 8 (16: 4.9/5.1); 256-way
    /// 7.0 with 8 rows read a round ahead (4: 9.5). 12 and 16 rows took
    /// 256-way to 6.35 and 5.65 ms in most processes, but in about a quarter
    /// of the processes with 16 rows every kernel, the histogram included,
    /// then ran 2-5x slower for the rest of the process (never seen with 8 rows
    /// in some 15 processes), so they stay opt-in (RIDGELINE_PARTITION_ITEMS).
    fn for_digits(mut self, dbits: u32) -> Self {
        let (items, preload) = if dbits > 4 { (8, Preload::Ahead) } else { (4, Preload::Round) };
        self.items = self.items_set.unwrap_or(items).min(self.max_items);
        self.preload = self.preload_set.unwrap_or(preload);
        self
    }
}

/// How the fused kernel reads a column's values (and validity bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Preload {
    /// Read where they are staged, after the ranking: one more load latency
    /// per column and round.
    Late,
    /// Read into registers at the start of the round, beside the keys.
    Round,
    /// Read the next round's values right after staging this round's, so the
    /// load overlaps the writes and the next round's ranking.
    Ahead,
}

/// The WGSL of one column's part of the fused kernel: (bindings, code before
/// the round loop, code at the start of a round, moves).
/// Column `j` binds `16 + 4j` (input), `17 + 4j` (output) and, with validity,
/// `18 + 4j` / `19 + 4j` (input / output bitmap).
///
/// With `from_key` the column is the key column itself,
/// whose words the kernel already holds in registers (`pk`, loaded a round
/// ahead): its values and validity bits are copied from there (`key_keep`)
/// instead of being loaded a second time.
fn fused_column_wgsl(j: usize, wide: bool, validity: bool, preload: Preload, from_key: bool) -> [String; 4] {
    // The first column's staging follows the destinations' barrier; a wide
    // one writes `sb`, which every invocation has just read, so it waits.
    let lead = if j > 0 || wide { "        workgroupBarrier();\n" } else { "" };
    let b = 16 + 4 * j;
    let t = if wide { "vec2<u32>" } else { "u32" };
    let mut decl = format!(
        "@group(0) @binding({}) var<storage, read> ci{j}: array<{t}>;\n@group(0) @binding({}) var<storage, read_write> co{j}: array<{t}>;\n",
        b,
        b + 1
    );
    let (stage, value) = if wide {
        ("sa[pos[@K]] = v.x; sb[pos[@K]] = v.y;", "vec2<u32>(sa[i], sb[i])")
    } else {
        ("sa[pos[@K]] = v;", "sa[i]")
    };
    // row `row`'s validity bit
    let bit = format!("(cvi{j}[row / 32u] >> (row % 32u)) & 1u");
    // item @K of the round whose first row of this invocation is `base`: its
    // value into `pv` or, staged, `v`; its validity bit into `pb` or `sa`
    let item = |base: &str, what: &str| format!("        //@unroll\n        {{ let row = {base} + @K * istride; if (row < tend) {{ {what} }} }}\n        //@end\n");
    let load_v = |base: &str| item(base, &format!("pv{j}[@K] = ci{j}[row];"));
    let load_b = |base: &str| item(base, &format!("pb{j}[@K] = {bit};"));
    let (mut before, mut start) = (String::new(), String::new());
    let mut arrays = format!("    var pv{j}: array<{t}, ITEMS>;\n");
    if validity {
        arrays += &format!("    var pb{j}: array<u32, ITEMS>;\n");
    }
    match preload {
        _ if from_key => start += &arrays,
        Preload::Late => {}
        Preload::Round => {
            start += &arrays;
            start += &load_v("sbase");
            if validity {
                start += &load_b("sbase");
            }
        }
        Preload::Ahead => {
            before += &arrays;
            before += &load_v("sbase0");
            if validity {
                before += &load_b("sbase0");
            }
        }
    }
    let stage_v = match preload {
        Preload::Late if !from_key => item("sbase", &format!("let v = ci{j}[row]; {stage}")),
        _ => item("sbase", &format!("let v = pv{j}[@K]; {stage}")),
    };
    let ahead = |s: String| if preload == Preload::Ahead && !from_key { s } else { String::new() };
    let mut code = format!(
        "        // column {j}
{lead}{stage_v}{}        workgroupBarrier();
        //@unroll
        {{
            let i = @K * SWG + lid;
            let g = gd[@K];
            if (i < rcount && in_out(g)) {{ co{j}[g - p.out_first] = {value}; }}
        }}
        //@end
",
        ahead(load_v("(sbase + R)"))
    );
    if validity {
        decl += &format!(
            "@group(0) @binding({}) var<storage, read> cvi{j}: array<u32>;\n@group(0) @binding({}) var<storage, read_write> cvo{j}: array<atomic<u32>>;\n",
            b + 2,
            b + 3
        );
        let stage_b = match preload {
            Preload::Late if !from_key => item("sbase", &format!("sa[pos[@K]] = {bit};")),
            _ => item("sbase", &format!("sa[pos[@K]] = pb{j}[@K];")),
        };
        code += &format!(
            "        workgroupBarrier();
{stage_b}{}        workgroupBarrier();
        //@unroll
        {{
            let i = @K * SWG + lid;
            let g = gd[@K];
            if (i < rcount && in_out(g) && sa[i] != 0u) {{
                let q = g - p.out_first;
                atomicOr(&cvo{j}[q / 32u], 1u << (q % 32u));
            }}
        }}
        //@end
",
            ahead(load_b("(sbase + R)"))
        );
    }
    [decl, before, start, code]
}

/// Repeats every `//@unroll` .. `//@end` block of `src` once per item, with
/// `@K` replaced by the item's number: the per-item arrays of the fused kernel
/// are then indexed by constants (kept in registers; a loop indexing them
/// dynamically put them in memory).
fn unroll_items(src: &str, items: u32) -> String {
    let mut out = String::with_capacity(src.len() * 2);
    let mut rest = src;
    while let Some(a) = rest.find("//@unroll\n") {
        out.push_str(&rest[..a]);
        let body_start = a + "//@unroll\n".len();
        let Some(e) = rest[body_start..].find("//@end\n") else { break };
        let body = &rest[body_start..body_start + e];
        for k in 0..items {
            out.push_str(&body.replace("@K", &format!("{k}u")));
        }
        rest = &rest[body_start + e + "//@end\n".len()..];
    }
    out.push_str(rest);
    out
}

/// Where the fused kernel gets each row's partition id: computed from the one
/// key column, or read from an ids array (several key columns, or the digit
/// passes after the first).
#[derive(Clone, Copy)]
enum IdSource<'a> {
    Key(&'a Column<'a>),
    Ids(&'a DeviceArray),
}

/// Records the fused rank-and-scatter of every column for the digit at
/// `base.dshift` (`base.nb` digits): one dispatch per group of columns (as many as the storage
/// bindings allow, at most 8) and per (input segment, output segment).
/// `outputs[i]` receives `columns[i]` (values, validity).
#[allow(clippy::too_many_arguments)]
fn record_fused(
    ctx: &GpuContext,
    k: &Kernels,
    shape: FusedShape,
    pass: &mut Pass,
    columns: &[Column<'_>],
    outputs: &[(&DeviceArray, Option<&DeviceArray>)],
    ids: IdSource<'_>,
    base: Params,
    counts: &GpuBuffer,
    offs: &GpuBuffer,
    seg_tiles: &[usize],
) -> GpuResult<()> {
    let budget = ctx.limits().max_storage_buffers_per_shader_stage.saturating_sub(4).min(64);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = u32::MAX;
    for (i, c) in columns.iter().enumerate() {
        let cost = if c.validity.is_some() { 4 } else { 2 };
        match groups.last_mut() {
            Some(g) if used + cost <= budget && g.len() < 8 => {
                g.push(i);
                used += cost;
            }
            _ => {
                groups.push(vec![i]);
                used = cost;
            }
        }
    }
    let key_wide = matches!(ids, IdSource::Key(key) if key.values.elem_size() == 8);
    let dbits = if base.nb <= 1 { 0 } else { 32 - (base.nb - 1).leading_zeros() };
    let shape = shape.for_digits(dbits);
    let nbs = 1u32 << dbits;
    // RIDGELINE_PARTITION_PAD (words of unused workgroup memory, to cap the
    // workgroups per multiprocessor) is for measuring
    let pad: u32 = std::env::var("RIDGELINE_PARTITION_PAD").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    // the moved column that is the key column itself, when its words are
    // loaded a round ahead anyway
    let key_col = match ids {
        IdSource::Key(key) if shape.key_ahead && !std::env::var("RIDGELINE_PARTITION_KEEP").is_ok_and(|v| v == "0") => columns.iter().position(|c| {
            std::ptr::eq(c.values, key.values)
                && match (c.validity, key.validity) {
                    (None, None) => true,
                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                    _ => false,
                }
        }),
        _ => None,
    };
    let nsegs = columns[0].values.num_segments();
    let nout = outputs[0].0.num_segments();
    for g in &groups {
        let sig: String = g
            .iter()
            .map(|&i| format!("{}{}", columns[i].values.elem_size(), if columns[i].validity.is_some() { "v" } else { "" }))
            .collect::<Vec<_>>()
            .join(",");
        let defs = [
            ("KT", word(key_wide).to_string()),
            ("T", "u32".to_string()),
            ("KEY_FNS", key_fns(key_wide).to_string()),
            ("WG", k.wg.to_string()),
            ("CHUNKS", k.chunks.to_string()),
            (
                "ROW_RAW",
                match ids {
                    // without NULLs the validity word is a constant
                    IdSource::Key(key) if key.validity.is_none() => "let k = keys[r]; return vec3<u32>(klo(k), khi(k), 1u);",
                    IdSource::Key(_) => "return key_words(r);",
                    IdSource::Ids(_) => "return vec3<u32>(pid_in[r], 0u, 1u);",
                }
                .to_string(),
            ),
            ("RAW_PID", if matches!(ids, IdSource::Key(_)) { "return words_pid(w);" } else { "return w.x;" }.to_string()),
            ("KEY_AHEAD", shape.key_ahead.to_string()),
            ("SWG", shape.swg.to_string()),
            ("ITEMS", shape.items.to_string()),
            ("NSGMAX", shape.nsgmax.to_string()),
            ("NBS", nbs.to_string()),
            ("DPT", (nbs / shape.swg).max(1).to_string()),
            ("COLS", sig),
            ("DBITS", dbits.to_string()),
            ("PRELOAD", format!("{:?}", shape.preload)),
            ("KEEP", format!("{:?}", key_col.and_then(|c| g.iter().position(|&i| i == c)))),
            ("PAD", pad.to_string()),
        ];
        let pipe = ctx.pipeline_lazy("partition_scatter", "scatter", &defs, || {
            let prelude = PARTITION_WGSL.split("// @@PRELUDE_END@@").next().unwrap_or_default();
            let (mut decls, mut before, mut start, mut moves) = (String::new(), String::new(), String::new(), String::new());
            let mut budget = PRELOAD_WORDS;
            let mut key_keep = String::new();
            for (j, &i) in g.iter().enumerate() {
                let wide = columns[i].values.elem_size() == 8;
                let validity = columns[i].validity.is_some();
                // registers per item this column's preload holds
                let words = 1 + wide as u32 + validity as u32;
                let from_key = key_col == Some(i);
                let mode = if words <= budget || from_key { shape.preload } else { Preload::Late };
                if mode != Preload::Late || from_key {
                    budget = budget.saturating_sub(words);
                }
                if from_key {
                    let v = if wide { "vec2<u32>(pk[@K].x, pk[@K].y)" } else { "pk[@K].x" };
                    key_keep += &format!("            pv{j}[@K] = {v};\n");
                    if validity {
                        key_keep += &format!("            pb{j}[@K] = pk[@K].z;\n");
                    }
                }
                let [d, b, st, m] = fused_column_wgsl(j, wide, validity, mode, from_key);
                decls += &d;
                before += &b;
                start += &st;
                moves += &m;
            }
            if moves.is_empty() {
                // the zeroed counters must wait for the next round's ranking
                moves.push_str("        workgroupBarrier();\n");
            }
            let src = SCATTER_WGSL
                .replace("{{COL_DECLS}}", &decls)
                .replace("{{COL_PREFETCH}}", &before)
                .replace("{{COL_PRELOAD}}", &start)
                .replace("{{KEY_PREFETCH}}", if shape.key_ahead { KEY_PREFETCH } else { "" })
                .replace("{{KEY_DIGITS}}", if shape.key_ahead { KEY_DIGITS_AHEAD } else { KEY_DIGITS })
                .replace("{{KEY_KEEP}}", &key_keep)
                .replace("{{PAD}}", &if pad > 0 { format!("var<workgroup> pad: array<u32, {pad}>;\n") } else { String::new() })
                .replace("{{PAD_TOUCH}}", if pad > 0 { "    pad[lid % PADW] = lid;\n" } else { "" })
                .replace("PADW", &format!("{pad}u"))
                .replace("{{COL_MOVES}}", &moves);
            Ok(format!("{prelude}\n{}", unroll_items(&src, shape.items)))
        })?;
        let mut tb = 0usize;
        for s in 0..nsegs {
            let rows = columns[0].values.segment(s).2;
            for t in 0..nout {
                let (_, out_first, out_rows) = outputs[0].0.segment(t);
                let ub = ctx.uniform(&Params {
                    n: rows as u32,
                    tiles: seg_tiles[s] as u32,
                    tile_base: tb as u32,
                    out_first: out_first as u32,
                    out_rows: out_rows as u32,
                    flags: base.flags | if nout > 1 { F_MULTI } else { 0 },
                    ..base
                });
                let mut e = vec![entry(4, counts.raw()), entry(5, offs.raw()), entry(15, &ub)];
                match ids {
                    IdSource::Key(key) => {
                        e.push(entry(0, key.values.segment(s).0));
                        // the bitmap is read only where the key has NULLs (ROW_RAW)
                        if let Some(v) = key.validity {
                            e.push(entry(1, v.segment(s).0));
                        }
                    }
                    IdSource::Ids(a) => e.push(entry(3, a.segment(s).0)),
                }
                for (j, &i) in g.iter().enumerate() {
                    let b = 16 + 4 * j as u32;
                    // the key column's values and validity come from the key's bindings
                    let from_key = key_col == Some(i);
                    if !from_key {
                        e.push(entry(b, columns[i].values.segment(s).0));
                    }
                    e.push(entry(b + 1, outputs[i].0.segment(t).0));
                    if let (Some(vin), Some(vout)) = (columns[i].validity, outputs[i].1) {
                        if !from_key {
                            e.push(entry(b + 2, vin.segment(s).0));
                        }
                        e.push(entry(b + 3, vout.segment(t).0));
                    }
                }
                pass.dispatch(ctx, &pipe, &e, seg_tiles[s] as u64)?;
            }
            tb += seg_tiles[s];
        }
    }
    Ok(())
}

/// Device columns shaped like `columns` (`n` rows, `seg` rows a segment; a
/// validity bitmap where the input has one), not initialised.
fn alloc_like(ctx: &GpuContext, columns: &[Column<'_>], n: usize, seg: usize) -> GpuResult<Vec<CompactedColumn>> {
    columns
        .iter()
        .map(|c| {
            let values = DeviceArray::alloc_segmented(ctx, n, c.values.elem_size(), seg)?;
            let validity = match c.validity {
                Some(_) => Some(DeviceArray::alloc_segmented(ctx, n.div_ceil(32), 4, seg / 32)?),
                None => None,
            };
            Ok(CompactedColumn { values, validity })
        })
        .collect()
}

/// Zeroes the validity bitmaps of `cols` (the scatters set bits with atomicOr).
fn clear_validity(enc: &mut wgpu::CommandEncoder, cols: &[CompactedColumn]) {
    for v in cols.iter().filter_map(|c| c.validity.as_ref()) {
        for i in 0..v.num_segments() {
            enc.clear_buffer(v.segment(i).0, 0, None);
        }
    }
}

/// Partitions `columns` by the key columns `keys` (indices into `columns`) with
/// the default options. All columns must have the same length and `seg_rows`.
pub fn partition_gpu(ctx: &GpuContext, columns: &[Column<'_>], keys: &[usize], func: &PartitionFn) -> GpuResult<Partitioned> {
    partition_gpu_with(ctx, columns, keys, func, &PartitionOptions::default())
}

/// [`partition_gpu`] with explicit options.
pub fn partition_gpu_with(
    ctx: &GpuContext,
    columns: &[Column<'_>],
    keys: &[usize],
    func: &PartitionFn,
    opts: &PartitionOptions,
) -> GpuResult<Partitioned> {
    partition_impl(ctx, columns, keys, func, opts, Timing::None)
}

/// How [`partition_impl`] times its work.
enum Timing<'a> {
    None,
    /// The whole compute pass, as pass 0 of the timer.
    Pass(&'a KernelTimer),
    /// Every dispatch in its own timed pass; milliseconds summed per step label.
    Each(&'a mut Vec<(&'static str, f64)>),
}

fn partition_impl(
    ctx: &GpuContext,
    columns: &[Column<'_>],
    keys: &[usize],
    func: &PartitionFn,
    opts: &PartitionOptions,
    timing: Timing<'_>,
) -> GpuResult<Partitioned> {
    let inv = |m: String| GpuError::Invalid(m);
    if columns.is_empty() {
        return Err(inv("partition of no columns".into()));
    }
    let n = columns[0].values.len();
    let seg = columns[0].values.seg_rows();
    for c in columns {
        if c.values.len() != n || c.values.seg_rows() != seg {
            return Err(inv("partition columns of different lengths or segmentations".into()));
        }
        if let Some(v) = c.validity {
            if v.len() != n.div_ceil(32) || v.seg_rows() * 32 != seg {
                return Err(inv("validity bitmap does not match its column".into()));
            }
        }
    }
    if keys.iter().any(|&k| k >= columns.len()) {
        return Err(inv("key column index out of range".into()));
    }
    let widths: Vec<usize> = keys.iter().map(|&k| columns[k].values.elem_size()).collect();
    func.check(&widths).map_err(inv)?;
    if n as u64 >= u32::MAX as u64 {
        return Err(inv(format!("partition of {n} rows (at most 2^32 - 2)")));
    }
    let wg = opts.workgroup_size;
    if ![32, 64, 128, 256].contains(&wg) || opts.tile_rows == 0 || opts.tile_rows % wg != 0 {
        return Err(inv(format!("workgroup size {wg} / tile of {} rows", opts.tile_rows)));
    }
    let k = Kernels { wg, chunks: opts.tile_rows / wg };
    let fanout = func.fanout();
    let passes = func.passes();
    let input_bytes = columns
        .iter()
        .map(|c| (c.values.len() * c.values.elem_size() + c.validity.map_or(0, |v| v.len() * 4)) as u64)
        .sum::<u64>();
    let outputs = alloc_like(ctx, columns, n, seg)?;
    let mut stats = PartitionStats { passes, input_bytes, ..Default::default() };
    if n == 0 {
        return Ok(Partitioned { offsets: vec![0; fanout as usize + 1], columns: outputs, stats });
    }
    let mut pass = Pass::default();
    let mut enc = ctx.encoder("partition");
    clear_validity(&mut enc, &outputs);
    let mut row_bytes = 0u64;
    let mut hist_bytes = 0u64;
    // 1. partition ids: computed inside the digit kernels from the one key column
    // when one digit pass suffices; else into a u32 scratch array first
    let kc0 = &columns[keys[0]];
    let (shift, mask, fflags) = match *func {
        PartitionFn::Radix { shift, bits } => (shift, ((1u64 << bits) - 1) as u32, 0),
        PartitionFn::Direct { .. } => (0, 0, F_DIRECT),
        PartitionFn::Hash { .. } => (0, 0, F_HASH),
    };
    let key_pid = Params { shift, mask, fanout, flags: fflags | if kc0.validity.is_some() { F_VALID } else { 0 }, ..Default::default() };
    let inline = passes == 1 && keys.len() == 1;
    let fused = if opts.fused.unwrap_or(!ctx.is_cpu_adapter()) { fused_shape(ctx) } else { None };
    let groups = |rows: usize| (rows as u64).div_ceil(wg as u64);
    let ids = if inline { None } else { Some(scratch(ctx, n, seg, &mut row_bytes)?) };
    pass.label = "ids";
    match (&ids, *func) {
        (None, _) => {}
        (Some(ids), PartitionFn::Radix { .. } | PartitionFn::Direct { .. }) => {
            let pipe = k.pipe(ctx, kc0.values.elem_size() == 8, "pid_radix")?;
            for s in 0..ids.num_segments() {
                let (ib, _, rows) = ids.segment(s);
                let kb = kc0.values.segment(s).0;
                let ub = ctx.uniform(&Params { n: rows as u32, ..key_pid });
                let vb = kc0.validity.map_or(kb, |v| v.segment(s).0);
                pass.dispatch(ctx, &pipe, &[entry(0, kb), entry(1, vb), entry(2, ib), entry(15, &ub)], groups(rows))?;
            }
        }
        (Some(ids), PartitionFn::Hash { .. }) => {
            for (j, &kcol) in keys.iter().enumerate() {
                let kc = &columns[kcol];
                let pipe = k.pipe(ctx, kc.values.elem_size() == 8, "pid_hash")?;
                let mut flags = if kc.validity.is_some() { F_VALID } else { 0 };
                if j == 0 {
                    flags |= F_FIRST;
                }
                if j + 1 == keys.len() {
                    flags |= F_LAST;
                }
                for s in 0..ids.num_segments() {
                    let (ib, _, rows) = ids.segment(s);
                    let kb = kc.values.segment(s).0;
                    let vb = kc.validity.map_or(kb, |v| v.segment(s).0);
                    let ub = ctx.uniform(&Params { n: rows as u32, fanout, flags, ..Default::default() });
                    pass.dispatch(ctx, &pipe, &[entry(0, kb), entry(1, vb), entry(2, ib), entry(15, &ub)], groups(rows))?;
                }
            }
        }
    }
    // 2. digit passes
    let tile = opts.tile_rows as usize;
    let nsegs = kc0.values.num_segments();
    let seg_tiles: Vec<usize> = (0..nsegs).map(|s| kc0.values.segment(s).2.div_ceil(tile)).collect();
    let total_tiles: usize = seg_tiles.iter().sum();
    stats.tiles = total_tiles as u64;
    let sk = ScanKernel::new(ctx, ScanType::U32, &ScanOptions::default())?;
    let (hist_pipe, rank_pipe) = if inline {
        let wide = kc0.values.elem_size() == 8;
        (k.pipe_inline(ctx, wide, "histogram")?, k.pipe_inline(ctx, wide, "rank")?)
    } else {
        (k.pipe(ctx, false, "histogram")?, k.pipe(ctx, false, "rank")?)
    };
    let mut cur_ids = ids;
    let mut src: Option<DeviceArray> = None; // position -> input row, after the passes so far
    let mut keep_arrays: Vec<DeviceArray> = Vec::new();
    let mut keep_bufs: Vec<GpuBuffer> = Vec::new();
    let mut last_offs: Option<GpuBuffer> = None;
    let mut dest: Option<DeviceArray> = None;
    // Fused passes: each ranks by its digit and moves every column (with
    // several passes, plus the ids), through temporary copies of the columns
    // between passes (each written once: validity zeroed).
    let mut temps: Vec<Vec<CompactedColumn>> = Vec::new();
    if fused.is_some() {
        for _ in 0..(passes as usize - 1).min(2) {
            let t = alloc_like(ctx, columns, n, seg)?;
            clear_validity(&mut enc, &t);
            row_bytes += t.iter().map(|c| c.values.device_bytes() + c.validity.as_ref().map_or(0, |v| v.device_bytes())).sum::<u64>();
            temps.push(t);
        }
    }
    for ps in 0..passes {
        let dshift = 8 * ps;
        let nb = if fanout <= 1 { 1 } else { (((fanout - 1) >> dshift) + 1).min(256) };
        let m = nb as u64 * total_tiles as u64;
        let counts = ctx.pool().alloc(m.div_ceil(4) * 16)?;
        let offs = ctx.pool().alloc(m.div_ceil(4) * 16)?;
        let total = ctx.pool().alloc(16)?;
        hist_bytes += counts.size() + offs.size() + total.size();
        let tile_params = |s: usize, tb: usize, rows: usize| Params {
            n: rows as u32,
            tiles: seg_tiles[s] as u32,
            tile_base: tb as u32,
            total_tiles: total_tiles as u32,
            nb,
            dshift,
            ..key_pid
        };
        let mut tb = 0usize;
        pass.label = "histogram";
        for s in 0..nsegs {
            let rows = kc0.values.segment(s).2;
            let ub = ctx.uniform(&tile_params(s, tb, rows));
            let mut e = id_entries(cur_ids.as_ref(), kc0, s);
            e.extend([entry(4, counts.raw()), entry(15, &ub)]);
            pass.dispatch(ctx, &hist_pipe, &e, seg_tiles[s] as u64)?;
            tb += seg_tiles[s];
        }
        let before = pass.keep.len();
        pass.label = "scan";
        sk.record(ctx, &mut pass, &[(counts.raw(), offs.raw(), m)], ScanKind::Exclusive, total.raw())?;
        hist_bytes += pass.keep[before..].iter().map(|b| b.size()).sum::<u64>();
        if let Some(shape) = fused {
            // ids from the key (one pass, one key column) or the ids array, moved
            // along for the next pass and the offsets when there are several
            let ids_now = cur_ids.take();
            let next_ids = match (&ids_now, passes) {
                (Some(_), 2..) => Some(scratch(ctx, n, seg, &mut row_bytes)?),
                _ => None,
            };
            let last = ps + 1 == passes;
            let mut ins: Vec<Column<'_>> = if ps == 0 {
                columns.to_vec()
            } else {
                temps[(ps as usize - 1) % 2].iter().map(|c| Column { values: &c.values, validity: c.validity.as_ref() }).collect()
            };
            let dst_cols = if last { &outputs } else { &temps[ps as usize % 2] };
            let mut outs: Vec<(&DeviceArray, Option<&DeviceArray>)> = dst_cols.iter().map(|o| (&o.values, o.validity.as_ref())).collect();
            if let (Some(a), Some(nx)) = (&ids_now, &next_ids) {
                ins.push(Column::new(a));
                outs.push((nx, None));
            }
            let src = match &ids_now {
                Some(a) => IdSource::Ids(a),
                None => IdSource::Key(kc0),
            };
            let base = Params { total_tiles: total_tiles as u32, nb, dshift, ..key_pid };
            pass.label = "rank+scatter";
            record_fused(ctx, &k, shape, &mut pass, &ins, &outs, src, base, &counts, &offs, &seg_tiles)?;
            keep_arrays.extend(ids_now);
            cur_ids = next_ids;
            keep_bufs.extend([counts, total]);
            if passes == 1 {
                // offsets straight from the scanned matrix
                last_offs = Some(offs);
            } else {
                keep_bufs.push(offs);
            }
            if last {
                break;
            }
            continue;
        }
        let dst = scratch(ctx, n, seg, &mut row_bytes)?;
        let mut tb = 0usize;
        pass.label = "rank";
        for s in 0..nsegs {
            let rows = kc0.values.segment(s).2;
            let ub = ctx.uniform(&tile_params(s, tb, rows));
            let mut e = id_entries(cur_ids.as_ref(), kc0, s);
            e.extend([entry(5, offs.raw()), entry(6, dst.segment(s).0), entry(15, &ub)]);
            pass.dispatch(ctx, &rank_pipe, &e, seg_tiles[s] as u64)?;
            tb += seg_tiles[s];
        }
        if passes == 1 {
            dest = Some(dst);
            keep_bufs.push(counts);
            last_offs = Some(offs);
            keep_bufs.push(total);
            break;
        }
        // move the ids (for the next pass, and sorted for the offsets at the end)
        let ids_now = cur_ids.take().expect("several passes keep an ids array");
        let next_ids = scratch(ctx, n, seg, &mut row_bytes)?;
        pass.label = "move ids";
        record_move(ctx, &k, &mut pass, &dst, Some(&ids_now), &next_ids)?;
        let next_src = scratch(ctx, n, seg, &mut row_bytes)?;
        record_move(ctx, &k, &mut pass, &dst, src.as_ref(), &next_src)?;
        keep_arrays.push(ids_now);
        cur_ids = Some(next_ids);
        if let Some(old) = src.replace(next_src) {
            keep_arrays.push(old);
        }
        keep_arrays.push(dst);
        keep_bufs.extend([counts, offs, total]);
    }
    // 3. offsets
    let poffs = ctx.pool().alloc(((fanout as u64 + 1) * 4).div_ceil(16) * 16)?;
    hist_bytes += poffs.size();
    let fgroups = (fanout as u64 + 1).div_ceil(wg as u64);
    pass.label = "offsets";
    let dest = match &last_offs {
        Some(offs) => {
            let pipe = k.pipe(ctx, false, "gather_offsets")?;
            let ub = ctx.uniform(&Params { fanout, total_tiles: total_tiles as u32, total: n as u32, ..Default::default() });
            pass.dispatch(ctx, &pipe, &[entry(5, offs.raw()), entry(12, poffs.raw()), entry(15, &ub)], fgroups)?;
            dest
        }
        None => {
            let fill = k.pipe(ctx, false, "fill_offsets")?;
            let ub = ctx.uniform(&Params { fanout, total: n as u32, ..Default::default() });
            pass.dispatch(ctx, &fill, &[entry(12, poffs.raw()), entry(15, &ub)], fgroups)?;
            let bp = k.pipe(ctx, false, "bounds")?;
            let cur_ids = cur_ids.as_ref().expect("several passes keep an ids array");
            for s in 0..cur_ids.num_segments() {
                let (pb, row_base, rows) = cur_ids.segment(s);
                let (prev, prev_rows, flags) = if s > 0 {
                    let (b, _, r) = cur_ids.segment(s - 1);
                    (b, r, F_PREV)
                } else {
                    (pb, 0, 0)
                };
                let ub = ctx.uniform(&Params {
                    n: rows as u32,
                    row_base: row_base as u32,
                    out_rows: prev_rows as u32,
                    flags,
                    fanout,
                    ..Default::default()
                });
                pass.dispatch(ctx, &bp, &[entry(3, pb), entry(13, prev), entry(12, poffs.raw()), entry(15, &ub)], groups(rows))?;
            }
            if fused.is_some() {
                None // the fused passes moved every column
            } else {
                // invert the composed permutation: dest[src[j]] = j
                pass.label = "invert";
                let src = src.take().expect("several passes track row numbers");
                let d = scratch(ctx, n, seg, &mut row_bytes)?;
                record_move(ctx, &k, &mut pass, &src, None, &d)?;
                keep_arrays.push(src);
                Some(d)
            }
        }
    };
    // 4. scatter the columns
    // (the fused passes moved every column already)
    if let Some(dest) = &dest {
        pass.label = "move columns";
        for (c, o) in columns.iter().zip(&outputs) {
            record_move(ctx, &k, &mut pass, dest, Some(c.values), &o.values)?;
            if let (Some(vin), Some(vout)) = (c.validity, &o.validity) {
                record_move_validity(ctx, &k, &mut pass, dest, vin, vout)?;
            }
        }
    }
    // the per-dispatch profile's timer (one pass per dispatch)
    let each = match &timing {
        Timing::Each(_) => KernelTimer::new(ctx, pass.len() as u32),
        _ => None,
    };
    let timer = match &timing {
        Timing::Pass(t) => {
            pass.encode(&mut enc, t.writes(0));
            Some(*t)
        }
        _ => match &each {
            Some(t) => {
                pass.encode_each(&mut enc, t);
                Some(t)
            }
            None => {
                pass.encode(&mut enc, None);
                None
            }
        },
    };
    let read = DeviceArray::alloc_segmented(ctx, fanout as usize + 1, 4, (fanout as usize + 1).div_ceil(4) * 4)?;
    enc.copy_buffer_to_buffer(poffs.raw(), 0, read.segment(0).0, 0, (fanout as u64 + 1) * 4);
    if let Some(t) = timer {
        t.resolve(&mut enc);
    }
    ctx.submit(enc)?;
    let offsets: Vec<u64> = read.download::<u32>(ctx)?.into_iter().map(u64::from).collect();
    if let (Timing::Each(out), Some(t)) = (timing, &each) {
        for (label, ms) in pass.labels().zip(t.read_ms(ctx)?) {
            match out.iter_mut().find(|(l, _)| *l == label) {
                Some(e) => e.1 += ms,
                None => out.push((label, ms)),
            }
        }
    }
    drop((pass, keep_arrays, keep_bufs, last_offs, cur_ids, dest, temps));
    stats.histogram_bytes = hist_bytes;
    stats.row_scratch_bytes = row_bytes;
    Ok(Partitioned { offsets, columns: outputs, stats })
}

/// A partition benchmark result (see [`bench_partition`]).
#[derive(Clone, Debug)]
pub struct PartitionBench {
    /// Rows.
    pub n: usize,
    /// Partitions.
    pub fanout: u32,
    /// Payload columns (u32) besides the u32 key.
    pub payload_columns: usize,
    /// Median device time of the partition's compute pass (timestamps where the
    /// adapter has them, else wall clock around submit + wait), in milliseconds.
    pub ms: f64,
    /// Median wall time of the whole call (allocation and the offsets' readback
    /// included), in milliseconds.
    pub wall_ms: f64,
    /// Input bytes (key plus payload columns) read and the same written once, per
    /// second, in GB/s (10^9 bytes): `2 * input_bytes / ms`.
    pub gb_per_s: f64,
    /// Scratch accounting of the last run.
    pub stats: PartitionStats,
    /// Median device time of plain copies of the same columns (the copy kernel,
    /// every column read once and written once, one timed pass), in
    /// milliseconds; 0 without timestamps.
    pub copy_ms: f64,
    /// The streaming floor of a histogram-scan-scatter partition: the copy
    /// kernel's measured rate applied to the partition's least traffic (every
    /// column read and written once, plus the histogram's read of the key),
    /// `copy_ms * (2 * input + key) / (2 * input)`, in milliseconds.
    pub floor_ms: f64,
    /// With `RIDGELINE_PARTITION_PROFILE=1`: one more run with every dispatch in
    /// its own timed pass, device milliseconds per step (ids, histogram, scan,
    /// rank, moves, ...); empty otherwise.
    pub profile: Vec<(&'static str, f64)>,
}

/// Times the hash partition of `n` rows of one pseudo-random u32 key plus
/// `payload_columns` u32 columns into `fanout` partitions (GPU-resident input, the
/// context's segmentation): one warm-up run, then the median of `reps` (at least 1).
/// `fused` picks the scatter path ([`PartitionOptions::fused`], forced either way).
pub fn bench_partition(ctx: &GpuContext, n: usize, fanout: u32, payload_columns: usize, reps: usize, fused: bool) -> GpuResult<PartitionBench> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let keys: Vec<u32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) as u32
        })
        .collect();
    let mut arrays = vec![DeviceArray::upload(ctx, &keys)?];
    for c in 0..payload_columns {
        let v: Vec<u32> = (0..n as u32).map(|i| i ^ c as u32).collect();
        arrays.push(DeviceArray::upload(ctx, &v)?);
    }
    drop(keys);
    let cols: Vec<Column<'_>> = arrays.iter().map(Column::new).collect();
    let func = PartitionFn::Hash { fanout };
    let opts = PartitionOptions { fused: Some(fused), ..Default::default() };
    let (mut times, mut walls) = (Vec::new(), Vec::new());
    let mut stats = PartitionStats::default();
    crate::timing::warm_up(crate::timing::WARM_UP_MS, || {
        partition_impl(ctx, &cols, &[0], &func, &opts, Timing::None)?;
        ctx.wait()
    })?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        let timer = KernelTimer::new(ctx, 1);
        let t0 = std::time::Instant::now();
        let out = match &timer {
            Some(t) => partition_impl(ctx, &cols, &[0], &func, &opts, Timing::Pass(t))?,
            None => partition_impl(ctx, &cols, &[0], &func, &opts, Timing::None)?,
        };
        ctx.wait()?;
        let wall = t0.elapsed().as_secs_f64() * 1e3;
        let ms = match &timer {
            Some(t) => t.read_ms(ctx)?[0],
            None => wall,
        };
        stats = out.stats;
        times.push(ms);
        walls.push(wall);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    walls.sort_by(|a, b| a.total_cmp(b));
    let ms = times[times.len() / 2];
    let gb_per_s = if ms > 0.0 { 2.0 * stats.input_bytes as f64 / (ms * 1e-3) / 1e9 } else { 0.0 };
    let mut profile = Vec::new();
    if std::env::var("RIDGELINE_PARTITION_PROFILE").is_ok_and(|v| v == "1") {
        partition_impl(ctx, &cols, &[0], &func, &opts, Timing::Each(&mut profile))?;
    }
    // The same bytes through the copy kernel, in the same process and lease.
    let copies: Vec<DeviceArray> = arrays.iter().map(|a| DeviceArray::alloc_segmented(ctx, a.len(), 4, a.seg_rows())).collect::<GpuResult<_>>()?;
    let pairs: Vec<(&DeviceArray, &DeviceArray)> = arrays.iter().zip(copies.iter()).collect();
    let mut copy_times = Vec::new();
    crate::array::copy_arrays_timed(ctx, &pairs, None)?;
    for _ in 0..reps.max(1) {
        ctx.wait()?;
        if let Some(t) = KernelTimer::new(ctx, 1) {
            crate::array::copy_arrays_timed(ctx, &pairs, Some(&t))?;
            copy_times.push(t.read_ms(ctx)?[0]);
        }
    }
    copy_times.sort_by(|a, b| a.total_cmp(b));
    let copy_ms = copy_times.get(copy_times.len() / 2).copied().unwrap_or(0.0);
    let moved = 2.0 * stats.input_bytes as f64;
    let floor_ms = copy_ms * (moved + 4.0 * n as f64) / moved.max(1.0);
    Ok(PartitionBench { n, fanout, payload_columns, ms, wall_ms: walls[walls.len() / 2], gb_per_s, stats, copy_ms, floor_ms, profile })
}
