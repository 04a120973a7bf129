//! One home for the root crate's tuned constants: the cost models' rates and
//! fixed costs, and the limits of what the GPU takes on (model: CUB's `tuning/`
//! files). Each says what it controls, its value, and the measurement that chose
//! it; the operators' own constants are in `ridgeline_operators::tuning`. The
//! modules that use a constant re-export it where it was public before.
//!
//! Settings a user changes per session are `ridgeline.*` options
//! ([`crate::config`]); environment switches are declared in
//! [`crate::config::SWITCHES`]. docs/settings.md lists both.

/// The GPU hash join (`exec::gpu_hash_join`, `optimizer::gpu_join`).
pub mod join {
    /// Probe rows a GPU join gathers before one device probe: 2^20. Each probe is
    /// an upload of the keys, three dispatches and two waits (about 0.3 ms of fixed
    /// cost on the H100 machine's Vulkan driver per wait, `bench filter`'s figure),
    /// so DataFusion's 8192-row batches are gathered first. Not yet tuned on the H200.
    pub const PROBE_MIN_ROWS: usize = 1 << 20;
    /// Rows of one output batch of a GPU join at most: 2^16 (the output of a probe
    /// batch is gathered in pieces of this many pairs, so a many-to-many probe never
    /// holds one huge batch; eight of DataFusion's default batches).
    pub const OUTPUT_ROWS: usize = 1 << 16;
    /// Mode `auto` moves a hash join to the GPU only when both sides are estimated
    /// at this many rows or more (and `ridgeline.min_gpu_rows`): 2^23. Measured on
    /// the H200 machine (docs/benchmarks/history/session-36.md): the primitives
    /// themselves beat DataFusion's CPU join everywhere (`bench join`: 2^20 build x
    /// 2^26 probe at 50% matches 22 ms against 140 ms; 2^24 x 2^24 38 ms with the
    /// build against 249 ms), but inside TPC-H at SF 10 the joins' host side (the
    /// build gathered on the host, key uploads, pairs downloaded, the output
    /// gathered on the host) made every join query slower: resident geomean 59.7 ms
    /// with GPU joins on the joins of a million probe rows against 51.0 without,
    /// host tables 194 against 146. Only joins whose CPU hash table falls far out of
    /// cache are left to it until the join's output stays on the device.
    pub const AUTO_MIN_ROWS: usize = 1 << 23;
}

/// The GPU filter rule's cost model (`optimizer::gpu_filter`).
pub mod filter {
    /// Host-to-device upload rate the cost model assumes (bytes per ns = GB/s;
    /// measured 30 GB/s on the H100 machine through the staging pool).
    pub const UPLOAD_GBPS: f64 = 30.0;
    /// Device-to-host rate (measured 16 GB/s).
    pub const DOWNLOAD_GBPS: f64 = 16.0;
    /// Fixed cost of a GPU filter per input partition (a batch each): kernel launches
    /// and the count readback, measured 0.12 + 0.21 ms on the H100 (`bench filter`).
    pub const GPU_FIXED_NS: f64 = 350_000.0;
    /// CPU cost of one conjunct per row and core: calibrated on TPC-H Q6 at SF 10 on
    /// the H100 machine's 16 cores (123 ms for 60M rows, 5 conjuncts, aggregation
    /// included), so about 3 ns.
    pub const CPU_NS_PER_ROW_CONJUNCT: f64 = 3.0;
    /// CPU cost of one conjunct over strings per row and core (Utf8View comparisons):
    /// TPC-H Q19's lineitem filter at SF 10 (two string conjuncts and three ranges of
    /// `l_quantity`) took 2.94 s of CPU over 60M rows on the H100 machine, about 49 ns
    /// a row.
    pub const CPU_NS_PER_ROW_STRING_CONJUNCT: f64 = 20.0;
    /// CPU cost of gathering one output column per selected row and core.
    pub const CPU_NS_PER_ROW_COLUMN: f64 = 2.0;
    /// Selectivity assumed when statistics say nothing (DataFusion's default is 20%).
    pub const DEFAULT_SELECTIVITY: f64 = 0.2;
    /// How much cheaper the GPU must be estimated before a filter moves. The inputs are
    /// estimates (selectivities from statistics, fixed costs measured on one machine):
    /// on the H100 at SF 10, the GPU filters of TPC-H q4 and q20 made those queries
    /// 1.1-1.2x slower, while q12's, with far fewer rows downloaded, made it 2.1x
    /// faster. Close calls stay on the CPU, where a wrong guess costs little (the
    /// margin also sends back q14's and q15's filters, which had gained 6-12%).
    pub const GPU_MARGIN: f64 = 1.5;
}

/// The semi-join prefilter's cost model (`exec::join_prefilter`, `optimizer::join_prefilter`).
pub mod join_prefilter {
    /// CPU time a hash join spends per probe row (measured: 15 ns a row of TPC-H
    /// lineitem against a 43K-row build side, DataFusion 55, one core).
    pub const PROBE_NS_PER_ROW: f64 = 15.0;
    /// Fixed cost of the device path per output partition, in ms: each partition's
    /// batches take a membership kernel, a compaction with a count readback and a
    /// download per column, and the partitions wait on one queue (measured on the
    /// H100 machine, TPC-H SF 10: over 8M partsupp rows with 16 partitions the filter
    /// lost 8.4 ms while saving about 7 ms of probing).
    pub const FIXED_MS_PER_PARTITION: f64 = 1.0;
    /// Effective download rate of filtered rows, bytes per ms (25 GB/s).
    pub const DOWNLOAD_BYTES_PER_MS: f64 = 25.0e6;
    /// Fixed cost of the mask path, in ms, for the whole input: the key set's
    /// upload, one membership kernel per chunk in one submission, one readback of
    /// every selection (measured on the H100 machine, TPC-H SF 10: 1.0-1.6 ms over
    /// 8M partsupp rows in 16 chunks).
    pub const MASK_FIXED_MS: f64 = 0.8;
    /// Device and readback time of the mask path per input row, ns (same
    /// measurement: 3.7 ms over 60M lineitem rows).
    pub const MASK_DEVICE_NS_PER_ROW: f64 = 0.05;
    /// CPU time of the mask path per input row (counting a chunk's mask bits and
    /// walking them), ns on one core.
    pub const MASK_NS_PER_ROW: f64 = 0.3;
    /// Host memory bandwidth the mask path's gather gets, bytes per ms, all cores
    /// together: it reads about every cache line holding a passing row of the host
    /// copy and writes the passing rows (TPC-H Q5 at SF 10 on the H100 machine:
    /// 60M lineitem rows, 20% of 48 bytes passing, 437-571 ms of gather summed over
    /// 16 partitions, about 30 ms of wall time for 2.6 GB).
    pub const HOST_BYTES_PER_MS: f64 = 60.0e6;
    /// Share of an inexact estimate of the build side's rows the plan-time check
    /// assumes. The check only rules out filters that cannot pay (each partition
    /// decides again with the key set's real density), and an estimate through a
    /// filter DataFusion cannot analyse is its default selectivity, often several
    /// times the truth (TPC-H Q9's `p_name LIKE '%green%'`: 20% estimated, 5.4%
    /// real), which kept the filter out of Q9 at SF 1 on 16 cores.
    pub const INEXACT_BUILD_SHARE: f64 = 0.25;
}

/// GPU aggregation: where it applies and its cost model (`optimizer::gpu_aggregate`, `exec::gpu_aggregate`).
pub mod aggregate {
    /// Groups from which a GPU aggregation uses the few-groups kernel, which folds
    /// rows in registers first (`GroupAggOptions::small_groups`, at most 8 groups):
    /// on the H100 it took TPC-H Q1 at SF 10 (4 groups) from 23.7-29.8 ms to
    /// 13.9-25.0 (medians, alternated twice), while Q6 (one group) measured 0.3-0.7
    /// ms slower with it, so it is on from 2 groups.
    pub const SMALL_GROUPS_MIN: u32 = 2;
    /// Most dense group tags one GPU aggregation takes.
    pub const MAX_GROUPS: u64 = 1 << 16;
    /// Most groups a GPU aggregation with quantiles takes (every group is a region of
    /// one SampleSelect descent over all of them; each big region costs a few
    /// dispatches per level).
    pub const MAX_QUANTILE_GROUPS: u64 = 4096;
    /// In mode `auto`, quantile regions (groups) averaging at least this many values
    /// select on the device; smaller ones are downloaded after the partition and
    /// selected on the CPU (see `ridgeline_operators::select::regions`).
    pub const REGION_GPU_MIN_ROWS: usize = 1 << 16;
    /// Mode auto: a group table needs this many table rows per group, or HAVING
    /// conditions on the device (`bench aggregate --sql`, 1M groups: 2^20 and 2^22 rows
    /// lost to CPU mode, 2^24 won 2.2x; H100, docs/benchmarks/history/session-25.md).
    pub const TABLE_MIN_ROWS_PER_GROUP: u64 = 16;
    /// Mode auto: CPU time DataFusion's aggregation with its WHERE clause spends per
    /// table row, ns on one core (TPC-H Q15 at SF 1, H200 machine, warm: 22 ms of
    /// filter and 12.5 ms of partial aggregation over 6M lineitem rows, summed over
    /// 16 cores; more where more rows pass).
    pub const CPU_AGG_NS_PER_ROW: f64 = 5.75;
    /// Mode auto: fixed device time of a group-table aggregation, ms (same query,
    /// docs/benchmarks/history/session-32.md: 2.3-3.3 ms per aggregation over 16 chunks, of which recording the
    /// chunks' row programs 0.7, waiting for the device 1.0, compaction and readback
    /// of the groups 0.56).
    pub const TABLE_FIXED_MS: f64 = 2.5;
    /// Held chunk outputs after which [`for_each_chunk`] submits what it recorded.
    pub const RECORD_FLUSH_BYTES: u64 = 256 << 20;
}

/// Join reordering (`optimizer::join_reorder`).
pub mod join_order {
    /// Most leaves a cluster may have (greedy ordering is quadratic per step).
    pub const MAX_LEAVES: usize = 32;
    /// Largest estimated leaf whose keys are passed to an aggregated input.
    pub const SIP_MAX_ROWS: f64 = 1_000_000.0;
    /// Largest share of the aggregated input's distinct keys the passed keys may be
    /// (the semi join must drop at least 75% of the groups).
    pub const SIP_MAX_SHARE: f64 = 0.25;
}

/// GPU top-k (`optimizer::gpu_topk`, `exec::gpu_topk`).
pub mod topk {
    /// In mode `auto`, only fetches of at least this many rows move (the heap of
    /// DataFusion's TopK grows with k).
    pub const AUTO_MIN_FETCH: usize = 1 << 16;
    /// In mode `auto`, inputs with at least this many rows select on the GPU.
    pub const GPU_MIN_ROWS: usize = 1 << 20;
}

/// The quantile functions (`functions::percentile`, `functions::quantile`).
pub mod quantile {
    /// The most ranks the dense-tag GPU path serves in one selection.
    pub const MAX_DENSE_GPU_RANKS: usize = 256;
    /// Regions averaging fewer rows than this (a GPU workgroup) are sorted on the CPU.
    pub const WORKGROUP_ROWS: usize = 256;
    /// Groups with at least this many values select on the GPU in mode `auto`.
    pub const GPU_MIN_ROWS: usize = 1 << 20;
}

/// Scans of host tables (`exec::host_scan`).
pub mod host_scan {
    /// Batches a filter is left out for after it kept almost every row of one.
    pub const SKIP_AFTER_UNSELECTIVE: usize = 15;
    /// The largest share of a batch's rows a dynamic filter may keep and still be
    /// applied to the next batch.
    pub const KEEP_AT_MOST: f64 = 0.05;
}

/// What the GPU takes on: limits of the expression compiler and the string dictionaries.
pub mod limits {
    /// The deepest expression tree compiled to WGSL. A deeper one (a 1000-term `OR`
    /// chain, a long sum) stays on the CPU: shader compilers recurse over nested
    /// expressions without bounds, and such kernels would compile slowly for no gain.
    pub const MAX_GPU_EXPR_DEPTH: usize = 64;
    /// The longest `IN` list compiled to WGSL (one comparison per value).
    pub const MAX_GPU_IN_LIST: usize = 256;
    /// Most bitmaps (selection, Boolean outputs, validity) one kernel assembles.
    pub const MAX_BITMAPS_PER_KERNEL: usize = 32;
    /// Most distinct values a resident string column is dictionary-coded with.
    pub const MAX_DICT_VALUES: usize = 4096;
    /// Most code ranges one rewritten expression tests.
    pub const MAX_CODE_RANGES: usize = 16;
    /// Most rank columns the GPU path takes (wider skylines run on the CPU).
    pub const GPU_MAX_DIMS: usize = 16;
}
