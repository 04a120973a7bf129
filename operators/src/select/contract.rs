//! The contract of a selection: keys, options and what a call did.
//!
//! The options' defaults are the tuned constants of [`crate::tuning::select`].
use crate::scan::Int64Path;

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
    /// read most keys anyway). Default 4 ([`tuning::select::ORACLE_MAX_RANKS`](crate::tuning::select::ORACLE_MAX_RANKS));
    /// `usize::MAX` always uses it.
    pub oracle_max_ranks: usize,
    /// Inputs of at least this many keys (and at least 8 samples' worth) start with
    /// the bracketing level (see "Bracketing" in the module documentation) when their
    /// distinct ranks make at most 4 windows; `usize::MAX` never brackets. Default
    /// [`tuning::select::BRACKET_MIN`](crate::tuning::select::BRACKET_MIN), 2^25.
    pub bracket_min: usize,
    /// Half-width of a bracketing window in standard deviations of the sample rank
    /// (default 3; tests make it small so that windows miss and overflow).
    pub bracket_sigmas: f64,
    /// Selections of one narrow rank range (at most [`CHAIN_MAX_SPAN`](crate::tuning::select::CHAIN_MAX_SPAN) ranks apart:
    /// a median, a top-k of 32-bit keys) over at least this many keys run as a
    /// *chain*: bracketing levels decided on the device, in one submission (see
    /// "Chain" in the module documentation); `usize::MAX`: never. Default
    /// [`tuning::select::CHAIN_MIN`](crate::tuning::select::CHAIN_MIN), 2^20.
    pub chain_min: usize,
    /// Approximate selections over at least this many keys (and more than four
    /// samples' worth) first try one histogram pass over windows of the sorted
    /// sample (`approx_hist`, shaders/select/approx.wgsl); `usize::MAX`: never.
    /// Default [`tuning::select::APPROX_HIST_MIN`](crate::tuning::select::APPROX_HIST_MIN), 2^20.
    pub approx_hist_min: usize,
    /// The one histogram pass stages the keys inside its windows per subgroup and
    /// searches them a subgroup at a time (`ap_hist_sg`) where the adapter has
    /// subgroup operations and barriers (default); `false`: each key is searched
    /// where it is read (`ap_hist`, also the kernel without subgroups).
    pub approx_hist_subgroups: bool,
    /// Keys per invocation and chunk of the one histogram pass (at most 32). Default
    /// and 0: [`APPROX_ITEMS`](crate::tuning::select::APPROX_ITEMS), or the switch `RIDGELINE_APPROX_ITEMS`.
    pub approx_hist_items: u32,
    /// 32-bit keys: the one pass first cuts each window into cells of key space
    /// (`ap_hist_kc`: no staging, no search) and answers by the sample key whose
    /// cell's rank range is nearest; where the cells are too coarse (keys
    /// clustered within a cell) the splitter kernels answer instead.
    pub approx_key_cells: bool,
    /// Half-width of the key-cell pass's windows in standard deviations of the
    /// sample rank (default [`APPROX_CELL_SIGMAS`](crate::tuning::select::APPROX_CELL_SIGMAS); wider windows cost it almost
    /// nothing, so it misses a rank far more rarely than the splitter kernels).
    pub approx_cell_sigmas: f64,
    /// Most workgroups of the one histogram pass (each loops over chunks; at most
    /// 65535). Default and 0: [`tuning::select::APPROX_GROUPS`](crate::tuning::select::APPROX_GROUPS),
    /// 8192, or the switch `RIDGELINE_APPROX_GROUPS`.
    pub approx_hist_groups: u32,
    /// Half-width of the one pass's windows in standard deviations of the sample
    /// rank (and one sample key more either side). A rank outside its window is
    /// answered by the chain instead. Default [`APPROX_SIGMAS`](crate::tuning::select::APPROX_SIGMAS).
    pub approx_sigmas: f64,
    /// Sample sorts keep four keys per invocation in registers and exchange them
    /// by subgroup shuffles where the adapter has subgroup operations (default);
    /// `false`: every step of the network through workgroup memory.
    pub subgroup_sort: bool,
    /// [`SelectStats::gpu_ms`] by timestamp queries (the sum of the kernels' compute
    /// passes) where the adapter has them, else wall time. Timestamps cost a query
    /// set, two buffers and a readback per submission (tens of milliseconds of host
    /// time on the H100's driver), and the GPU idles meanwhile so its clock drops:
    /// kernel times taken this way run up to 4x the normal
    /// (docs/benchmarks/history/session-12.md), so compare variants by wall time
    /// without them. Default: on when the log target
    /// `ridgeline::profile::select::timestamps` is enabled at debug.
    pub timestamps: bool,
}
