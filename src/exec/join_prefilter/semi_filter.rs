//! `GpuSemiFilterExec`: the probe side of a hash join, read from a GPU island (a
//! resident scan or a GPU filter) with the rows whose join key is not among the
//! build side's keys dropped on the device before anything is downloaded (a
//! semi-join prefilter; the rule is `optimizer::join_prefilter`, the keys come
//! from the build side's [`JoinKeysExec`](crate::exec::JoinKeysExec)).
//!
//! On its first poll a partition waits for the build side's key sets, then picks
//! the key whose set lets the fewest probe rows pass (the set's density over the
//! probe key's range, from the resident table's statistics) and weighs the
//! filter's cost against what it saves on each path open to it ([`gain_ms`],
//! [`FilterPath`]) and takes the best; in mode `on` it always filters.
//! Otherwise, and when the GPU fails, the input's rows pass unfiltered: the join
//! drops them.
//!
//! Under a CPU parent over a resident scan there are two paths. On the mask
//! path the first partition to get there tests the keys of every chunk of the
//! table on the device and reads back the selections (a bit a row, one readback
//! for the whole input); every partition then filters its rows of the scan's host
//! copy with them, so no row is downloaded and the device is waited on once per
//! query, not per partition, but the gather reads most of the host copy's cache
//! lines when many rows pass. On the device path each partition compacts its
//! rows on the device and downloads the passing ones. Auto
//! (`ridgeline.gpu_semi_filter_mask`) takes the cheaper by the key set's density.
//! Under a CPU parent over a GPU filter it compacts on the device and downloads
//! its own output, so the boundary rule puts no unload above it; a GPU parent (a
//! `GpuRepartitionExec`) takes its device batches.
use super::join_keys::{JoinKeyLink, KeySets, KEY_WAIT};
use crate::exec::{as_gpu, blocking_err, cpu_equivalent};
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
use ridgeline_operators::member::{member_gpu, DeviceKeySet, KeyWidth, MemberInput};
use ridgeline_operators::GpuContext;
use std::sync::Arc;

pub use crate::tuning::join_prefilter::PROBE_NS_PER_ROW;
pub use crate::tuning::join_prefilter::FIXED_MS_PER_PARTITION;
pub use crate::tuning::join_prefilter::DOWNLOAD_BYTES_PER_MS;
pub use crate::tuning::join_prefilter::MASK_FIXED_MS;
pub use crate::tuning::join_prefilter::MASK_DEVICE_NS_PER_ROW;
pub use crate::tuning::join_prefilter::MASK_NS_PER_ROW;
pub use crate::tuning::join_prefilter::HOST_BYTES_PER_MS;

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

/// Which paths a filter over a resident scan under a CPU operator may take
/// (`ridgeline.gpu_semi_filter_mask`: auto, true or false).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaskChoice {
    /// The cheaper of the mask path and the device path, once the key set's
    /// density is known.
    Auto,
    /// Always the mask path.
    Always,
    /// Never the mask path.
    Never,
}

impl MaskChoice {
    /// Parses the setting (auto; true/on; false/off).
    pub fn parse(s: &str) -> Result<MaskChoice> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(MaskChoice::Auto),
            "true" | "on" => Ok(MaskChoice::Always),
            "false" | "off" => Ok(MaskChoice::Never),
            other => Err(DataFusionError::Configuration(format!("ridgeline.gpu_semi_filter_mask must be auto, true or false, not '{other}'"))),
        }
    }
}

impl FilterPath {
    /// The paths open to a filter over a resident scan (`over_scan`; else a GPU
    /// filter) under a GPU parent or a CPU one, by the mask setting.
    pub fn candidates(over_scan: bool, gpu_parent: bool, mask: MaskChoice) -> Vec<FilterPath> {
        match (over_scan, gpu_parent, mask) {
            (true, false, MaskChoice::Auto) => vec![FilterPath::HostMask, FilterPath::Device { downloaded_anyway: false }],
            (true, false, MaskChoice::Always) => vec![FilterPath::HostMask],
            (true, false, MaskChoice::Never) => vec![FilterPath::Device { downloaded_anyway: false }],
            _ => vec![FilterPath::Device { downloaded_anyway: true }],
        }
    }
}

/// Bytes a row of `schema` downloads (16 for a column without a device layout).
pub fn row_bytes(schema: &arrow::datatypes::Schema) -> f64 {
    schema.fields().iter().map(|f| Storage::of(f.data_type()).map_or(16, |s| s.elem_size()) as f64).sum()
}

/// Share of a column's cache lines (64 bytes) holding at least one of a
/// fraction `density` of its `elem`-byte values spread evenly: what a gather of
/// the passing rows reads of it.
fn lines_touched(density: f64, elem: f64) -> f64 {
    let per_line = (64.0 / elem.max(1.0)).max(1.0);
    1.0 - (1.0 - density.clamp(0.0, 1.0)).powf(per_line)
}

/// What filtering `rows` probe rows of `row_bytes` bytes each (in columns of
/// `elem_bytes` on average) down to a fraction `density` gains on `threads` cores
/// with `partitions` partitions by `path`, in ms of wall time (negative: it
/// loses). Over a resident scan the device path downloads every passing row
/// (its host copy would have been read in place); the mask path downloads none
/// but gathers the passing rows from the host copy, reading about every cache
/// line that holds one, at the host's memory bandwidth.
pub fn gain_ms(rows: f64, density: f64, row_bytes: f64, threads: usize, partitions: usize, path: FilterPath) -> f64 {
    let per_row_download = row_bytes / DOWNLOAD_BYTES_PER_MS;
    let threads = threads.max(1) as f64;
    let probe = PROBE_NS_PER_ROW * 1e-6 / threads;
    match path {
        FilterPath::HostMask => {
            let elem = (row_bytes / 4.0).clamp(4.0, 16.0);
            let read = rows * row_bytes * lines_touched(density, elem);
            let written = rows * density * row_bytes;
            let host = rows * MASK_NS_PER_ROW * 1e-6 / threads + (read + written) / HOST_BYTES_PER_MS;
            (1.0 - density) * rows * probe - (MASK_FIXED_MS + rows * MASK_DEVICE_NS_PER_ROW * 1e-6 + host)
        }
        FilterPath::Device { downloaded_anyway } => {
            let saved = (1.0 - density) * rows * (probe + if downloaded_anyway { per_row_download } else { 0.0 });
            let cost = FIXED_MS_PER_PARTITION * partitions as f64 + if downloaded_anyway { 0.0 } else { density * rows * per_row_download };
            saved - cost
        }
    }
}

/// Of `paths`, the one gaining most, with its gain in ms (see [`gain_ms`]).
pub fn best_path(rows: f64, density: f64, row_bytes: f64, threads: usize, partitions: usize, paths: &[FilterPath]) -> Option<(FilterPath, f64)> {
    paths
        .iter()
        .map(|&p| (p, gain_ms(rows, density, row_bytes, threads, partitions, p)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
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
    /// and by which of `paths` (`None`: pass every row).
    fn decision(&self, ctx: &Arc<TaskContext>, paths: Vec<FilterPath>) -> impl std::future::Future<Output = Option<(SemiKey, Arc<KeySets>, FilterPath)>> + Send + 'static {
        let (keys, link, rows) = (self.keys.clone(), self.link.clone(), self.rows as f64);
        let opts = crate::config::RidgelineOptions::from_config(ctx.session_config().options());
        let forced = opts.mode().ok() == Some(ridgeline_operators::GpuMode::On);
        let threads = ctx.session_config().target_partitions();
        let partitions = self.input.properties().output_partitioning().partition_count();
        let row_bytes = row_bytes(&self.schema());
        let id = self.link.id();
        async move {
            let sets = link.wait(KEY_WAIT).await?;
            let (key, d) = choose(&keys, &sets)?;
            let (path, gain) = best_path(rows, d, row_bytes, threads, partitions, &paths)?;
            if log::log_enabled!(log::Level::Debug) {
                let all: Vec<String> = paths.iter().map(|&p| format!("{p:?} {:.2} ms", gain_ms(rows, d, row_bytes, threads, partitions, p))).collect();
                log::debug!("semi filter #{id}: {rows} rows of {row_bytes} bytes, {partitions} partitions, key {} density {d:.4}: gains {}", key.build, all.join(", "));
            }
            (forced || gain > 0.0).then_some((key, sets, path))
        }
    }
}

impl crate::exec::GpuExec for GpuSemiFilterExec {
    fn execute_gpu(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<crate::exec::GpuBatchStream> {
        let input = self.input.clone();
        let decide = self.decision(&ctx, FilterPath::candidates(self.input.downcast_ref::<crate::exec::GpuScanExec>().is_some(), true, MaskChoice::Never));
        let m = self.metrics_for(partition);
        let fut = async move {
            let gpu = as_gpu(&input).ok_or_else(|| DataFusionError::Internal("semi filter over a CPU operator".into()))?;
            let choice = decide.await;
            let s = gpu.execute_gpu(partition, ctx)?;
            let Some((key, sets, _)) = choice else {
                return Ok::<crate::exec::GpuBatchStream, DataFusionError>(
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
        crate::exec::no_expressions(f)
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
        let over_scan = self.input.downcast_ref::<crate::exec::GpuScanExec>().is_some();
        let choice = MaskChoice::parse(&crate::config::RidgelineOptions::from_config(ctx.session_config().options()).gpu_semi_filter_mask)?;
        let decide = self.decision(&ctx, FilterPath::candidates(over_scan, false, choice));
        let cache = self.masks.clone();
        let fut = async move {
            let (Some((key, sets, path)), Some(_)) = (decide.await, as_gpu(&input)) else {
                return passthrough(&input, partition, ctx, m);
            };
            if let Some(scan) = input.downcast_ref::<crate::exec::GpuScanExec>().filter(|_| path == FilterPath::HostMask) {
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
                    // The failed attempt may have read part of the input: read it
                    // again from fresh state, on the CPU.
                    warn_unfiltered(&e);
                    let plan = crate::exec::replay_plan(&input, e)?;
                    Ok(unfiltered(plan.execute(partition, crate::exec::replay_context(&ctx))?, m))
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
    Ok(unfiltered(s, m))
}

/// `s` passed on unfiltered, its rows counted in and out.
fn unfiltered(s: SendableRecordBatchStream, m: Metrics) -> BatchStream {
    s.inspect_ok(move |b| {
        m.rows_in.add(b.num_rows());
        m.rows_out.add(b.num_rows());
    })
    .boxed()
}

/// The input's device batches with the prefilter applied, downloaded. The first
/// batch is computed here, so a GPU failure before any row is handed on falls
/// back to [`passthrough`].
async fn filtered(input: Arc<dyn ExecutionPlan>, key: SemiKey, sets: Arc<KeySets>, partition: usize, ctx: Arc<TaskContext>, m: &Metrics) -> Result<BatchStream> {
    let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
    let gpu = as_gpu(&input).ok_or_else(|| DataFusionError::Internal("semi filter over a CPU operator".into()))?;
    let dset = device_set(&dev, sets, key.slot).await?;
    let batches = gpu.execute_gpu(partition, ctx.clone())?;
    let mut s = crate::exec::gpu_unload::download_stream(input.schema(), apply(batches, key, dev, dset, m), ctx.session_config().batch_size())?;
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
async fn scan_masks(scan: &crate::exec::GpuScanExec, key: &SemiKey, sets: Arc<KeySets>, time: Time) -> Result<Option<Masks>> {
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
        let mut computed = member_gpu(&dev, &inputs.iter().flatten().copied().collect::<Vec<_>>(), &set).map_err(gpu_err)?.into_iter();
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
        if log::log_enabled!(target: "ridgeline::profile::semi_filter", log::Level::Debug) {
            let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
            log::debug!(target: "ridgeline::profile::semi_filter",
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
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    crate::exec::warn_fallback(&WARNED, "the semi-join prefilter passes every row and the join", e);
}

/// `s`'s batches with the prefilter applied on the device; batches left empty
/// are dropped.
fn apply(s: crate::exec::GpuBatchStream, key: SemiKey, dev: Arc<GpuContext>, dset: Arc<DeviceKeySet>, m: &Metrics) -> crate::exec::GpuBatchStream {
    m.applied.add(1);
    let (rows_in, rows_out, time) = (m.rows_in.clone(), m.rows_out.clone(), m.time.clone());
    s.then(move |b: Result<GpuBatch>| {
        let (key, dev, dset, rows_in, rows_out, time) = (key.clone(), dev.clone(), dset.clone(), rows_in.clone(), rows_out.clone(), time.clone());
        async move {
            let b = b?;
            tokio::task::spawn_blocking(move || {
                let _t = time.timer();
                rows_in.add(b.num_rows);
                // A batch the GPU cannot test passes unfiltered: the join drops
                // the rows without a match.
                let out = match semi_filter_batch(&dev, &key, &dset, b.clone()) {
                    Ok(o) => o,
                    Err(e) if is_gpu_error(&e) => {
                        warn_unfiltered(&e);
                        Some(b)
                    }
                    Err(e) => return Err(e),
                };
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
    let sel = member_gpu(dev, &[MemberInput { keys: values, width, validity, rows: b.num_rows }], set).map_err(gpu_err)?.pop().expect("one input, one selection");
    let cols: Vec<&crate::gpu_batch::GpuColumn> = b.columns.iter().map(|c| c.as_ref()).collect();
    crate::exec::gpu_filter::compact_columns(dev, &sel, b.num_rows, &cols, CompactAlgo::Stable, &b.schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEVICE: FilterPath = FilterPath::Device { downloaded_anyway: false };

    #[test]
    fn mask_setting_parses_and_rejects_other_words() {
        assert_eq!(MaskChoice::parse("auto").unwrap(), MaskChoice::Auto);
        assert_eq!(MaskChoice::parse(" TRUE ").unwrap(), MaskChoice::Always);
        assert_eq!(MaskChoice::parse("on").unwrap(), MaskChoice::Always);
        assert_eq!(MaskChoice::parse("False").unwrap(), MaskChoice::Never);
        assert_eq!(MaskChoice::parse("off").unwrap(), MaskChoice::Never);
        let err = MaskChoice::parse("sometimes").unwrap_err().to_string();
        assert!(err.contains("must be auto, true or false, not 'sometimes'"), "{err}");
        assert!(MaskChoice::parse("").is_err());
    }

    #[test]
    fn candidates_follow_the_setting_only_over_a_scan_under_a_cpu_parent() {
        assert_eq!(FilterPath::candidates(true, false, MaskChoice::Auto), vec![FilterPath::HostMask, DEVICE]);
        assert_eq!(FilterPath::candidates(true, false, MaskChoice::Always), vec![FilterPath::HostMask]);
        assert_eq!(FilterPath::candidates(true, false, MaskChoice::Never), vec![DEVICE]);
        for mask in [MaskChoice::Auto, MaskChoice::Always, MaskChoice::Never] {
            // under a GPU parent, or over a GPU filter, the rows are on the device anyway
            assert_eq!(FilterPath::candidates(true, true, mask), vec![FilterPath::Device { downloaded_anyway: true }]);
            assert_eq!(FilterPath::candidates(false, false, mask), vec![FilterPath::Device { downloaded_anyway: true }]);
        }
    }

    #[test]
    fn lines_touched_grows_from_none_to_all() {
        assert_eq!(lines_touched(0.0, 8.0), 0.0);
        assert!((lines_touched(1.0, 8.0) - 1.0).abs() < 1e-12);
        // one value a line: the share of lines is the density
        assert!((lines_touched(0.3, 64.0) - 0.3).abs() < 1e-12);
        // eight 8-byte values a line: 1 - 0.8^8
        assert!((lines_touched(0.2, 8.0) - (1.0 - 0.8f64.powi(8))).abs() < 1e-12);
        let mut last = 0.0;
        for i in 1..=20 {
            let t = lines_touched(i as f64 / 20.0, 12.0);
            assert!(t > last && t <= 1.0);
            last = t;
        }
        // out-of-range inputs are clamped, not NaN
        assert_eq!(lines_touched(-1.0, 0.0), 0.0);
        assert!((lines_touched(2.0, 4.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn auto_picks_the_device_path_for_a_dense_set_over_wide_rows() {
        // TPC-H Q5 at SF 10 on 16 cores: 60M lineitem rows of 48 bytes, a fifth passing.
        // The mask path's gather reads nearly every cache line of the host copy.
        let paths = FilterPath::candidates(true, false, MaskChoice::Auto);
        let (path, gain) = best_path(60e6, 0.2, 48.0, 16, 16, &paths).unwrap();
        assert_eq!(path, DEVICE);
        assert!(gain > 0.0);
        assert!(gain_ms(60e6, 0.2, 48.0, 16, 16, FilterPath::HostMask) < gain);
    }

    #[test]
    fn auto_picks_the_mask_path_for_a_sparse_set() {
        // 15M orders rows, 0.5% passing, and 8M partsupp rows, 4% passing (SF 10, 16 cores):
        // the device path's fixed cost per partition exceeds what it saves.
        let paths = FilterPath::candidates(true, false, MaskChoice::Auto);
        for (rows, d) in [(15e6, 0.0049), (8e6, 0.04)] {
            assert!(gain_ms(rows, d, 24.0, 16, 16, DEVICE) < 0.0);
            let (path, gain) = best_path(rows, d, 24.0, 16, 16, &paths).unwrap();
            assert_eq!(path, FilterPath::HostMask);
            assert!(gain > 0.0);
        }
    }

    #[test]
    fn no_path_pays_when_every_row_passes_or_the_input_is_small() {
        let paths = FilterPath::candidates(true, false, MaskChoice::Auto);
        for (rows, d) in [(60e6, 1.0), (1000.0, 0.01), (0.0, 0.5)] {
            let (_, gain) = best_path(rows, d, 32.0, 16, 16, &paths).unwrap();
            assert!(gain <= 0.0, "{rows} rows at density {d} gain {gain}");
        }
        assert!(best_path(1e6, 0.1, 32.0, 2, 2, &[]).is_none());
    }

    #[test]
    fn gains_fall_as_density_rises() {
        for path in [FilterPath::HostMask, DEVICE, FilterPath::Device { downloaded_anyway: true }] {
            let mut last = f64::INFINITY;
            for i in 0..=10 {
                let g = gain_ms(20e6, i as f64 / 10.0, 40.0, 8, 8, path);
                assert!(g < last, "{path:?} at {i}: {g} after {last}");
                last = g;
            }
        }
    }
}
