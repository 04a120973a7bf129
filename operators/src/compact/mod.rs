//! GPU stream compaction: the selected rows of a batch's columns, packed into new
//! device arrays. Two algorithms (shaders/compact/):
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
//!   (shaders/compact/count.wgsl, shaders/compact/stable.wgsl). The columns are
//!   read exactly once and the flags exactly once. [`CompactPath::PerRow`] is the
//!   first implementation (count kernel, reduce-then-scan, a scatter that reads the
//!   selection again and copies one row per invocation; shaders/compact/block.wgsl
//!   with count_blocks.wgsl and per_row.wgsl).
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
//!   validity bit of a row travels together; shaders/compact/jumping_jack.wgsl on
//!   shaders/compact/block.wgsl). Use it where the parent does not need the input
//!   order.
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
//!
//! # Layout
//!
//! This module: selections, columns, options, outputs and the entry points
//! ([`compact`], [`count_selected`]); `plan`: one call's validated shapes, the
//! pipelines and the count pass; `codegen`: the per-column WGSL of the scatter
//! kernels and the split of many columns into launches; `scatter`: the scatter
//! step of [`compact`]; `bench`: [`bench_compact`]. The tuned constants are in
//! `crate::tuning::scan`.
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::tuning::scan as tuned;

mod bench;
mod codegen;
mod plan;
mod scatter;

pub use crate::tuning::scan::{AUTO_JJ_MAX_SELECTIVITY, AUTO_JJ_MIN_SELECTIVITY, LAVAPIPE_JJ_MIN_SELECTIVITY};
pub use bench::{bench_compact, CompactBench, SelectionForm};
use plan::Plan;

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
    /// columns, with coalesced 16-byte loads (shaders/compact/count.wgsl,
    /// shaders/compact/stable.wgsl; Jumping Jack uses its kernel on the bitmap).
    #[default]
    Fast,
    /// The first implementation, one row per invocation: count kernel,
    /// reduce-then-scan of the block counts, scatter kernels that read the
    /// selection (flags or bitmap) again and copy one row per invocation
    /// (shaders/compact/count_blocks.wgsl, per_row.wgsl; Jumping Jack reads the
    /// selection as given). The tests run it beside [`CompactPath::Fast`].
    PerRow,
}

/// Options of [`compact`]; `Default` takes the tuned constants of
/// `crate::tuning::scan`.
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
    /// Fast (default) or per-row kernels.
    pub path: CompactPath,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            algo: CompactAlgo::Stable,
            jj_min_selectivity: AUTO_JJ_MIN_SELECTIVITY,
            jj_max_selectivity: AUTO_JJ_MAX_SELECTIVITY,
            subgroups: true,
            workgroup_size: tuned::COMPACT_WORKGROUP,
            block_rows: tuned::COMPACT_BLOCK_ROWS,
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


/// Compacts `columns` to the rows `sel` selects; callers wanting the defaults for
/// an algorithm pass `&CompactOptions::with_algo(algo)`.
pub fn compact(ctx: &GpuContext, sel: Selection<'_>, columns: &[Column<'_>], opts: &CompactOptions) -> GpuResult<Compacted> {
    scatter::compact_timed(ctx, sel, columns, opts, None)
}

/// The number of rows `sel` selects (the count pass and scan only).
pub fn count_selected(ctx: &GpuContext, sel: Selection<'_>) -> GpuResult<usize> {
    let plan = Plan::new(ctx, &sel, &[], &CompactOptions::default())?;
    let counted = plan.count(ctx, &sel, None)?;
    Ok(counted.count)
}
