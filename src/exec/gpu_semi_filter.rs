//! `GpuSemiFilterExec`: the probe side of a hash join, read from a GPU island (a
//! resident scan or a GPU filter) with the rows whose join key is not among the
//! build side's keys dropped on the device before anything is downloaded (a
//! semi-join prefilter; the rule is `optimizer::join_prefilter`, the keys come
//! from the build side's [`JoinKeysExec`](super::JoinKeysExec)).
//!
//! On its first poll a partition waits for the build side's key set, then decides
//! by the set's density over the probe key's range (from the scan's statistics):
//! the fraction of probe rows expected to pass. Over a resident scan, whose host
//! copy costs nothing to read, the filter runs only when at most
//! [`SCAN_MAX_DENSITY`] of the rows would pass (each surviving row is then
//! downloaded instead of read in place); over a GPU filter, whose rows are
//! downloaded anyway, whenever at most [`FILTER_MAX_DENSITY`] pass. Otherwise, and
//! when the GPU fails, the input's rows pass unfiltered: the join drops them.
//!
//! Like `GpuUnloadExec` it hands host batches to its CPU parent; the boundary rule
//! puts no unload above it and no load below it.
use super::join_keys::{JoinKeyLink, KeySets, KEY_WAIT};
use super::{as_gpu, blocking_err, cpu_equivalent};
use crate::gpu_batch::{gpu_err, is_gpu_error, ColumnData, GpuBatch, Storage};
use arrow::array::RecordBatch;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use ridgeline_operators::compact::CompactAlgo;
use ridgeline_operators::member::{member_gpu, KeyWidth};
use ridgeline_operators::GpuContext;
use std::sync::Arc;

/// Over a resident scan: the largest fraction of rows expected to pass for which
/// the prefilter runs. Each passing row is downloaded (about 2 ns a row of 48
/// bytes at the H100 machine's 25 GB/s of effective readback) instead of read in
/// place, and each dropped row saves its probe (about 15 ns of CPU time, 1 ns of
/// wall time on 16 cores, measured on TPC-H's lineitem probes), so it pays below
/// about a third; a quarter leaves a margin.
pub const SCAN_MAX_DENSITY: f64 = 0.25;
/// Over a GPU filter (rows downloaded anyway): the prefilter only shrinks the
/// download, so it runs unless nearly every row passes.
pub const FILTER_MAX_DENSITY: f64 = 0.9;

/// A join key the filter may test.
#[derive(Clone, Debug)]
pub struct SemiKey {
    /// The key's column in the input.
    pub col: usize,
    /// Its key set in the link.
    pub slot: usize,
    /// The build side's key column (for EXPLAIN).
    pub build: String,
    /// The probe key's [min, max] (the resident table's statistics).
    pub domain: (i64, i64),
}

/// A semi-join prefilter on the GPU.
#[derive(Debug)]
pub struct GpuSemiFilterExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<SemiKey>,
    link: Arc<JoinKeyLink>,
    max_density: f64,
    metrics: ExecutionPlanMetricsSet,
}

impl GpuSemiFilterExec {
    /// Filters `input` (a GPU island) by one of `keys`: at execution, the one whose
    /// key set in `link` lets the fewest rows pass.
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<SemiKey>, link: Arc<JoinKeyLink>) -> Self {
        let max_density = if input.downcast_ref::<super::GpuScanExec>().is_some() { SCAN_MAX_DENSITY } else { FILTER_MAX_DENSITY };
        GpuSemiFilterExec { input, keys, link, max_density, metrics: ExecutionPlanMetricsSet::new() }
    }
    /// The input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
    /// The keys it may test.
    pub fn keys(&self) -> &[SemiKey] {
        &self.keys
    }
    /// The key to test and the expected fraction of rows passing by it: the
    /// smallest, if at most `max_density`.
    fn choose(&self, sets: &KeySets) -> Option<(SemiKey, f64)> {
        self.keys
            .iter()
            .filter_map(|k| {
                let set = sets.sets.get(k.slot)?.as_ref()?;
                let (lo, hi) = k.domain;
                let span = (hi as i128 - lo as i128 + 1).max(1) as f64;
                Some((k.clone(), set.count_in(lo, hi) as f64 / span))
            })
            .filter(|(_, d)| *d <= self.max_density)
            .min_by(|a, b| a.1.total_cmp(&b.1))
    }
}

impl DisplayAs for GpuSemiFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let schema = self.input.schema();
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|k| format!("{}@{} IN {} [{}, {}]", schema.field(k.col).name(), k.col, k.build, k.domain.0, k.domain.1))
            .collect();
        write!(f, "GpuSemiFilterExec: keys #{}: {}, max_density={}", self.link.id(), keys.join(" OR "), self.max_density)
    }
}

struct Metrics {
    rows_in: Count,
    rows_out: Count,
    applied: Count,
    time: Time,
}

impl ExecutionPlan for GpuSemiFilterExec {
    fn name(&self) -> &str {
        "GpuSemiFilterExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        super::no_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let mut n = GpuSemiFilterExec::new(children.swap_remove(0), self.keys.clone(), self.link.clone());
        n.max_density = self.max_density;
        Ok(Arc::new(n))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let m = Metrics {
            rows_in: MetricBuilder::new(&self.metrics).counter("input_rows", partition),
            rows_out: MetricBuilder::new(&self.metrics).output_rows(partition),
            applied: MetricBuilder::new(&self.metrics).counter("prefiltered_partitions", partition),
            time: MetricBuilder::new(&self.metrics).elapsed_compute(partition),
        };
        let (input, link, me) = (self.input.clone(), self.link.clone(), GpuSemiFilterExec::new(self.input.clone(), self.keys.clone(), self.link.clone()));
        let max_density = self.max_density;
        let fut = async move {
            let me = GpuSemiFilterExec { max_density, ..me };
            let sets = link.wait(KEY_WAIT).await;
            let choice = sets.as_ref().and_then(|s| me.choose(s).map(|(k, _)| (k, s.clone())));
            let (Some((key, sets)), Some(_)) = (choice, as_gpu(&input)) else {
                return passthrough(&input, partition, ctx, m);
            };
            match filtered(input.clone(), key, sets, partition, ctx.clone(), &m).await {
                Ok(s) => Ok(s),
                Err(e) if is_gpu_error(&e) => {
                    log::warn!("GPU semi-join prefilter failed ({e}); probe rows pass unfiltered");
                    passthrough(&input, partition, ctx, m)
                }
                Err(e) => Err(e),
            }
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, futures::stream::once(fut).try_flatten())))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

type BatchStream = futures::stream::BoxStream<'static, Result<RecordBatch>>;

/// The input's rows, unfiltered, as a CPU parent reads them (a resident scan's
/// host copy; a GPU filter's downloaded output; the CPU plan after a GPU failure).
fn passthrough(input: &Arc<dyn ExecutionPlan>, partition: usize, ctx: Arc<TaskContext>, m: Metrics) -> Result<BatchStream> {
    let s = match input.execute(partition, ctx.clone()) {
        Ok(s) => s,
        Err(e) if is_gpu_error(&e) => match cpu_equivalent(input) {
            Some(p) => p?.execute(partition, ctx)?,
            None => return Err(e),
        },
        Err(e) => return Err(e),
    };
    Ok(s.inspect_ok(move |b| {
        m.rows_in.add(b.num_rows());
        m.rows_out.add(b.num_rows());
    })
    .boxed())
}

/// The input's device batches with the prefilter applied, downloaded. The first
/// batch is computed here, so a GPU failure before any row is handed on falls
/// back to [`passthrough`].
async fn filtered(input: Arc<dyn ExecutionPlan>, key: SemiKey, sets: Arc<KeySets>, partition: usize, ctx: Arc<TaskContext>, m: &Metrics) -> Result<BatchStream> {
    let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
    let gpu = as_gpu(&input).ok_or_else(|| DataFusionError::Internal("semi filter over a CPU operator".into()))?;
    let input = gpu.execute_gpu(partition, ctx.clone())?;
    let batch_size = ctx.session_config().batch_size();
    m.applied.add(1);
    let (rows_in, rows_out, time) = (m.rows_in.clone(), m.rows_out.clone(), m.time.clone());
    let mut s = input
        .then(move |b: Result<GpuBatch>| {
            let (key, dev, sets, rows_in, rows_out, time) = (key.clone(), dev.clone(), sets.clone(), rows_in.clone(), rows_out.clone(), time.clone());
            async move {
                let b = b?;
                tokio::task::spawn_blocking(move || {
                    let _t = time.timer();
                    rows_in.add(b.num_rows);
                    let out = semi_filter_batch(&dev, &key, &sets, b)?;
                    let out = out.map(|o| o.download(&dev)).transpose()?;
                    if let Some(o) = &out {
                        rows_out.add(o.num_rows());
                    }
                    Ok(out)
                })
                .await
                .map_err(blocking_err)?
            }
        })
        .filter_map(|r: Result<Option<RecordBatch>>| async move { r.transpose() })
        .flat_map(move |r: Result<RecordBatch>| {
            let parts: Vec<Result<RecordBatch>> = match r {
                Ok(b) => {
                    let n = b.num_rows();
                    (0..n).step_by(batch_size.max(1)).map(|o| Ok(b.slice(o, batch_size.min(n - o)))).collect()
                }
                Err(e) => vec![Err(e)],
            };
            futures::stream::iter(parts)
        })
        .boxed();
    // Run the first batch now: a GPU error here still falls back.
    let first = s.next().await;
    let head: Vec<Result<RecordBatch>> = match first {
        Some(Err(e)) => return Err(e),
        Some(Ok(b)) => vec![Ok(b)],
        None => vec![],
    };
    Ok(futures::stream::iter(head).chain(s).boxed())
}

/// One device batch's rows whose key is in the set (`None`: none is).
fn semi_filter_batch(dev: &GpuContext, key: &SemiKey, sets: &KeySets, b: GpuBatch) -> Result<Option<GpuBatch>> {
    if b.num_rows == 0 {
        return Ok(None);
    }
    let col = &b.columns[key.col];
    let (width, values, validity) = match &col.data {
        ColumnData::Device { storage: Storage::I32, values, validity } => (KeyWidth::I32, values, validity.as_ref()),
        ColumnData::Device { storage: Storage::U32, values, validity } => (KeyWidth::U32, values, validity.as_ref()),
        ColumnData::Device { storage: Storage::I64, values, validity } => (KeyWidth::I64, values, validity.as_ref()),
        // not a device key column: every row passes
        _ => return Ok(Some(b)),
    };
    let Some(set) = sets.device_set(dev, key.slot) else { return Ok(Some(b)) };
    let sel = member_gpu(dev, values, width, validity, b.num_rows, &set).map_err(gpu_err)?;
    let cols: Vec<&crate::gpu_batch::GpuColumn> = b.columns.iter().map(|c| c.as_ref()).collect();
    super::gpu_filter::compact_columns(dev, &sel, b.num_rows, &cols, CompactAlgo::Stable, &b.schema)
}
