//! Options, outputs and scratch accounting of the GPU partition.
use crate::array::DeviceArray;
use crate::compact::CompactedColumn;
use crate::tuning::{self, partition as tuned};

/// Tuning of [`crate::partition::partition_gpu`]; `Default` takes the tuned
/// constants of `crate::tuning::partition` and their switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOptions {
    /// Invocations per workgroup: 32, 64, 128 or 256.
    pub workgroup_size: u32,
    /// Rows per tile (one histogram column), a multiple of `workgroup_size`.
    pub tile_rows: u32,
    /// On adapters with subgroups of 4 to 32 lanes: rank and scatter in one
    /// kernel per digit pass that sorts each round of a tile by digit in
    /// workgroup memory and writes every partition's rows of it as one run
    /// (shaders/partition/scatter.wgsl). `Some(false)` keeps the rank kernel and
    /// the per-column moves (and, for several passes, the composed permutation).
    /// `None` fuses except on CPU adapters: on lavapipe the fused kernel measured
    /// 1.7-1.9x slower than the rank kernel and moves (`cargo bench --bench
    /// partition`, 2^22 rows), on the H100 1.05-2.6x faster. Default: `None`, or
    /// RIDGELINE_PARTITION_FUSED.
    pub fused: Option<bool>,
    /// Invocations per workgroup of the fused kernel (a power of two, 32..=256);
    /// `None`: [`tuned::FUSED_SUBGROUPS`] subgroups of the smallest size. Default:
    /// RIDGELINE_PARTITION_SWG.
    pub fused_workgroup: Option<u32>,
    /// Rows per invocation and round of the fused kernel (1..=16, capped by the
    /// workgroup memory); `None`: by digit width ([`tuned::FUSED_ITEMS_NARROW`],
    /// [`tuned::FUSED_ITEMS_WIDE`]). Default: RIDGELINE_PARTITION_ITEMS.
    pub fused_items: Option<u32>,
    /// When the fused kernel loads the columns' values; `None`: by digit width.
    /// Default: RIDGELINE_PARTITION_PRELOAD.
    pub fused_preload: Option<FusedPreload>,
    /// Keep the `fanout + 1` offsets on the device ([`Partitioned::device_offsets`])
    /// instead of reading them back: for callers whose next kernels read them
    /// (the hash join's build side), which saves the one synchronisation.
    pub device_offsets: bool,
}

impl Default for PartitionOptions {
    /// [`tuned::WORKGROUP_SIZE`] invocations, [`tuned::TILE_ROWS`]-row tiles
    /// (histogram scratch 1/16 of a u32 column per 256 digits, see the module
    /// documentation), the fused kernel's shape by digit width; the switches of
    /// `crate::tuning::partition` override.
    fn default() -> Self {
        PartitionOptions {
            workgroup_size: tuned::WORKGROUP_SIZE,
            tile_rows: tuned::TILE_ROWS,
            fused: tuning::flag("RIDGELINE_PARTITION_FUSED"),
            fused_workgroup: tuning::parse("RIDGELINE_PARTITION_SWG"),
            fused_items: tuning::parse("RIDGELINE_PARTITION_ITEMS"),
            fused_preload: tuning::parse("RIDGELINE_PARTITION_PRELOAD"),
            device_offsets: false,
        }
    }
}

/// How the fused kernel reads a column's values (and validity bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FusedPreload {
    /// Read where they are staged, after the ranking: one more load latency
    /// per column and round.
    Late,
    /// Read into registers at the start of the round, beside the keys.
    Round,
    /// Read the next round's values right after staging this round's, so the
    /// load overlaps the writes and the next round's ranking.
    Ahead,
}

impl std::str::FromStr for FusedPreload {
    type Err = String;
    /// `late`, `round` or `ahead`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "late" => Ok(FusedPreload::Late),
            "round" => Ok(FusedPreload::Round),
            "ahead" => Ok(FusedPreload::Ahead),
            _ => Err(format!("{s} (expected late, round or ahead)")),
        }
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
    /// `fanout + 1` offsets: partition `b` is rows `offsets[b] .. offsets[b + 1]`
    /// (empty with [`PartitionOptions::device_offsets`]).
    pub offsets: Vec<u64>,
    /// With [`PartitionOptions::device_offsets`], the same offsets as `u32` on the
    /// device (one segment), the work submitted but not waited for.
    pub device_offsets: Option<DeviceArray>,
    /// The columns in input order, partitioned (the input's `seg_rows`; validity
    /// bitmaps `seg_rows / 32` words per segment, bits past the length zero).
    pub columns: Vec<CompactedColumn>,
    /// Scratch accounting.
    pub stats: PartitionStats,
}
