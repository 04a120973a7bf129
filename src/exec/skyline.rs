//! `SkylineExec`: the rows of its input that no other row dominates.
//!
//! Each MIN/MAX dimension is replaced by its dense rank in the preferred direction
//! (0 = best, NULL worst; computed by one sort per dimension, in parallel), so the
//! algorithms compare exact `u32`s whatever the type and MAX becomes MIN. DIFF
//! dimensions become a group id (NULLs one group) and two more rank columns, `g`
//! and `G - 1 - g`: a row can dominate another only where both are no worse, that
//! is with equal group ids, so one skyline call serves every group. One MIN/MAX
//! dimension is a MIN filter per group (no skyline algorithm). Otherwise the rank
//! matrix goes to SkyAlign on the GPU or the multithreaded CPU algorithm
//! (`ridgeline_operators::skyline`); a GPU that fails falls back to the CPU with a
//! warning. `DISTINCT` then keeps the first row of each set of skyline rows equal
//! on every dimension. The output keeps the input order.
//!
//! Stages: `Single` (one partition, all rows), or `Partial` per input partition
//! (local skylines) under a `Final` over their union, which is exact because a row
//! dominated inside its partition is dominated in the whole input.
use crate::config::RidgelineOptions;
use crate::sql_ext::skyline::SkylineDirection;
use arrow::array::{make_comparator, ArrayRef, RecordBatch, UInt32Array};
use arrow::compute::{concat_batches, sort_to_indices, take_record_batch, SortOptions};
use arrow::row::{RowConverter, SortField};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, Distribution, ExecutionPlan, ExecutionPlanProperties,
    Partitioning, PlanProperties,
};
use futures::{StreamExt, TryStreamExt};
use rayon::prelude::*;
use ridgeline_operators::skyline::{skyline_cpu, skyline_gpu, CpuSkylineOptions, RankMatrix, SkylineGpuOptions, SkylineStats};
use ridgeline_operators::GpuContext;
use std::collections::HashMap;
use std::sync::Arc;

pub use crate::tuning::limits::GPU_MAX_DIMS;

/// Where the skyline algorithm runs.
#[derive(Clone, Debug, PartialEq)]
pub enum SkylinePlacement {
    Cpu,
    /// Always on the GPU (mode `on`).
    Gpu,
    /// On the GPU from this many rows (mode `auto` with an adapter).
    Auto {
        min_rows: usize,
    },
}

/// Which part of a partitioned skyline a node computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SkylineStage {
    Single,
    Partial,
    Final,
}

/// A dimension of the physical node.
#[derive(Clone, Debug)]
pub struct PhysicalSkylineDim {
    pub expr: Arc<dyn PhysicalExpr>,
    pub direction: SkylineDirection,
    /// For EXPLAIN.
    pub name: String,
}

/// The skyline operator.
#[derive(Debug)]
pub struct SkylineExec {
    input: Arc<dyn ExecutionPlan>,
    dims: Vec<PhysicalSkylineDim>,
    distinct: bool,
    stage: SkylineStage,
    placement: SkylinePlacement,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl SkylineExec {
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        dims: Vec<PhysicalSkylineDim>,
        distinct: bool,
        stage: SkylineStage,
        placement: SkylinePlacement,
    ) -> Self {
        let parts = match stage {
            SkylineStage::Partial => input.output_partitioning().partition_count(),
            _ => 1,
        };
        let eq = if parts == input.output_partitioning().partition_count() {
            input.equivalence_properties().clone()
        } else {
            EquivalenceProperties::new(input.schema())
        };
        let props = PlanProperties::new(
            eq,
            Partitioning::UnknownPartitioning(parts),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SkylineExec {
            input,
            dims,
            distinct,
            stage,
            placement,
            props: Arc::new(props),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }
    /// The algorithm EXPLAIN shows.
    pub fn algorithm(&self) -> String {
        let k = self
            .dims
            .iter()
            .filter(|d| d.direction != SkylineDirection::Diff)
            .count();
        if k <= 1 {
            return if k == 0 {
                "all-rows (DIFF only)".into()
            } else {
                "min-filter".into()
            };
        }
        match &self.placement {
            SkylinePlacement::Cpu => "cpu-hybrid".into(),
            SkylinePlacement::Gpu => "gpu-skyalign".into(),
            SkylinePlacement::Auto { min_rows } => {
                format!("auto (gpu-skyalign from {min_rows} rows, else cpu-hybrid)")
            }
        }
    }
    /// Whether this node may run its skyline on the GPU.
    pub fn uses_gpu(&self) -> bool {
        self.placement != SkylinePlacement::Cpu
            && self
                .dims
                .iter()
                .filter(|d| d.direction != SkylineDirection::Diff)
                .count()
                > 1
    }
    pub fn stage(&self) -> SkylineStage {
        self.stage
    }
}

impl DisplayAs for SkylineExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let dims: Vec<String> = self
            .dims
            .iter()
            .map(|d| format!("{} {}", d.name, d.direction))
            .collect();
        let stage = match self.stage {
            SkylineStage::Single => "",
            SkylineStage::Partial => "stage=partial, ",
            SkylineStage::Final => "stage=final, ",
        };
        write!(
            f,
            "SkylineExec: {stage}algorithm={}, dims=[{}]{}",
            self.algorithm(),
            dims.join(", "),
            if self.distinct { ", distinct" } else { "" }
        )
    }
}

impl ExecutionPlan for SkylineExec {
    fn name(&self) -> &str {
        "SkylineExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(
            &Arc<dyn PhysicalExpr>,
        ) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        for d in &self.dims {
            if f(&d.expr)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn required_input_distribution(&self) -> Vec<Distribution> {
        match self.stage {
            SkylineStage::Partial => vec![Distribution::UnspecifiedDistribution],
            _ => vec![Distribution::SinglePartition],
        }
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    #[allow(deprecated)]
    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(SkylineExec::new(
            children.swap_remove(0),
            self.dims.clone(),
            self.distinct,
            self.stage,
            self.placement.clone(),
        )))
    }
    fn execute(
        &self,
        partition: usize,
        ctx: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let input = self.input.execute(partition, ctx.clone())?;
        let dims = self.dims.clone();
        let distinct = self.distinct;
        let placement = self.placement.clone();
        let dom = MetricBuilder::new(&self.metrics).counter("dominance_tests", partition);
        let mask = MetricBuilder::new(&self.metrics).counter("mask_tests", partition);
        let gpu_rows = MetricBuilder::new(&self.metrics).counter("gpu_rows", partition);
        let elapsed = MetricBuilder::new(&self.metrics).elapsed_compute(partition);
        let batch_size = ctx.session_config().batch_size();
        let s2 = schema.clone();
        let fut = async move {
            let batches: Vec<RecordBatch> = input.try_collect().await?;
            let out = tokio::task::spawn_blocking(move || -> Result<RecordBatch> {
                let _t = elapsed.timer();
                let tq = std::time::Instant::now();
                let batch = concat_batches(&s2, &batches)?;
                let arrays = dims
                    .iter()
                    .map(|d| d.expr.evaluate(&batch)?.into_array(batch.num_rows()))
                    .collect::<Result<Vec<_>>>()?;
                let cols: Vec<(ArrayRef, SkylineDirection)> = arrays
                    .into_iter()
                    .zip(dims.iter().map(|d| d.direction))
                    .collect();
                let (rows, stats, on_gpu) = skyline_rows(&cols, distinct, &placement)?;
                dom.add(stats.dominance_tests as usize);
                mask.add(stats.mask_tests as usize);
                if on_gpu {
                    gpu_rows.add(batch.num_rows());
                }
                let out = take_record_batch(&batch, &UInt32Array::from(rows))?;
                if ridgeline_operators::profiling!("ridgeline::profile::skyline") {
                    log::debug!(
                        target: ridgeline_operators::tuning::skyline::PROFILE,
                        "skyline query profile: the whole node {:.1} ms",
                        tq.elapsed().as_secs_f64() * 1e3
                    );
                }
                Ok(out)
            })
            .await
            .map_err(super::blocking_err)??;
            let n = out.num_rows();
            let parts: Vec<Result<RecordBatch>> = (0..n)
                .step_by(batch_size.max(1))
                .map(|o| Ok(out.slice(o, batch_size.min(n - o))))
                .collect();
            Ok::<_, DataFusionError>(futures::stream::iter(parts))
        };
        let s = futures::stream::once(fut).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s.boxed())))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// Dense ranks of `array` in the preferred direction: 0 for the best value, equal
/// values equal ranks, NULL after every value.
pub fn dense_ranks(array: &ArrayRef, direction: SkylineDirection) -> Result<Vec<u32>> {
    let n = array.len();
    let mut ranks = vec![0u32; n];
    if n == 0 {
        return Ok(ranks);
    }
    if let Some(mut keys) = order_keys(array) {
        // Numbers, dates, times and Booleans: a radix sort of order-preserving keys
        // (several times faster than a comparison sort), NULLs after every value.
        if direction == SkylineDirection::Max {
            keys.iter_mut().for_each(|k| *k = !*k);
        }
        if array.null_count() == 0 {
            return Ok(ridgeline_operators::skyline::dense_ranks_u64(&keys));
        }
        let valid: Vec<usize> = (0..n).filter(|&i| array.is_valid(i)).collect();
        let vk: Vec<u64> = valid.iter().map(|&i| keys[i]).collect();
        let vr = ridgeline_operators::skyline::dense_ranks_u64(&vk);
        let null_rank = vr.iter().max().map_or(0, |&m| m + 1);
        ranks.fill(null_rank);
        for (&i, &r) in valid.iter().zip(&vr) {
            ranks[i] = r;
        }
        return Ok(ranks);
    }
    dense_ranks_by_sort(array, direction)
}

/// Keys whose unsigned order is the column's sort order (ascending, as
/// `sort_to_indices` orders it: floats by their total order, so -0.0 before +0.0
/// and NaN above every number), for the types that have such keys; `None` for the
/// others (strings, decimals, ...), which keep the comparison sort. Keys of NULL
/// slots are arbitrary.
fn order_keys(array: &ArrayRef) -> Option<Vec<u64>> {
    use arrow::array::{ArrowPrimitiveType, AsArray, PrimitiveArray};
    use arrow::datatypes::*;
    fn signed<T: ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        f: impl Fn(T::Native) -> i64,
    ) -> Vec<u64> {
        a.values()
            .iter()
            .map(|&v| (f(v) as u64) ^ (1 << 63))
            .collect()
    }
    fn unsigned<T: ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        f: impl Fn(T::Native) -> u64,
    ) -> Vec<u64> {
        a.values().iter().map(|&v| f(v)).collect()
    }
    let a = array.as_ref();
    Some(match a.data_type() {
        DataType::Int8 => signed(a.as_primitive::<Int8Type>(), |v| v as i64),
        DataType::Int16 => signed(a.as_primitive::<Int16Type>(), |v| v as i64),
        DataType::Int32 => signed(a.as_primitive::<Int32Type>(), |v| v as i64),
        DataType::Int64 => signed(a.as_primitive::<Int64Type>(), |v| v),
        DataType::UInt8 => unsigned(a.as_primitive::<UInt8Type>(), |v| v as u64),
        DataType::UInt16 => unsigned(a.as_primitive::<UInt16Type>(), |v| v as u64),
        DataType::UInt32 => unsigned(a.as_primitive::<UInt32Type>(), |v| v as u64),
        DataType::UInt64 => unsigned(a.as_primitive::<UInt64Type>(), |v| v),
        DataType::Date32 => signed(a.as_primitive::<Date32Type>(), |v| v as i64),
        DataType::Date64 => signed(a.as_primitive::<Date64Type>(), |v| v),
        DataType::Time32(TimeUnit::Second) => {
            signed(a.as_primitive::<Time32SecondType>(), |v| v as i64)
        }
        DataType::Time32(TimeUnit::Millisecond) => {
            signed(a.as_primitive::<Time32MillisecondType>(), |v| v as i64)
        }
        DataType::Time64(TimeUnit::Microsecond) => {
            signed(a.as_primitive::<Time64MicrosecondType>(), |v| v)
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            signed(a.as_primitive::<Time64NanosecondType>(), |v| v)
        }
        DataType::Timestamp(TimeUnit::Second, _) => {
            signed(a.as_primitive::<TimestampSecondType>(), |v| v)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            signed(a.as_primitive::<TimestampMillisecondType>(), |v| v)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            signed(a.as_primitive::<TimestampMicrosecondType>(), |v| v)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            signed(a.as_primitive::<TimestampNanosecondType>(), |v| v)
        }
        DataType::Float32 => unsigned(a.as_primitive::<Float32Type>(), |v| {
            let b = v.to_bits();
            (if b >> 31 == 1 { !b } else { b | 0x8000_0000 }) as u64
        }),
        DataType::Float64 => unsigned(a.as_primitive::<Float64Type>(), |v| {
            let b = v.to_bits();
            if b >> 63 == 1 {
                !b
            } else {
                b | (1 << 63)
            }
        }),
        DataType::Boolean => {
            let b = a.as_boolean();
            (0..b.len()).map(|i| b.value(i) as u64).collect()
        }
        _ => return None,
    })
}

/// The comparison-sort dense ranks (every orderable type): the path of the types
/// without order-preserving keys, and the reference of the keyed path in tests.
fn dense_ranks_by_sort(array: &ArrayRef, direction: SkylineDirection) -> Result<Vec<u32>> {
    let n = array.len();
    let mut ranks = vec![0u32; n];
    if n == 0 {
        return Ok(ranks);
    }
    let opts = SortOptions {
        descending: direction == SkylineDirection::Max,
        nulls_first: false,
    };
    let idx = sort_to_indices(array.as_ref(), Some(opts), None)?;
    let cmp = make_comparator(array.as_ref(), array.as_ref(), opts)?;
    let idx = idx.values();
    let mut r = 0u32;
    for w in 1..n {
        let (a, b) = (idx[w - 1] as usize, idx[w] as usize);
        if cmp(a, b) != std::cmp::Ordering::Equal {
            r += 1;
        }
        ranks[b] = r;
    }
    Ok(ranks)
}

/// Group ids of the DIFF columns (equal values, NULLs included, share an id) and
/// the number of groups.
fn group_ids(cols: &[ArrayRef], n: usize) -> Result<(Vec<u32>, usize)> {
    if cols.is_empty() {
        return Ok((vec![0; n], 1));
    }
    let conv = RowConverter::new(
        cols.iter()
            .map(|c| SortField::new(c.data_type().clone()))
            .collect(),
    )?;
    let rows = conv.convert_columns(cols)?;
    let mut ids: HashMap<&[u8], u32> = HashMap::new();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let next = ids.len() as u32;
        out.push(*ids.entry(rows.row(i).data()).or_insert(next));
    }
    Ok((out, ids.len().max(1)))
}

fn warn_fallback(e: &dyn std::fmt::Display) {
    log::warn!("GPU skyline failed, running on the CPU instead: {e}");
}

/// The device for a GPU skyline of `rows` rows and `dims` rank columns, if it runs there.
fn gpu_for(
    placement: &SkylinePlacement,
    rows: usize,
    dims: usize,
) -> Result<Option<Arc<GpuContext>>> {
    if dims > GPU_MAX_DIMS || rows < 2 {
        return Ok(None);
    }
    match placement {
        SkylinePlacement::Cpu => Ok(None),
        SkylinePlacement::Gpu => ridgeline_operators::context::global()
            .map(Some)
            .map_err(crate::gpu_batch::gpu_err),
        SkylinePlacement::Auto { min_rows } if rows >= *min_rows => {
            Ok(ridgeline_operators::context::global().ok())
        }
        SkylinePlacement::Auto { .. } => Ok(None),
    }
}

/// Row ids (ascending) of the skyline of `cols`, the work counters, and whether
/// the GPU computed it.
pub fn skyline_rows(
    cols: &[(ArrayRef, SkylineDirection)],
    distinct: bool,
    placement: &SkylinePlacement,
) -> Result<(Vec<u32>, SkylineStats, bool)> {
    let n = cols.first().map_or(0, |c| c.0.len());
    if n == 0 {
        return Ok((Vec::new(), SkylineStats::default(), false));
    }
    if n > u32::MAX as usize {
        return Err(DataFusionError::Execution(format!(
            "SKYLINE OF over {n} rows (at most 2^32 - 1)"
        )));
    }
    let diff: Vec<ArrayRef> = cols
        .iter()
        .filter(|c| c.1 == SkylineDirection::Diff)
        .map(|c| c.0.clone())
        .collect();
    let ranked: Vec<&(ArrayRef, SkylineDirection)> = cols
        .iter()
        .filter(|c| c.1 != SkylineDirection::Diff)
        .collect();
    let profile = ridgeline_operators::profiling!("ridgeline::profile::skyline");
    let t0 = std::time::Instant::now();
    let (gid, groups) = group_ids(&diff, n)?;
    let ranks: Vec<Vec<u32>> = ranked
        .par_iter()
        .map(|(a, d)| dense_ranks(a, *d))
        .collect::<Result<_>>()?;
    let t_ranks = t0.elapsed().as_secs_f64() * 1e3;
    let mut stats = SkylineStats::default();
    let mut on_gpu = false;
    let mut rows: Vec<u32> = match ranks.len() {
        0 => (0..n as u32).collect(),
        1 => {
            // A one-dimensional skyline is a MIN filter per group.
            let r = &ranks[0];
            let mut best = vec![u32::MAX; groups];
            for i in 0..n {
                let g = gid[i] as usize;
                best[g] = best[g].min(r[i]);
            }
            stats.algorithm = "min-filter";
            (0..n as u32)
                .filter(|&i| r[i as usize] == best[gid[i as usize] as usize])
                .collect()
        }
        k => {
            let extra = if groups > 1 { 2 } else { 0 };
            let d = k + extra;
            let mut m = vec![0u32; n * d];
            m.par_chunks_mut(d).enumerate().for_each(|(i, row)| {
                for (j, r) in ranks.iter().enumerate() {
                    row[j] = r[i];
                }
                if extra == 2 {
                    row[k] = gid[i];
                    row[k + 1] = groups as u32 - 1 - gid[i];
                }
            });
            let rm = RankMatrix::new(n, d, &m);
            let t_matrix = t0.elapsed().as_secs_f64() * 1e3;
            let (ids, st) = match gpu_for(placement, n, d)? {
                Some(dev) => match skyline_gpu(&dev, rm, &SkylineGpuOptions::default()) {
                    Ok(r) => {
                        on_gpu = true;
                        r
                    }
                    Err(e) => {
                        warn_fallback(&e);
                        skyline_cpu(rm, &CpuSkylineOptions::default())
                    }
                },
                None => skyline_cpu(rm, &CpuSkylineOptions::default()),
            };
            stats = st;
            if profile {
                log::debug!(
                    target: ridgeline_operators::tuning::skyline::PROFILE,
                    "skyline query profile: {n} rows, {d} rank columns: groups and ranks {t_ranks:.1} ms, matrix {:.1} ms, algorithm ({}) {:.1} ms",
                    t_matrix - t_ranks,
                    stats.algorithm,
                    t0.elapsed().as_secs_f64() * 1e3 - t_matrix
                );
            }
            ids
        }
    };
    rows.sort_unstable();
    if distinct {
        let mut seen: HashMap<(u32, Vec<u32>), ()> = HashMap::new();
        rows.retain(|&i| {
            let key = (
                gid[i as usize],
                ranks.iter().map(|r| r[i as usize]).collect(),
            );
            seen.insert(key, ()).is_none()
        });
    }
    Ok((rows, stats, on_gpu))
}

/// The placement a session's settings give a skyline.
pub fn placement_for(opts: &RidgelineOptions) -> Result<SkylinePlacement> {
    Ok(match crate::config::device_for(opts.mode()?)? {
        None => SkylinePlacement::Cpu,
        Some(dev) => match opts.mode()? {
            ridgeline_operators::GpuMode::On => SkylinePlacement::Gpu,
            // A CPU adapter (lavapipe) runs SkyAlign slower than the CPU algorithm.
            _ if dev.info().device_type == ridgeline_operators::wgpu::DeviceType::Cpu => {
                SkylinePlacement::Cpu
            }
            _ => SkylinePlacement::Auto {
                min_rows: opts.min_gpu_skyline_rows,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int32Array, StringArray};

    #[test]
    fn keyed_ranks_match_the_comparison_sort() {
        use arrow::array::*;
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let n = 3000;
        let specials = [
            0.0f64,
            -0.0,
            f64::NAN,
            -f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1.5,
            -1.5,
        ];
        let f64s: Vec<Option<f64>> = (0..n)
            .map(|i| match next() % 10 {
                0 => None,
                1 | 2 => Some(specials[i % specials.len()]),
                _ => Some((next() % 200) as f64 / 8.0 - 12.0),
            })
            .collect();
        let f32s: Vec<Option<f32>> = f64s.iter().map(|v| v.map(|v| v as f32)).collect();
        let i64s: Vec<Option<i64>> = (0..n)
            .map(|_| {
                if next() % 7 == 0 {
                    None
                } else {
                    Some(next() as i64 % 1000)
                }
            })
            .collect();
        let i32s: Vec<i32> = (0..n).map(|_| (next() % 50) as i32 - 25).collect();
        let u64s: Vec<u64> = (0..n).map(|_| next() % 3 * (u64::MAX / 2)).collect();
        let bools: Vec<Option<bool>> = (0..n)
            .map(|_| match next() % 3 {
                0 => None,
                1 => Some(true),
                _ => Some(false),
            })
            .collect();
        let dates: Vec<i32> = (0..n).map(|_| (next() % 400) as i32 - 200).collect();
        let ts: Vec<Option<i64>> = (0..n)
            .map(|_| {
                if next() % 5 == 0 {
                    None
                } else {
                    Some((next() % 100) as i64 * 1_000_000 - 50_000_000)
                }
            })
            .collect();
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(Float64Array::from(f64s)),
            Arc::new(Float32Array::from(f32s)),
            Arc::new(Int64Array::from(i64s)),
            Arc::new(Int32Array::from(i32s)),
            Arc::new(UInt64Array::from(u64s)),
            Arc::new(BooleanArray::from(bools)),
            Arc::new(Date32Array::from(dates)),
            Arc::new(TimestampMicrosecondArray::from(ts)),
            Arc::new(Int8Array::from(vec![
                Some(-128i8),
                Some(127),
                None,
                Some(0),
                Some(-1),
            ])),
            Arc::new(Float64Array::from(vec![None, None, None])),
            Arc::new(Float64Array::from(vec![Some(2.0), Some(2.0)])),
        ];
        for a in &arrays {
            assert!(order_keys(a).is_some(), "{}", a.data_type());
            for dir in [SkylineDirection::Min, SkylineDirection::Max] {
                assert_eq!(
                    dense_ranks(a, dir).unwrap(),
                    dense_ranks_by_sort(a, dir).unwrap(),
                    "{} {dir:?}",
                    a.data_type()
                );
            }
        }
        // Strings keep the comparison sort.
        let s: ArrayRef = Arc::new(StringArray::from(vec![
            Some("b"),
            None,
            Some("a"),
            Some("b"),
        ]));
        assert!(order_keys(&s).is_none());
        assert_eq!(
            dense_ranks(&s, SkylineDirection::Min).unwrap(),
            vec![1, 2, 0, 1]
        );
    }

    #[test]
    fn ranks_are_dense_and_directed() {
        let a: ArrayRef = Arc::new(Float64Array::from(vec![
            Some(2.0),
            None,
            Some(-0.0),
            Some(0.0),
            Some(2.0),
            Some(f64::NAN),
        ]));
        assert_eq!(
            dense_ranks(&a, SkylineDirection::Min).unwrap(),
            vec![2, 4, 0, 1, 2, 3]
        );
        assert_eq!(
            dense_ranks(&a, SkylineDirection::Max).unwrap(),
            vec![1, 4, 3, 2, 1, 0]
        );
    }

    #[test]
    fn skyline_with_diff_and_distinct() {
        // price MIN, rating MAX, city DIFF; row 6 (4, 10, c) beats every other row
        // on price and rating, but only rows of its own city are compared with it.
        let price: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(10),
            Some(20),
            Some(10),
            Some(5),
            None,
            Some(10),
            Some(4),
        ]));
        let rating: ArrayRef = Arc::new(Int32Array::from(vec![
            Some(3),
            Some(5),
            Some(3),
            Some(1),
            Some(9),
            Some(3),
            Some(10),
        ]));
        let city: ArrayRef = Arc::new(StringArray::from(vec![
            Some("a"),
            Some("a"),
            Some("a"),
            Some("b"),
            Some("b"),
            None,
            Some("c"),
        ]));
        let cols = vec![
            (price.clone(), SkylineDirection::Min),
            (rating.clone(), SkylineDirection::Max),
            (city.clone(), SkylineDirection::Diff),
        ];
        let (r, _, _) = skyline_rows(&cols, false, &SkylinePlacement::Cpu).unwrap();
        assert_eq!(r, vec![0, 1, 2, 3, 4, 5, 6]);
        let (r, _, _) = skyline_rows(&cols, true, &SkylinePlacement::Cpu).unwrap();
        assert_eq!(r, vec![0, 1, 3, 4, 5, 6]);
        let cols2 = vec![
            (price.clone(), SkylineDirection::Min),
            (rating.clone(), SkylineDirection::Max),
        ];
        let (r, _, _) = skyline_rows(&cols2, false, &SkylinePlacement::Cpu).unwrap();
        assert_eq!(r, vec![6]);
        // Without row 6: NULL price is worst, but rating 9 is the best, so row 4 stays.
        let cut = |a: &ArrayRef| a.slice(0, 6);
        let cols3 = vec![
            (cut(&price), SkylineDirection::Min),
            (cut(&rating), SkylineDirection::Max),
        ];
        let (r, _, _) = skyline_rows(&cols3, false, &SkylinePlacement::Cpu).unwrap();
        assert_eq!(r, vec![0, 1, 2, 3, 4, 5]);
        let (r, _, _) = skyline_rows(&cols3[..1], false, &SkylinePlacement::Cpu).unwrap();
        assert_eq!(r, vec![3]);
    }
}
