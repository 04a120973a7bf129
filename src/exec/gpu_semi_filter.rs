//! `GpuSemiFilterExec`: the probe side of a hash join, read from a GPU island (a
//! resident scan or a GPU filter) with the rows whose join key is not among the
//! build side's keys dropped on the device before anything is downloaded (a
//! semi-join prefilter; the rule is `optimizer::join_prefilter`, the keys come
//! from the build side's [`JoinKeysExec`](super::JoinKeysExec)).
//!
//! On its first poll a partition waits for the build side's key sets, then picks
//! the key whose set lets the fewest probe rows pass (the set's density over the
//! probe key's range, from the resident table's statistics) and weighs the
//! filter's cost against what it saves ([`worth_it`]); in mode `on` it always
//! filters. Otherwise, and when the GPU fails, the input's rows pass unfiltered:
//! the join drops them.
//!
//! Under a CPU parent over a resident scan, the first partition to get there
//! tests the keys of every chunk of the table on the device and reads back the
//! selections (a bit a row, one readback for the whole input); every partition
//! then filters its rows of the scan's host copy with them, so no row is
//! downloaded and the device is waited on once per query, not per partition.
//! Under a CPU parent over a GPU filter it compacts on the device and downloads
//! its own output, so the boundary rule puts no unload above it; a GPU parent (a
//! `GpuRepartitionExec`) takes its device batches.
use super::join_keys::{JoinKeyLink, KeySets, KEY_WAIT};
use super::{as_gpu, blocking_err, cpu_equivalent};
use crate::gpu_batch::{gpu_err, is_gpu_error, ColumnData, GpuBatch, Storage};
use arrow::array::RecordBatch;
use arrow::buffer::BooleanBuffer;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use ridgeline_operators::compact::CompactAlgo;
use ridgeline_operators::member::{member_gpu, member_gpu_many, DeviceKeySet, KeyWidth, MemberInput};
use ridgeline_operators::GpuContext;
use std::sync::Arc;

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
/// CPU time of the mask path per byte of a passing row (gathering it from the
/// host copy), ns on one core.
pub const MASK_NS_PER_PASSING_BYTE: f64 = 0.15;

/// How the filter's rows reach its parent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterPath {
    /// A resident scan under a CPU parent: every row's selection computed in one
    /// device pass and read back, the host copy filtered with it.
    HostMask,
    /// Compacted on the device per partition and downloaded or handed to a GPU
    /// parent. `downloaded_anyway`: the rows reach the CPU either way (a GPU
    /// filter's output, a GPU parent's), so the filter saves downloads too.
    Device { downloaded_anyway: bool },
}

impl FilterPath {
    /// The path of a filter over a resident scan (`over_scan`; else a GPU filter)
    /// under a GPU parent or a CPU one, with the mask path allowed or not
    /// (`ridgeline.gpu_semi_filter_mask`).
    pub fn of(over_scan: bool, gpu_parent: bool, mask: bool) -> FilterPath {
        match (over_scan, gpu_parent) {
            (true, false) if mask => FilterPath::HostMask,
            (true, false) => FilterPath::Device { downloaded_anyway: false },
            _ => FilterPath::Device { downloaded_anyway: true },
        }
    }
}

/// Bytes a row of `schema` downloads (16 for a column without a device layout).
pub fn row_bytes(schema: &arrow::datatypes::Schema) -> f64 {
    schema.fields().iter().map(|f| Storage::of(f.data_type()).map_or(16, |s| s.elem_size()) as f64).sum()
}

/// Whether filtering `rows` probe rows of `row_bytes` bytes each down to a
/// fraction `density` pays on `threads` cores with `partitions` partitions, by
/// `path`. Over a resident scan the device path downloads every passing row
/// (its host copy would have been read in place); the mask path downloads none.
pub fn worth_it(rows: f64, density: f64, row_bytes: f64, threads: usize, partitions: usize, path: FilterPath) -> bool {
    let per_row_download = row_bytes / DOWNLOAD_BYTES_PER_MS;
    let threads = threads.max(1) as f64;
    let probe = PROBE_NS_PER_ROW * 1e-6 / threads;
    match path {
        FilterPath::HostMask => {
            let host = rows * (MASK_NS_PER_ROW + density * row_bytes * MASK_NS_PER_PASSING_BYTE) * 1e-6 / threads;
            (1.0 - density) * rows * probe > MASK_FIXED_MS + rows * MASK_DEVICE_NS_PER_ROW * 1e-6 + host
        }
        FilterPath::Device { downloaded_anyway } => {
            let saved = (1.0 - density) * rows * (probe + if downloaded_anyway { per_row_download } else { 0.0 });
            let cost = FIXED_MS_PER_PARTITION * partitions as f64 + if downloaded_anyway { 0.0 } else { density * rows * per_row_download };
            saved > cost
        }
    }
}

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

impl SemiKey {
    /// Values in the probe key's range (at least 1).
    pub fn span(&self) -> f64 {
        (self.domain.1 as i128 - self.domain.0 as i128 + 1).max(1) as f64
    }
}

/// A semi-join prefilter on the GPU.
#[derive(Debug)]
pub struct GpuSemiFilterExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<SemiKey>,
    link: Arc<JoinKeyLink>,
    /// The input's estimated rows (all partitions).
    rows: usize,
    metrics: ExecutionPlanMetricsSet,
    masks: Arc<MaskCache>,
}

/// Per-chunk selections of a resident scan's rows (`None`: every row passes).
type Masks = Arc<Vec<Option<BooleanBuffer>>>;

/// The mask path's selections of the latest execution, computed once for all
/// partitions: keyed by the build side's key sets (a new execution publishes new
/// ones) and the key tested. The cell holds `None` when the GPU failed.
#[derive(Default)]
struct MaskCache(std::sync::Mutex<Option<(Arc<KeySets>, usize, Arc<tokio::sync::OnceCell<Option<Masks>>>)>>);

impl std::fmt::Debug for MaskCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MaskCache")
    }
}

impl MaskCache {
    fn cell(&self, sets: &Arc<KeySets>, slot: usize) -> Arc<tokio::sync::OnceCell<Option<Masks>>> {
        let mut g = self.0.lock().unwrap();
        match &*g {
            Some((s, k, c)) if Arc::ptr_eq(s, sets) && *k == slot => c.clone(),
            _ => {
                let c = Arc::new(tokio::sync::OnceCell::new());
                *g = Some((sets.clone(), slot, c.clone()));
                c
            }
        }
    }
}

impl GpuSemiFilterExec {
    /// Filters `input` (a GPU island of about `rows` rows) by one of `keys`: at
    /// execution, the one whose key set in `link` lets the fewest rows pass.
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<SemiKey>, link: Arc<JoinKeyLink>, rows: usize) -> Self {
        GpuSemiFilterExec { input, keys, link, rows, metrics: ExecutionPlanMetricsSet::new(), masks: Arc::default() }
    }
    /// The input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
    /// The keys it may test.
    pub fn keys(&self) -> &[SemiKey] {
        &self.keys
    }
}

/// Of `keys`, the one whose set lets the fewest rows pass, and that fraction.
fn choose(keys: &[SemiKey], sets: &KeySets) -> Option<(SemiKey, f64)> {
    keys.iter()
        .filter_map(|k| {
            let set = sets.sets.get(k.slot)?.as_ref()?;
            Some((k.clone(), set.count_in(k.domain.0, k.domain.1) as f64 / k.span()))
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
}

impl DisplayAs for GpuSemiFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let schema = self.input.schema();
        let keys: Vec<String> = self
            .keys
            .iter()
            .map(|k| format!("{}@{} IN {} [{}, {}]", schema.field(k.col).name(), k.col, k.build, k.domain.0, k.domain.1))
            .collect();
        write!(f, "GpuSemiFilterExec: keys #{}: {}, rows={}", self.link.id(), keys.join(" OR "), self.rows)
    }
}

impl GpuSemiFilterExec {
    fn metrics_for(&self, partition: usize) -> Metrics {
        Metrics {
            rows_in: MetricBuilder::new(&self.metrics).counter("input_rows", partition),
            rows_out: MetricBuilder::new(&self.metrics).output_rows(partition),
            applied: MetricBuilder::new(&self.metrics).counter("prefiltered_partitions", partition),
            time: MetricBuilder::new(&self.metrics).elapsed_compute(partition),
        }
    }

    /// The future deciding, once the build side's keys are in, which key to test
    /// (`None`: pass every row), for filtering by `path`.
    fn decision(&self, ctx: &Arc<TaskContext>, path: FilterPath) -> impl std::future::Future<Output = Option<(SemiKey, Arc<KeySets>)>> + Send + 'static {
        let (keys, link, rows) = (self.keys.clone(), self.link.clone(), self.rows as f64);
        let opts = crate::config::RidgelineOptions::from_config(ctx.session_config().options());
        let forced = opts.mode().ok() == Some(ridgeline_operators::GpuMode::On);
        let threads = ctx.session_config().target_partitions();
        let partitions = self.input.properties().output_partitioning().partition_count();
        let row_bytes = row_bytes(&self.schema());
        async move {
            let sets = link.wait(KEY_WAIT).await?;
            let (key, d) = choose(&keys, &sets)?;
            (forced || worth_it(rows, d, row_bytes, threads, partitions, path)).then_some((key, sets))
        }
    }
}

impl super::GpuExec for GpuSemiFilterExec {
    fn execute_gpu(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<super::GpuBatchStream> {
        let input = self.input.clone();
        let decide = self.decision(&ctx, FilterPath::of(self.input.downcast_ref::<super::GpuScanExec>().is_some(), true, false));
        let m = self.metrics_for(partition);
        let fut = async move {
            let gpu = as_gpu(&input).ok_or_else(|| DataFusionError::Internal("semi filter over a CPU operator".into()))?;
            let choice = decide.await;
            let s = gpu.execute_gpu(partition, ctx)?;
            let Some((key, sets)) = choice else {
                return Ok::<super::GpuBatchStream, DataFusionError>(
                    s.inspect_ok(move |b| {
                        m.rows_in.add(b.num_rows);
                        m.rows_out.add(b.num_rows);
                    })
                    .boxed(),
                );
            };
            let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
            let dset = device_set(&dev, sets, key.slot).await?;
            Ok(apply(s, key, dev, dset, &m))
        };
        Ok(futures::stream::once(fut).try_flatten().boxed())
    }
    fn cpu_plan(&self) -> Option<Result<Arc<dyn ExecutionPlan>>> {
        // Every row passes on the CPU: the join drops the ones without a match.
        cpu_equivalent(&self.input)
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
        Ok(Arc::new(GpuSemiFilterExec::new(children.swap_remove(0), self.keys.clone(), self.link.clone(), self.rows)))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let schema = self.schema();
        let m = self.metrics_for(partition);
        let input = self.input.clone();
        let over_scan = self.input.downcast_ref::<super::GpuScanExec>().is_some();
        let path = FilterPath::of(over_scan, false, crate::config::RidgelineOptions::from_config(ctx.session_config().options()).gpu_semi_filter_mask);
        let mask = path == FilterPath::HostMask;
        let decide = self.decision(&ctx, path);
        let cache = self.masks.clone();
        let fut = async move {
            let (Some((key, sets)), Some(_)) = (decide.await, as_gpu(&input)) else {
                return passthrough(&input, partition, ctx, m);
            };
            if let Some(scan) = input.downcast_ref::<super::GpuScanExec>().filter(|_| mask) {
                let cell = cache.cell(&sets, key.slot);
                let masks = cell.get_or_try_init(|| scan_masks(scan, &key, sets, m.time.clone())).await?.clone();
                let Some(masks) = masks else { return passthrough(&input, partition, ctx, m) };
                m.applied.add(1);
                m.rows_in.add(scan.partition_rows(partition));
                let (rows_out, time) = (m.rows_out.clone(), m.time.clone());
                let mut s = scan.execute_masked(partition, ctx, Some(&masks))?;
                // The host copy is filtered as its batches are polled: time the polls.
                let timed = futures::stream::poll_fn(move |cx| {
                    let _t = time.timer();
                    s.as_mut().poll_next(cx)
                });
                return Ok(timed.inspect_ok(move |b| rows_out.add(b.num_rows())).boxed());
            }
            match filtered(input.clone(), key, sets, partition, ctx.clone(), &m).await {
                Ok(s) => Ok(s),
                Err(e) if is_gpu_error(&e) => {
                    warn_unfiltered(&e);
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
    let dset = device_set(&dev, sets, key.slot).await?;
    let batches = gpu.execute_gpu(partition, ctx.clone())?;
    let mut s = super::gpu_unload::download_stream(input.schema(), apply(batches, key, dev, dset, m), ctx.session_config().batch_size())?;
    // Run the first batch now: a GPU error here still falls back.
    let first = s.next().await;
    let head: Vec<Result<RecordBatch>> = match first {
        Some(Err(e)) => return Err(e),
        Some(Ok(b)) => vec![Ok(b)],
        None => vec![],
    };
    Ok(futures::stream::iter(head).chain(s).boxed())
}

/// The mask path's selections: every chunk of `scan`'s table tested on the
/// device (one membership kernel per chunk, the key set uploaded once), all read
/// back in one transfer. `None` (with a warning) when the GPU fails: the rows
/// then pass unfiltered.
async fn scan_masks(scan: &super::GpuScanExec, key: &SemiKey, sets: Arc<KeySets>, time: Time) -> Result<Option<Masks>> {
    let data = scan.data().clone();
    let col = *scan.table_columns().get(key.col).ok_or_else(|| DataFusionError::Internal("semi filter key outside the scan".into()))?;
    let slot = key.slot;
    let r = tokio::task::spawn_blocking(move || -> Result<Masks> {
        let _t = time.timer();
        let t0 = std::time::Instant::now();
        let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
        let set = key_set(&dev, &sets, slot)?;
        let t_set = t0.elapsed();
        // Every chunk's kernel in one submission.
        let inputs: Vec<Option<MemberInput<'_>>> = data
            .chunks
            .iter()
            .map(|c| key_column(&c.columns[col].data).map(|(width, keys, validity)| MemberInput { keys, width, validity, rows: c.num_rows }))
            .collect();
        let mut computed = member_gpu_many(&dev, &inputs.iter().flatten().copied().collect::<Vec<_>>(), &set).map_err(gpu_err)?.into_iter();
        let sels: Vec<Option<(ridgeline_operators::DeviceArray, usize)>> = inputs.iter().map(|i| i.as_ref().and_then(|i| Some((computed.next()?, i.rows)))).collect();
        let t_member = t0.elapsed();
        // One readback: the selections one after another, each from a word offset.
        let mut extents = Vec::new();
        let mut offsets = Vec::with_capacity(sels.len());
        let mut total = 0u64;
        for (a, rows) in sels.iter().flatten() {
            offsets.push(total);
            extents.extend(a.extents().into_iter().map(|mut e| {
                e.stream_offset += total;
                e
            }));
            total += (rows.div_ceil(32) * 4) as u64;
        }
        let mut words = vec![0u32; (total / 4) as usize];
        if total > 0 {
            dev.download_stream(&extents, bytemuck::cast_slice_mut(&mut words)).map_err(gpu_err)?;
        }
        if std::env::var_os("RIDGELINE_SEMI_PROFILE").is_some() {
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            eprintln!(
                "semi filter masks: {} chunks, {} rows: key set {:.3} ms, kernels {:.3} ms, readback {:.3} ms",
                sels.len(),
                data.table.num_rows,
                ms(t_set),
                ms(t_member - t_set),
                ms(t0.elapsed() - t_member)
            );
        }
        let buf = arrow::buffer::Buffer::from_vec(words);
        let mut offsets = offsets.into_iter();
        Ok(Arc::new(
            sels.iter()
                .map(|s| {
                    let (_, rows) = s.as_ref()?;
                    Some(BooleanBuffer::new(buf.slice(offsets.next()? as usize), 0, *rows))
                })
                .collect(),
        ))
    })
    .await
    .map_err(blocking_err)?;
    match r {
        Ok(m) => Ok(Some(m)),
        Err(e) if is_gpu_error(&e) => {
            warn_unfiltered(&e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A device key column's width, values and validity (`None`: not a device key
/// column, every row passes).
fn key_column(data: &ColumnData) -> Option<(KeyWidth, &ridgeline_operators::DeviceArray, Option<&ridgeline_operators::DeviceArray>)> {
    match data {
        ColumnData::Device { storage: Storage::I32, values, validity } => Some((KeyWidth::I32, values, validity.as_ref())),
        ColumnData::Device { storage: Storage::U32, values, validity } => Some((KeyWidth::U32, values, validity.as_ref())),
        ColumnData::Device { storage: Storage::I64, values, validity } => Some((KeyWidth::I64, values, validity.as_ref())),
        _ => None,
    }
}

/// Set `slot` of `sets` on the device (uploaded by the first partition that asks).
async fn device_set(dev: &Arc<GpuContext>, sets: Arc<KeySets>, slot: usize) -> Result<Arc<DeviceKeySet>> {
    let d = dev.clone();
    tokio::task::spawn_blocking(move || key_set(&d, &sets, slot)).await.map_err(blocking_err)?
}

/// Set `slot` of `sets` on the device, from a blocking thread.
fn key_set(dev: &GpuContext, sets: &KeySets, slot: usize) -> Result<Arc<DeviceKeySet>> {
    let set = sets.device_set(dev, slot).map_err(gpu_err)?;
    set.ok_or_else(|| DataFusionError::Internal("semi filter without a key set".into()))
}

/// The warning of a prefilter whose GPU work failed: its rows pass unfiltered.
fn warn_unfiltered(e: &DataFusionError) {
    log::warn!("GPU semi-join prefilter failed ({e}); probe rows pass unfiltered");
    eprintln!("warning: GPU failed, the semi-join prefilter passes every row instead: {e}");
}

/// `s`'s batches with the prefilter applied on the device; batches left empty
/// are dropped.
fn apply(s: super::GpuBatchStream, key: SemiKey, dev: Arc<GpuContext>, dset: Arc<DeviceKeySet>, m: &Metrics) -> super::GpuBatchStream {
    m.applied.add(1);
    let (rows_in, rows_out, time) = (m.rows_in.clone(), m.rows_out.clone(), m.time.clone());
    s.then(move |b: Result<GpuBatch>| {
        let (key, dev, dset, rows_in, rows_out, time) = (key.clone(), dev.clone(), dset.clone(), rows_in.clone(), rows_out.clone(), time.clone());
        async move {
            let b = b?;
            tokio::task::spawn_blocking(move || {
                let _t = time.timer();
                rows_in.add(b.num_rows);
                let out = semi_filter_batch(&dev, &key, &dset, b)?;
                rows_out.add(out.as_ref().map_or(0, |o| o.num_rows));
                Ok(out)
            })
            .await
            .map_err(blocking_err)?
        }
    })
    .filter_map(|r: Result<Option<GpuBatch>>| async move { r.transpose() })
    .boxed()
}

/// One device batch's rows whose key is in the set (`None`: none is).
fn semi_filter_batch(dev: &GpuContext, key: &SemiKey, set: &DeviceKeySet, b: GpuBatch) -> Result<Option<GpuBatch>> {
    if b.num_rows == 0 {
        return Ok(None);
    }
    // not a device key column: every row passes
    let Some((width, values, validity)) = key_column(&b.columns[key.col].data) else { return Ok(Some(b)) };
    let sel = member_gpu(dev, values, width, validity, b.num_rows, set).map_err(gpu_err)?;
    let cols: Vec<&crate::gpu_batch::GpuColumn> = b.columns.iter().map(|c| c.as_ref()).collect();
    super::gpu_filter::compact_columns(dev, &sel, b.num_rows, &cols, CompactAlgo::Stable, &b.schema)
}
