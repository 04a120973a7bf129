//! GPU stream compaction: the selected rows of a batch's columns, packed into new
//! device arrays. Two algorithms (shaders/compact.wgsl):
//!
//! * [`CompactAlgo::Stable`]: keeps the input order. With the default
//!   [`CompactPath::Fast`]: a count pass reads the selection once and writes the
//!   number of selected rows of each block of [`CompactOptions::block_rows`] rows
//!   (0/1 flags are also written out as a bitmap, n/8 bytes of scratch; a bitmap
//!   selection costs only the popcount of its n/8 bytes), the single-pass scan
//!   ([`crate::scan`]) turns the counts into each block's first output row, the
//!   count is read back to size the outputs, and one scatter pass per segment
//!   reads each block's bitmap plus its columns with coalesced 16-byte loads
//!   (skipping vectors with no selected row) and writes the selected rows in order
//!   (shaders/compact_count.wgsl, shaders/compact_stable.wgsl). The columns are
//!   read exactly once and the flags exactly once. [`CompactPath::Legacy`] is the
//!   first implementation (count kernel, reduce-then-scan, a scatter that reads the
//!   selection again and copies one row per invocation; shaders/compact.wgsl).
//!   Scratch is one `u32` per block (counts and offsets), the scan's descriptors
//!   and, for flags, the bitmap: about `len / 8` bytes, far below a quarter of the
//!   input.
//! * [`CompactAlgo::JumpingJack`]: the non-monotonic Jumping Jack algorithm of
//!   Moreira, Reis & Sousa (GRAPP 2009), with the paper's block compaction: inside a
//!   block of `s` rows with `v` selected, output slot `i < v` takes row `i` if it is
//!   selected and otherwise jumps `idx = MAS[idx]`, `MAS[idx] = s - pInvalid[idx]`,
//!   until it finds a selected row; the blocks' outputs are concatenated at the
//!   offsets of the same inter-block scan. Writes are contiguous, reads are gathers;
//!   the order inside a block is not kept (the set of rows is, and every column and
//!   validity bit of a row travels together). Use it where the parent does not need
//!   the input order.
//! * [`CompactAlgo::Auto`] runs the count pass, then picks by the measured
//!   selectivity `count / len`: Jumping Jack inside
//!   [`CompactOptions::jj_min_selectivity`] ..= [`CompactOptions::jj_max_selectivity`],
//!   Stable elsewhere. By default that range is empty, so Auto runs Stable: on the
//!   H100 Jumping Jack was slower than Stable at every selectivity (see
//!   [`AUTO_JJ_MIN_SELECTIVITY`]).
//!
//! # Inputs and outputs
//!
//! The selection is 0/1 `u32` flags (any non-zero flag selects) or a bitmap of `u32`
//! words (row `i` is bit `i % 32` of word `i / 32`, like Arrow), see [`Selection`].
//! Columns have 4- or 8-byte elements (moved as raw bits, so NaN payloads and -0.0
//! are preserved) and optional validity bitmaps; everything shares the rows'
//! segmentation `seg_rows` (bitmaps: `seg_rows / 32` words per segment, as
//! `GpuBatch` uploads them). Outputs are new arrays of `count` rows with the **same
//! `seg_rows`** as the input (validity: `seg_rows / 32` words per segment; bits past
//! `count` are zero). All columns of a segment are compacted by one kernel launch
//! when the adapter's `max_storage_buffers_per_shader_stage` allows (each column
//! takes 3 bindings, 6 with validity; more columns are split into groups).
//!
//! The count is read back to the host (it sizes the outputs): one synchronization
//! per call. Row counts above `u32::MAX` are [`GpuError::Invalid`].
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::scan::{
    check_workgroup, elem_u32_part, wg_part, Pass, ScanAlgorithm, ScanKernel, ScanKind, ScanOptions, ScanType,
};
use crate::timing::KernelTimer;
use std::fmt::Write as _;

const COMPACT_WGSL: &str = include_str!("../../shaders/compact.wgsl");
const SEL_FLAGS_WGSL: &str = include_str!("../../shaders/compact_sel_flags.wgsl");
const SEL_BITMAP_WGSL: &str = include_str!("../../shaders/compact_sel_bitmap.wgsl");
const COUNT_WGSL: &str = include_str!("../../shaders/compact_count.wgsl");
const STABLE_WGSL: &str = include_str!("../../shaders/compact_stable.wgsl");

/// Auto's lower selectivity bound for Jumping Jack (fraction of rows selected) in
/// the default options: infinite, so Auto runs Stable unless [`CompactOptions`]
/// asks otherwise.
///
/// History, measured on lavapipe (Mesa's CPU Vulkan, 2 cores shared with other
/// builds, so +-10% noise) with `bench_compact` and the legacy kernels: 2^22 rows of
/// one `u32` column, 0/1 flags, default options, GPU time of the count + scan pass
/// plus the scatter pass, in ms:
///
/// | selectivity | 0.01 | 0.1 | 0.3 | 0.5 | 0.7 | 0.8 | 0.85 | 0.9 | 0.95 | 1.0 |
/// | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
/// | Stable | 249 | 386 | 348 | 381 | 418 | 384 | 396 | 359 | 368 | 354 |
/// | Jumping Jack | 375 | 498 | 464 | 478 | 422 | 394 | 376 | 364 | 344 | 323 |
///
/// There Stable won clearly below 0.7 (a sparse block makes Jumping Jack's slots
/// jump long chains, and its reads are gathers), the two crossed between 0.8 and
/// 0.95, and Jumping Jack won above that, where most slots take their own row;
/// Auto then used 0.9 ([`LAVAPIPE_JJ_MIN_SELECTIVITY`]).
///
/// On the H100 (2^28 rows, BENCHMARKS.md) Stable won at every selectivity: Jumping
/// Jack took roughly 1.4-2x Stable's time (e.g. 6.29 vs 4.33 ms at 50%, 5.35 vs
/// 4.42 ms at 90% with the legacy kernels; equal only at 100%), hence the default.
/// Pass `jj_min_selectivity` (e.g. [`LAVAPIPE_JJ_MIN_SELECTIVITY`]) to use Jumping
/// Jack where the order of the output does not matter and it measured faster.
pub const AUTO_JJ_MIN_SELECTIVITY: f64 = f64::INFINITY;
/// Auto's upper selectivity bound for Jumping Jack (inclusive).
pub const AUTO_JJ_MAX_SELECTIVITY: f64 = 1.0;
/// The crossover measured on lavapipe (see [`AUTO_JJ_MIN_SELECTIVITY`]).
pub const LAVAPIPE_JJ_MIN_SELECTIVITY: f64 = 0.9;

/// The rows to keep.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    /// One `u32` per row, non-zero = selected; same length and `seg_rows` as the
    /// columns.
    Flags(&'a DeviceArray),
    /// A bitmap of `u32` words over `rows` rows (`ceil(rows / 32)` words,
    /// `seg_rows / 32` words per segment).
    Bitmap {
        /// The words.
        bits: &'a DeviceArray,
        /// Rows it covers.
        rows: usize,
    },
}

impl Selection<'_> {
    /// Rows covered.
    pub fn rows(&self) -> usize {
        match self {
            Selection::Flags(f) => f.len(),
            Selection::Bitmap { rows, .. } => *rows,
        }
    }
    /// Rows per segment of the batch this selection belongs to.
    fn seg_rows(&self) -> usize {
        match self {
            Selection::Flags(f) => f.seg_rows(),
            Selection::Bitmap { bits, .. } => bits.seg_rows() * 32,
        }
    }
    fn array(&self) -> &DeviceArray {
        match self {
            Selection::Flags(f) => f,
            Selection::Bitmap { bits, .. } => bits,
        }
    }
    fn is_bitmap(&self) -> bool {
        matches!(self, Selection::Bitmap { .. })
    }
}

/// One input column: values and an optional validity bitmap (bit set = not NULL).
#[derive(Clone, Copy, Debug)]
pub struct Column<'a> {
    /// 4- or 8-byte values.
    pub values: &'a DeviceArray,
    /// Validity bitmap (`ceil(len / 32)` words, `seg_rows / 32` per segment).
    pub validity: Option<&'a DeviceArray>,
}

impl<'a> Column<'a> {
    /// A column without NULLs.
    pub fn new(values: &'a DeviceArray) -> Self {
        Column { values, validity: None }
    }
    /// A column with a validity bitmap.
    pub fn with_validity(values: &'a DeviceArray, validity: &'a DeviceArray) -> Self {
        Column { values, validity: Some(validity) }
    }
}

/// The compaction algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompactAlgo {
    /// Order-preserving (count, scan, scatter).
    Stable,
    /// Jumping Jack with block compaction: keeps the set of rows, not their order.
    JumpingJack,
    /// Jumping Jack in the options' selectivity range, Stable elsewhere (the default
    /// range is empty: Stable). Only ask for Jumping Jack where the order of the
    /// output does not matter.
    Auto,
}

/// How the count and the scatter are done (both keep the algorithm's output).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CompactPath {
    /// The count pass reads the selection once (flags: also writing it as a bitmap,
    /// n/8 bytes of scratch; a bitmap: popcounts only), the block counts are scanned
    /// by the single-pass scan, and the scatter reads only the bitmap and the
    /// columns, with coalesced 16-byte loads (shaders/compact_count.wgsl,
    /// shaders/compact_stable.wgsl; Jumping Jack uses its kernel on the bitmap).
    #[default]
    Fast,
    /// The first implementation: count kernel, reduce-then-scan of the block
    /// counts, scatter kernels that read the selection (flags or bitmap) again and
    /// copy one row per invocation (shaders/compact.wgsl). Kept for comparison.
    Legacy,
}

/// Options of [`compact_with`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactOptions {
    /// The algorithm.
    pub algo: CompactAlgo,
    /// Auto picks Jumping Jack when `jj_min_selectivity <= count / len <=
    /// jj_max_selectivity`.
    pub jj_min_selectivity: f64,
    /// See `jj_min_selectivity`.
    pub jj_max_selectivity: f64,
    /// Use subgroup operations (for the blocks' popcount scan and the count scan)
    /// when the adapter has them.
    pub subgroups: bool,
    /// Invocations per workgroup (a power of two, 32..=1024).
    pub workgroup_size: u32,
    /// Rows per block (one workgroup): a multiple of 128, at most
    /// `32 * workgroup_size`.
    pub block_rows: u32,
    /// Fast (default) or legacy kernels.
    pub path: CompactPath,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            algo: CompactAlgo::Stable,
            jj_min_selectivity: AUTO_JJ_MIN_SELECTIVITY,
            jj_max_selectivity: AUTO_JJ_MAX_SELECTIVITY,
            subgroups: true,
            workgroup_size: 256,
            block_rows: 4096,
            path: CompactPath::Fast,
        }
    }
}

impl CompactOptions {
    /// Default options with the given algorithm.
    pub fn with_algo(algo: CompactAlgo) -> Self {
        CompactOptions { algo, ..Default::default() }
    }
}

/// One compacted column.
#[derive(Debug)]
pub struct CompactedColumn {
    /// The selected values (`count` rows, the input's `seg_rows`).
    pub values: DeviceArray,
    /// Their validity, when the input column had a validity bitmap.
    pub validity: Option<DeviceArray>,
}

/// The result of a compaction.
#[derive(Debug)]
pub struct Compacted {
    /// One entry per input column, in order.
    pub columns: Vec<CompactedColumn>,
    /// Rows selected (the length of every output column).
    pub count: usize,
    /// The algorithm that ran (`Stable` or `JumpingJack`, never `Auto`).
    pub algo: CompactAlgo,
    /// Device bytes of scratch (block counts and offsets, scan levels, the total
    /// and the per-segment probe), pool size classes included; the outputs are not
    /// scratch.
    pub scratch_bytes: u64,
    /// Logical bytes of the input: selection plus columns plus validity bitmaps.
    pub input_bytes: u64,
}

/// Compacts `columns` to the rows `sel` selects, with default options and `algo`.
pub fn compact(ctx: &GpuContext, sel: Selection<'_>, columns: &[Column<'_>], algo: CompactAlgo) -> GpuResult<Compacted> {
    compact_with(ctx, sel, columns, &CompactOptions::with_algo(algo))
}

/// Compacts `columns` to the rows `sel` selects.
pub fn compact_with(
    ctx: &GpuContext,
    sel: Selection<'_>,
    columns: &[Column<'_>],
    opts: &CompactOptions,
) -> GpuResult<Compacted> {
    compact_impl(ctx, sel, columns, opts, None)
}

/// The number of rows `sel` selects (the count pass and scan only).
pub fn count_selected(ctx: &GpuContext, sel: Selection<'_>) -> GpuResult<usize> {
    let plan = Plan::new(ctx, &sel, &[], &CompactOptions::default())?;
    let counted = plan.count(ctx, &sel, None)?;
    Ok(counted.count)
}

/// A compaction benchmark result (see [`bench_compact`]).
#[derive(Clone, Debug)]
pub struct CompactBench {
    /// Rows of the input.
    pub n: usize,
    /// Rows selected.
    pub count: usize,
    /// The algorithm that ran.
    pub algo: CompactAlgo,
    /// Median GPU time (timestamps where available, else wall clock) of the count +
    /// scan pass plus the scatter pass, in milliseconds; excludes the count's
    /// readback.
    pub ms: f64,
    /// Median wall-clock time of the whole call (readback of the count and output
    /// allocation included), in milliseconds.
    pub wall_ms: f64,
    /// Scratch bytes used.
    pub scratch_bytes: u64,
    /// Input bytes (flags plus the column).
    pub input_bytes: u64,
    /// Median GPU time of the count pass (count kernel plus the scan of the block
    /// counts), in milliseconds (part of `ms`).
    pub count_ms: f64,
    /// Median GPU time of the scatter pass, in milliseconds (part of `ms`).
    pub scatter_ms: f64,
    /// The kernels that ran.
    pub path: CompactPath,
}

/// Times the compaction of one `u32` column of `n` rows by 0/1 flags selecting a
/// pseudo-random `selectivity` fraction of the rows (the context's segmentation):
/// one warm-up run, then the median of `reps` (at least 1).
pub fn bench_compact(ctx: &GpuContext, n: usize, selectivity: f64, algo: CompactAlgo, reps: usize) -> GpuResult<CompactBench> {
    bench_compact_with(ctx, n, selectivity, &CompactOptions::with_algo(algo), reps)
}

/// [`bench_compact`] with explicit options.
pub fn bench_compact_with(
    ctx: &GpuContext,
    n: usize,
    selectivity: f64,
    opts: &CompactOptions,
    reps: usize,
) -> GpuResult<CompactBench> {
    bench_compact_sel(ctx, n, selectivity, opts, reps, false)
}

/// [`bench_compact_with`] with the selection as 0/1 `u32` flags (`bitmap = false`)
/// or as a bitmap (`bitmap = true`: what Ridgeline's filter kernels produce).
pub fn bench_compact_sel(
    ctx: &GpuContext,
    n: usize,
    selectivity: f64,
    opts: &CompactOptions,
    reps: usize,
    bitmap: bool,
) -> GpuResult<CompactBench> {
    let threshold = (selectivity.clamp(0.0, 1.0) * 4294967296.0).min(4294967295.0) as u64;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let flags: Vec<u32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 32) < threshold) as u32
        })
        .collect();
    let values: Vec<u32> = (0..n as u32).collect();
    let f = if bitmap {
        let mut words = vec![0u32; n.div_ceil(32)];
        for (i, &x) in flags.iter().enumerate() {
            words[i / 32] |= x << (i % 32);
        }
        DeviceArray::upload_segmented(ctx, &words, ctx.segment_rows() / 32)?
    } else {
        DeviceArray::upload(ctx, &flags)?
    };
    let v = DeviceArray::upload(ctx, &values)?;
    drop((flags, values));
    let cols = [Column::new(&v)];
    let mut gpu = Vec::new();
    let mut wall = Vec::new();
    let mut parts = Vec::new();
    let mut last = None;
    for rep in 0..=reps.max(1) {
        let timer = KernelTimer::new(ctx, 2);
        let t0 = std::time::Instant::now();
        let sel = if bitmap { Selection::Bitmap { bits: &f, rows: n } } else { Selection::Flags(&f) };
        let out = compact_impl(ctx, sel, &cols, opts, timer.as_ref())?;
        ctx.wait()?;
        let w = t0.elapsed().as_secs_f64() * 1e3;
        let (g, p) = match &timer {
            Some(t) => {
                let v = t.read_ms(ctx)?;
                (v.iter().sum(), (v[0], v[1]))
            }
            None => (w, (f64::NAN, f64::NAN)),
        };
        if rep > 0 {
            gpu.push(g);
            wall.push(w);
            parts.push(p);
        }
        last = Some(out);
    }
    let out = last.expect("at least one run");
    gpu.sort_by(|a, b| a.total_cmp(b));
    wall.sort_by(|a, b| a.total_cmp(b));
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let count_ms = median(parts.iter().map(|p| p.0).collect());
    let scatter_ms = median(parts.iter().map(|p| p.1).collect());
    Ok(CompactBench {
        count_ms,
        scatter_ms,
        path: opts.path,
        n,
        count: out.count,
        algo: out.algo,
        ms: gpu[gpu.len() / 2],
        wall_ms: wall[wall.len() / 2],
        scratch_bytes: out.scratch_bytes,
        input_bytes: out.input_bytes,
    })
}

// ---------------------------------------------------------------------------------
// Implementation
// ---------------------------------------------------------------------------------

/// shaders/compact.wgsl `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    blocks: u32,
    block_base: u32,
    out_first: u32,
    out_rows: u32,
    out_first_word: u32,
    out_words: u32,
    pad: u32,
}

/// Validated shapes of one call.
struct Plan {
    n: usize,
    seg_rows: usize,
    /// Rows of each input segment.
    seg_len: Vec<usize>,
    /// Blocks of each input segment and the index of its first block.
    seg_blocks: Vec<(u64, u64)>,
    blocks: u64,
    subgroups: bool,
    wg: u32,
    block: u32,
    /// CompactPath::Fast.
    fast: bool,
}

/// Output of the count step.
struct Counted {
    /// Exclusive block offsets (kept for the scatter).
    offs: crate::pool::GpuBuffer,
    /// First output row of each input segment, then the total.
    seg_first: Vec<u64>,
    count: usize,
    scratch_bytes: u64,
    /// Fast path with flags: the selection as a bitmap, one buffer per segment
    /// (`ceil(rows / 32)` words, the Arrow layout).
    bits: Vec<crate::pool::GpuBuffer>,
}

impl Plan {
    fn new(ctx: &GpuContext, sel: &Selection<'_>, columns: &[Column<'_>], opts: &CompactOptions) -> GpuResult<Plan> {
        let n = sel.rows();
        let seg_rows = sel.seg_rows();
        let s = sel.array();
        if s.elem_size() != 4 {
            return Err(GpuError::Invalid(format!("selection of {}-byte elements (expected u32)", s.elem_size())));
        }
        if let Selection::Bitmap { bits, rows } = sel {
            if bits.len() != rows.div_ceil(32) {
                return Err(GpuError::Invalid(format!("bitmap of {} words for {rows} rows", bits.len())));
            }
        }
        if n as u64 > u32::MAX as u64 {
            return Err(GpuError::Invalid(format!("compaction of {n} rows (at most 2^32 - 1)")));
        }
        for (i, c) in columns.iter().enumerate() {
            let v = c.values;
            if v.len() != n || v.seg_rows() != seg_rows {
                return Err(GpuError::Invalid(format!(
                    "column {i}: {} rows in segments of {} where the selection has {n} rows in segments of {seg_rows}",
                    v.len(),
                    v.seg_rows()
                )));
            }
            if let Some(b) = c.validity {
                if b.elem_size() != 4 || b.len() != n.div_ceil(32) || b.seg_rows() * 32 != seg_rows {
                    return Err(GpuError::Invalid(format!(
                        "column {i}: validity of {} x {} bytes in segments of {} (expected {} words in segments of {})",
                        b.len(),
                        b.elem_size(),
                        b.seg_rows(),
                        n.div_ceil(32),
                        seg_rows / 32
                    )));
                }
            }
        }
        let (wg, block) = (opts.workgroup_size, opts.block_rows);
        if block == 0 || !block.is_multiple_of(128) || block as u64 > 32 * wg as u64 {
            return Err(GpuError::Invalid(format!(
                "blocks of {block} rows (expected a multiple of 128, at most 32 x the workgroup size {wg})"
            )));
        }
        let fast = opts.path == CompactPath::Fast;
        let per_block = if fast { (block as u64).max(3 * (block as u64 / 32) * 4) } else { 3 * (block as u64 / 32) * 4 };
        let shared = 2 * wg as u64 * 4 + per_block + 64;
        let subgroups = check_workgroup(ctx, opts.subgroups, wg, shared)?;
        let mut seg_len = Vec::new();
        let mut seg_blocks = Vec::new();
        let mut blocks = 0u64;
        for i in 0..s.num_segments() {
            let rows = (n - i * seg_rows).min(seg_rows);
            let b = (rows as u64).div_ceil(block as u64);
            seg_len.push(rows);
            seg_blocks.push((b, blocks));
            blocks += b;
        }
        Ok(Plan { n, seg_rows, seg_len, seg_blocks, blocks, subgroups, wg, block, fast })
    }

    fn sel_part(&self, bitmap: bool) -> (&'static str, &'static str) {
        if bitmap {
            ("bitmap", SEL_BITMAP_WGSL)
        } else {
            ("flags", SEL_FLAGS_WGSL)
        }
    }

    /// The legacy compaction module (compact.wgsl) for a column layout (`None`: the
    /// count kernel only), reading the selection as a bitmap or as flags.
    fn pipeline(
        &self,
        ctx: &GpuContext,
        bitmap: bool,
        layout: Option<&[ColumnLayout]>,
        entry: &str,
    ) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        let (sname, spart) = self.sel_part(bitmap);
        let cols = layout.unwrap_or(&[]);
        let gen = generate_columns(cols, self.block);
        let name = format!(
            "compact-{sname}-{}-{}",
            if self.subgroups { "subgroup" } else { "shared" },
            gen.key
        );
        let src = format!("{}\n{}\n{spart}\n{COMPACT_WGSL}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [
            ("WG", self.wg.to_string()),
            ("BLOCK", self.block.to_string()),
            ("VB_WORDS", gen.vb_words.to_string()),
            ("COLUMN_DECLS", gen.decls),
            ("COPY_COLUMNS", gen.copy),
            ("FLUSH_COLUMNS", gen.flush),
        ];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// The fast path's count kernels (compact_count.wgsl).
    fn count_pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        let name = format!("compact-count-{}", if self.subgroups { "subgroup" } else { "shared" });
        let src = format!("{}\n{}\n{COUNT_WGSL}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [("WG", self.wg.to_string()), ("BLOCK", self.block.to_string())];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// The fast path's stable scatter (compact_stable.wgsl) for a column layout.
    fn stable_pipeline(&self, ctx: &GpuContext, layout: &[ColumnLayout]) -> GpuResult<std::sync::Arc<wgpu::ComputePipeline>> {
        let gen = generate_fast(layout, self.block);
        let name = format!("compact-stable-{}-{}", if self.subgroups { "subgroup" } else { "shared" }, gen.key);
        let src = format!("{}\n{}\n{STABLE_WGSL}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [
            ("WG", self.wg.to_string()),
            ("BLOCK", self.block.to_string()),
            ("VB_WORDS", gen.vb_words.to_string()),
            ("COLUMN_DECLS", gen.decls),
            ("COPY_COLUMNS", gen.copy),
            ("FLUSH_COLUMNS", gen.flush),
        ];
        ctx.pipeline(&name, &src, "scatter", &defs)
    }

    fn params(&self, seg: usize, out_first: u64) -> Params {
        let (blocks, base) = self.seg_blocks[seg];
        Params {
            n: self.seg_len[seg] as u32,
            blocks: blocks as u32,
            block_base: base as u32,
            out_first: out_first as u32,
            out_rows: self.seg_rows as u32,
            out_first_word: (out_first / 32) as u32,
            out_words: (self.seg_rows / 32) as u32,
            pad: 0,
        }
    }

    /// Count pass + scan of the block counts, then the readback of the per-segment
    /// output offsets and the count. Fast path: compact_count.wgsl (flags are also
    /// written as a bitmap) and the single-pass scan; legacy: compact.wgsl's
    /// `count_blocks` and reduce-then-scan.
    fn count(&self, ctx: &GpuContext, sel: &Selection<'_>, timer: Option<&KernelTimer>) -> GpuResult<Counted> {
        let nseg = self.seg_len.len();
        if self.n == 0 {
            if let Some(t) = timer {
                // Keep the timer's pass 0 written, as for a non-empty input.
                let mut enc = ctx.encoder("compact-count");
                Pass::default().encode(&mut enc, t.writes(0));
                ctx.submit(enc)?;
            }
            let offs = ctx.pool().alloc(4)?;
            let scratch_bytes = offs.size();
            return Ok(Counted { offs, seg_first: vec![0], count: 0, scratch_bytes, bits: Vec::new() });
        }
        let counts = ctx.pool().alloc(self.blocks * 4)?;
        let offs = ctx.pool().alloc(self.blocks * 4)?;
        let total = ctx.pool().alloc(4)?;
        let probe = DeviceArray::alloc_segmented(ctx, nseg + 1, 4, (nseg + 1).div_ceil(4) * 4)?;
        let mut pass = Pass::default();
        let mut bits = Vec::new();
        if self.fast {
            let bitmap = sel.is_bitmap();
            let pipe = self.count_pipeline(ctx, if bitmap { "count_bitmap" } else { "count_flags" })?;
            for seg in 0..nseg {
                let ub = ctx.uniform(&self.params(seg, 0));
                let sbuf = sel.array().segment(seg).0;
                if bitmap {
                    pass.dispatch(
                        ctx,
                        &pipe,
                        &[
                            wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 5, resource: sbuf.as_entire_binding() },
                        ],
                        self.seg_blocks[seg].0,
                    )?;
                } else {
                    let b = ctx.pool().alloc((self.seg_len[seg].div_ceil(32) * 4) as u64)?;
                    pass.dispatch(
                        ctx,
                        &pipe,
                        &[
                            wgpu::BindGroupEntry { binding: 0, resource: sbuf.as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 2, resource: b.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                        ],
                        self.seg_blocks[seg].0,
                    )?;
                    bits.push(b);
                }
            }
        } else {
            let count_pipe = self.pipeline(ctx, sel.is_bitmap(), None, "count_blocks")?;
            for seg in 0..nseg {
                let ub = ctx.uniform(&self.params(seg, 0));
                pass.dispatch(
                    ctx,
                    &count_pipe,
                    &[
                        wgpu::BindGroupEntry { binding: 0, resource: sel.array().segment(seg).0.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                    ],
                    self.seg_blocks[seg].0,
                )?;
            }
        }
        let algorithm = if self.fast { ScanAlgorithm::SinglePass } else { ScanAlgorithm::ReduceThenScan };
        let sk = ScanKernel::new(
            ctx,
            ScanType::U32,
            &ScanOptions { subgroups: self.subgroups, workgroup_size: self.wg, algorithm, ..Default::default() },
        )?;
        sk.record(ctx, &mut pass, &[(counts.raw(), offs.raw(), self.blocks)], ScanKind::Exclusive, total.raw())?;
        let mut enc = ctx.encoder("compact-count");
        pass.encode(&mut enc, timer.and_then(|t| t.writes(0)));
        let pb = probe.segment(0).0;
        for (seg, &(_, base)) in self.seg_blocks.iter().enumerate() {
            enc.copy_buffer_to_buffer(offs.raw(), base * 4, pb, seg as u64 * 4, 4);
        }
        enc.copy_buffer_to_buffer(total.raw(), 0, pb, nseg as u64 * 4, 4);
        ctx.submit(enc)?;
        let seg_first: Vec<u64> = probe.download::<u32>(ctx)?.into_iter().map(u64::from).collect();
        let count = seg_first[nseg] as usize;
        let scratch_bytes = counts.size()
            + offs.size()
            + total.size()
            + probe.device_bytes()
            + pass.keep.iter().map(|b| b.size()).sum::<u64>()
            + bits.iter().map(|b| b.size()).sum::<u64>();
        Ok(Counted { offs, seg_first, count, scratch_bytes, bits })
    }
}

/// A column's shape in the generated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ColumnLayout {
    wide: bool,
    validity: bool,
}

impl ColumnLayout {
    /// One letter of a pipeline's cache key.
    fn key(&self) -> char {
        match (self.wide, self.validity) {
            (false, false) => 'a',
            (false, true) => 'b',
            (true, false) => 'c',
            (true, true) => 'd',
        }
    }
    fn bindings(&self) -> u32 {
        if self.validity {
            6
        } else {
            3
        }
    }
}

/// Generated WGSL for a column layout.
struct Generated {
    key: String,
    decls: String,
    copy: String,
    flush: String,
    vb_words: u32,
}

/// First binding of the column bindings (0: selection, 1: counts, 2: block
/// offsets, 3: params).
const FIRST_COLUMN_BINDING: u32 = 4;

/// Three bindings from `b`: the input array `input` (read) and the two output
/// segments `lo` and `hi` (read-write).
fn column_decls(decls: &mut String, b: u32, input: &str, in_ty: &str, lo: &str, hi: &str, out_ty: &str) {
    let _ = writeln!(
        decls,
        "@group(0) @binding({b}) var<storage, read> {input}: array<{in_ty}>;\n\
         @group(0) @binding({}) var<storage, read_write> {lo}: array<{out_ty}>;\n\
         @group(0) @binding({}) var<storage, read_write> {hi}: array<{out_ty}>;",
        b + 1,
        b + 2
    );
}

/// WGSL for the columns of one launch: per column, bindings `in`, `lo`, `hi` (the
/// values of the input segment and of the two output segments) and, with validity,
/// `vin`, `vlo`, `vhi`; the per-row copy and the per-word validity flush.
fn generate_columns(cols: &[ColumnLayout], block: u32) -> Generated {
    let mut g = Generated { key: String::new(), decls: String::new(), copy: String::new(), flush: String::new(), vb_words: 1 };
    let mut b = FIRST_COLUMN_BINDING;
    let mut k = 0u32;
    for (c, col) in cols.iter().enumerate() {
        let ty = if col.wide { "vec2<u32>" } else { "u32" };
        g.key.push(col.key());
        column_decls(&mut g.decls, b, &format!("in{c}"), ty, &format!("lo{c}"), &format!("hi{c}"), ty);
        let _ = writeln!(
            g.copy,
            "    {{ let v = in{c}[row]; if (in_lo) {{ lo{c}[idx] = v; }} else {{ hi{c}[idx] = v; }} }}"
        );
        b += 3;
        if col.validity {
            column_decls(&mut g.decls, b, &format!("vin{c}"), "u32", &format!("vlo{c}"), &format!("vhi{c}"), "atomic<u32>");
            let _ = writeln!(
                g.copy,
                "    if (((vin{c}[row / 32u] >> (row % 32u)) & 1u) != 0u) {{ atomicOr(&vb[{k}u * VBW + q / 32u], 1u << (q % 32u)); }}"
            );
            let _ = writeln!(
                g.flush,
                "        {{ let bits = atomicLoad(&vb[{k}u * VBW + w]); if (bits != 0u) {{ if (in_lo) {{ atomicOr(&vlo{c}[widx], bits); }} else {{ atomicOr(&vhi{c}[widx], bits); }} }} }}"
            );
            b += 3;
            k += 1;
        }
    }
    g.vb_words = (k * (block / 32 + 1)).max(1);
    g
}

/// WGSL for the columns of one launch of the fast stable scatter
/// (compact_stable.wgsl): per column, bindings `in` (read as 16-byte vectors), `lo`,
/// `hi` and, with validity, `vin`, `vlo`, `vhi`; the loads of one 4-row vector `v`
/// with selection nibble `nib`, the stores of its selected rows (rank `q` in the
/// block, output row `boff + q`), and the per-word validity flush.
fn generate_fast(cols: &[ColumnLayout], block: u32) -> Generated {
    let mut g = Generated { key: String::new(), decls: String::new(), copy: String::new(), flush: String::new(), vb_words: 1 };
    let mut loads = String::new();
    let mut lanes: [String; 4] = Default::default();
    let mut b = FIRST_COLUMN_BINDING;
    let mut k = 0u32;
    for (c, col) in cols.iter().enumerate() {
        let oty = if col.wide { "vec2<u32>" } else { "u32" };
        g.key.push(col.key());
        column_decls(&mut g.decls, b, &format!("in{c}"), "vec4<u32>", &format!("lo{c}"), &format!("hi{c}"), oty);
        b += 3;
        let exprs: [String; 4] = if col.wide {
            let _ = writeln!(
                loads,
                "        var a{c} = vec4<u32>();\n        var b{c} = vec4<u32>();\n        \
                 if ((nib & 3u) != 0u) {{ a{c} = in{c}[2u * v]; }}\n        \
                 if ((nib & 12u) != 0u) {{ b{c} = in{c}[2u * v + 1u]; }}"
            );
            [format!("a{c}.xy"), format!("a{c}.zw"), format!("b{c}.xy"), format!("b{c}.zw")]
        } else {
            let _ = writeln!(loads, "        let x{c} = in{c}[v];");
            [format!("x{c}.x"), format!("x{c}.y"), format!("x{c}.z"), format!("x{c}.w")]
        };
        for (lane, e) in exprs.iter().enumerate() {
            let _ = writeln!(lanes[lane], "            if (in_lo) {{ lo{c}[idx] = {e}; }} else {{ hi{c}[idx] = {e}; }}");
        }
        if col.validity {
            column_decls(&mut g.decls, b, &format!("vin{c}"), "u32", &format!("vlo{c}"), &format!("vhi{c}"), "atomic<u32>");
            let _ = writeln!(loads, "        let vn{c} = vin{c}[v / 8u] >> ((v % 8u) * 4u);");
            for (lane, l) in lanes.iter_mut().enumerate() {
                let _ = writeln!(
                    l,
                    "            if (((vn{c} >> {lane}u) & 1u) != 0u) {{ let qq = bq + q; atomicOr(&vb[{k}u * VBW + qq / 32u], 1u << (qq % 32u)); }}"
                );
            }
            let _ = writeln!(
                g.flush,
                "        {{ let bits = atomicLoad(&vb[{k}u * VBW + w]);\n          \
                 if (shared_word) {{ if (bits != 0u) {{ if (in_lo) {{ atomicOr(&vlo{c}[widx], bits); }} else {{ atomicOr(&vhi{c}[widx], bits); }} }} }}\n          \
                 else if (in_lo) {{ atomicStore(&vlo{c}[widx], bits); }} else {{ atomicStore(&vhi{c}[widx], bits); }} }}"
            );
            b += 3;
            k += 1;
        }
    }
    g.copy = loads;
    for (lane, l) in lanes.iter().enumerate() {
        let _ = write!(
            g.copy,
            "        if ((nib & {}u) != 0u) {{\n            let local = boff + q - p.out_first;\n            \
             let in_lo = local < p.out_rows;\n            let idx = select(local - p.out_rows, local, in_lo);\n{l}            q += 1u;\n        }}\n",
            1u32 << lane
        );
    }
    g.vb_words = (k * (block / 32 + 1)).max(1);
    g
}

/// Splits the columns into launches that fit the adapter's storage-binding and
/// workgroup-memory limits.
fn group_columns(ctx: &GpuContext, layout: &[ColumnLayout], block: u32, wg: u32) -> GpuResult<Vec<std::ops::Range<usize>>> {
    let max_bind = ctx.limits().max_storage_buffers_per_shader_stage;
    let max_shared = ctx.limits().max_compute_workgroup_storage_size as u64;
    let base_shared = 2 * wg as u64 * 4 + 3 * (block as u64 / 32) * 4 + 64;
    let per_validity = (block as u64 / 32 + 1) * 4;
    let mut groups = Vec::new();
    let mut start = 0;
    let (mut binds, mut shared) = (2u32, base_shared);
    for (i, c) in layout.iter().enumerate() {
        let nb = c.bindings();
        let ns = if c.validity { per_validity } else { 0 };
        if 2 + nb > max_bind || base_shared + ns > max_shared {
            return Err(GpuError::Invalid(format!(
                "a column needs {} storage bindings (the adapter allows {max_bind} per stage)",
                2 + nb
            )));
        }
        if binds + nb > max_bind || shared + ns > max_shared {
            groups.push(start..i);
            start = i;
            binds = 2;
            shared = base_shared;
        }
        binds += nb;
        shared += ns;
    }
    if start < layout.len() {
        groups.push(start..layout.len());
    }
    Ok(groups)
}

fn compact_impl(
    ctx: &GpuContext,
    sel: Selection<'_>,
    columns: &[Column<'_>],
    opts: &CompactOptions,
    timer: Option<&KernelTimer>,
) -> GpuResult<Compacted> {
    let plan = Plan::new(ctx, &sel, columns, opts)?;
    let input_bytes = (sel.array().len() * 4) as u64
        + columns
            .iter()
            .map(|c| (c.values.len() * c.values.elem_size() + c.validity.map_or(0, |v| v.len() * 4)) as u64)
            .sum::<u64>();
    let counted = plan.count(ctx, &sel, timer)?;
    let count = counted.count;
    let algo = match opts.algo {
        CompactAlgo::Auto => {
            let s = if plan.n == 0 { 0.0 } else { count as f64 / plan.n as f64 };
            if s >= opts.jj_min_selectivity && s <= opts.jj_max_selectivity {
                CompactAlgo::JumpingJack
            } else {
                CompactAlgo::Stable
            }
        }
        a => a,
    };
    let s = plan.seg_rows;
    let mut outputs = Vec::with_capacity(columns.len());
    for c in columns {
        let values = DeviceArray::alloc_segmented(ctx, count, c.values.elem_size(), s)?;
        let validity = match c.validity {
            Some(_) => Some(DeviceArray::alloc_segmented(ctx, count.div_ceil(32), 4, s / 32)?),
            None => None,
        };
        outputs.push(CompactedColumn { values, validity });
    }
    let mut enc = ctx.encoder("compact-scatter");
    let mut pass = Pass::default();
    if count > 0 && !columns.is_empty() {
        for o in &outputs {
            if let Some(v) = &o.validity {
                for i in 0..v.num_segments() {
                    enc.clear_buffer(v.segment(i).0, 0, None);
                }
            }
        }
        let layout: Vec<ColumnLayout> = columns
            .iter()
            .map(|c| ColumnLayout { wide: c.values.elem_size() == 8, validity: c.validity.is_some() })
            .collect();
        let fast_stable = plan.fast && algo == CompactAlgo::Stable;
        // The fast path's scatter reads the selection as a bitmap: the selection's
        // own, or the one the count pass built from the flags.
        let bitmap = plan.fast || sel.is_bitmap();
        let sel_buf = |seg: usize| -> &wgpu::Buffer {
            if plan.fast && !sel.is_bitmap() {
                counted.bits[seg].raw()
            } else {
                sel.array().segment(seg).0
            }
        };
        let entry = if algo == CompactAlgo::JumpingJack { "scatter_jj" } else { "scatter_stable" };
        let groups = group_columns(ctx, &layout, plan.block, plan.wg)?;
        let pipes = groups
            .iter()
            .map(|g| {
                if fast_stable {
                    plan.stable_pipeline(ctx, &layout[g.clone()])
                } else {
                    plan.pipeline(ctx, bitmap, Some(&layout[g.clone()]), entry)
                }
            })
            .collect::<GpuResult<Vec<_>>>()?;
        for seg in 0..plan.seg_len.len() {
            let (first, end) = (counted.seg_first[seg], counted.seg_first[seg + 1]);
            if end == first {
                continue; // nothing selected in this segment
            }
            let lo = (first / s as u64) as usize;
            let hi = if (end - 1) / s as u64 > lo as u64 { lo + 1 } else { lo };
            let ub = ctx.uniform(&plan.params(seg, lo as u64 * s as u64));
            for (g, pipe) in groups.iter().zip(&pipes) {
                let mut entries = vec![
                    wgpu::BindGroupEntry { binding: 0, resource: sel_buf(seg).as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: counted.offs.raw().as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                ];
                let mut b = FIRST_COLUMN_BINDING;
                for ci in g.clone() {
                    let (col, out) = (&columns[ci], &outputs[ci]);
                    let trio = [col.values.segment(seg).0, out.values.segment(lo).0, out.values.segment(hi).0];
                    for buf in trio {
                        entries.push(wgpu::BindGroupEntry { binding: b, resource: buf.as_entire_binding() });
                        b += 1;
                    }
                    if let (Some(vin), Some(vout)) = (col.validity, &out.validity) {
                        let trio = [vin.segment(seg).0, vout.segment(lo).0, vout.segment(hi).0];
                        for buf in trio {
                            entries.push(wgpu::BindGroupEntry { binding: b, resource: buf.as_entire_binding() });
                            b += 1;
                        }
                    }
                }
                pass.dispatch(ctx, pipe, &entries, plan.seg_blocks[seg].0)?;
            }
        }
    }
    pass.encode(&mut enc, timer.and_then(|t| t.writes(1)));
    if let Some(t) = timer {
        t.resolve(&mut enc);
    }
    ctx.submit(enc)?;
    drop(pass);
    Ok(Compacted {
        columns: outputs,
        count,
        algo,
        scratch_bytes: counted.scratch_bytes,
        input_bytes,
    })
}
