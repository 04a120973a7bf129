//! `GpuHashJoinExec`: DataFusion's `HashJoinExec` with the hash table and the
//! probe on the GPU (`ridgeline_operators::join`).
//!
//! The build side (the join's left input: every partition of it in `CollectLeft`
//! mode, partition `p` in `Partitioned` mode) is gathered in host memory, its key
//! column uploaded and bucketed on the device once. Probe batches (the right
//! input) are gathered to [`PROBE_MIN_ROWS`] rows, their key column uploaded and
//! probed: the device returns the (probe row, build row) pairs of equal keys,
//! probe-major, or for semi and anti joins without a residual filter one matched
//! bit per probe row. The host then applies the residual filter to the pairs
//! (over only the columns it reads), keeps the rows the join type asks for and
//! gathers the output columns (`take`), so strings and every other type join as
//! DataFusion does. Build rows no probe row matched (left, full, left semi and
//! left anti joins) are emitted when the last probe partition finishes.
//!
//! Keys: equi-keys of the same integer, date, timestamp or decimal (p <= 18)
//! type on both sides (`ridgeline_operators::join` compares them bit for bit);
//! NULL keys never match. Several key columns become one 64-bit key: packed
//! (`(k_i - min_i) * mult_i` over the build side's ranges) when those ranges
//! multiply to less than 2^63, else hashed, and then every pair is checked on
//! each key column on the host. The output is in probe order, as DataFusion's.
//!
//! A GPU that fails (lost, out of memory, a build side over one binding, a probe
//! row with more matches than one binding holds) sends the join to the CPU path
//! of the same primitives ([`HostJoinTable`]), with one warning: the answer is
//! the same, and the work already done is kept (each probe batch is answered
//! whole by one path).
use crate::config::{device_for, RidgelineOptions};
use crate::gpu_batch::{is_gpu_error, upload_array, validity_words, ColumnData, GpuBatch, GpuColumn, KeyWords, Storage};
use arrow::array::{new_null_array, Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::compute::{concat_batches, take};
use datafusion::common::{JoinSide, JoinType, NullEquality};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::joins::utils::JoinFilter;
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::metrics::{Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet, Time};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties};
use futures::StreamExt;
use ridgeline_operators::join::{build_table_gpu, probe_gpu, probe_matched_gpu, DeviceJoinTable, HostJoinTable, JoinOptions, KeyColumn, KeyWidth, Keys};
use ridgeline_operators::{GpuContext, GpuError};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

pub use crate::tuning::join::{OUTPUT_ROWS, PROBE_MIN_ROWS};

mod keys;
mod output;
mod stream;
use keys::*;
use output::*;
use stream::*;

/// The key width of a join key type, or `None` when the GPU join does not take it.
pub fn key_width(dt: &arrow::datatypes::DataType) -> Option<KeyWidth> {
    match Storage::of(dt)? {
        Storage::I32 => Some(KeyWidth::I32),
        Storage::U32 => Some(KeyWidth::U32),
        Storage::I64 => Some(KeyWidth::I64),
        _ => None,
    }
}

/// Most key columns a GPU join takes (several are packed or hashed into one 64-bit key).
pub const MAX_KEY_COLUMNS: usize = 8;

/// Join types the operator takes.
pub fn supported_join_type(t: JoinType) -> bool {
    matches!(
        t,
        JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full | JoinType::LeftSemi | JoinType::LeftAnti | JoinType::RightSemi | JoinType::RightAnti
    )
}

/// Why `join` cannot run as a [`GpuHashJoinExec`], or `None` when it can.
pub fn unsupported_reason(join: &HashJoinExec) -> Option<String> {
    if !supported_join_type(*join.join_type()) {
        return Some(format!("join type {}", join.join_type()));
    }
    if !matches!(join.partition_mode(), PartitionMode::CollectLeft | PartitionMode::Partitioned) {
        return Some(format!("partition mode {:?}", join.partition_mode()));
    }
    if join.null_equality() != NullEquality::NullEqualsNothing || join.null_aware {
        return Some("NULL-equal or NULL-aware keys".into());
    }
    if join.on().is_empty() || join.on().len() > MAX_KEY_COLUMNS {
        return Some(format!("{} key columns", join.on().len()));
    }
    for (l, r) in join.on() {
        let (Some(l), Some(r)) = (l.downcast_ref::<Column>(), r.downcast_ref::<Column>()) else {
            return Some("computed join keys".into());
        };
        let lt = join.left().schema().field(l.index()).data_type().clone();
        let rt = join.right().schema().field(r.index()).data_type().clone();
        if lt != rt {
            return Some(format!("keys of types {lt} and {rt}"));
        }
        if key_width(&lt).is_none() {
            return Some(format!("keys of type {lt}"));
        }
    }
    None
}

/// A hash join on the GPU (see the module documentation). A clone shares the
/// original's build side, metrics and warning flag.
#[derive(Debug, Clone)]
pub struct GpuHashJoinExec {
    join: Arc<HashJoinExec>,
    /// (left, right) column of each key.
    keys: Vec<(usize, usize)>,
    /// The device width of the one key, or of the packed or hashed key (I64) of several.
    width: KeyWidth,
    /// The build side of a `CollectLeft` join, shared by every probe partition.
    shared: Arc<tokio::sync::OnceCell<Arc<Build>>>,
    metrics: ExecutionPlanMetricsSet,
    warned: Arc<AtomicBool>,
}

impl GpuHashJoinExec {
    /// The GPU join equivalent to `join`; `Err` with the reason when it has none.
    pub fn try_new(join: Arc<HashJoinExec>) -> std::result::Result<GpuHashJoinExec, String> {
        if let Some(why) = unsupported_reason(&join) {
            return Err(why);
        }
        let keys: Vec<(usize, usize)> = join
            .on()
            .iter()
            .map(|(l, r)| (l.downcast_ref::<Column>().expect("checked").index(), r.downcast_ref::<Column>().expect("checked").index()))
            .collect();
        let width = if keys.len() == 1 { key_width(join.left().schema().field(keys[0].0).data_type()).expect("checked") } else { KeyWidth::I64 };
        Ok(GpuHashJoinExec {
            join,
            keys,
            width,
            shared: Arc::new(tokio::sync::OnceCell::new()),
            metrics: ExecutionPlanMetricsSet::new(),
            warned: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The DataFusion join it replaces (children, keys, filter, projection).
    pub fn hash_join(&self) -> &Arc<HashJoinExec> {
        &self.join
    }

    fn needs_visited(&self) -> bool {
        matches!(self.join.join_type(), JoinType::Left | JoinType::Full | JoinType::LeftSemi | JoinType::LeftAnti)
    }

    /// Semi and anti joins on the probe side without a residual filter need one bit
    /// a row (not over hashed keys, whose pairs are checked on the host).
    fn bits_only(&self, build: &Build) -> bool {
        matches!(self.join.join_type(), JoinType::RightSemi | JoinType::RightAnti) && self.join.filter().is_none() && !build.composite.is_hashed()
    }

    /// The one key column of a side's batch, or its packed or hashed composite key.
    fn key_of(&self, batch: &RecordBatch, side: JoinSide, composite: &Composite) -> Result<ArrayRef> {
        let col = |&(l, r): &(usize, usize)| batch.column(if side == JoinSide::Left { l } else { r }).clone();
        match composite {
            Composite::One => Ok(col(&self.keys[0])),
            c => {
                let cols: Vec<ArrayRef> = self.keys.iter().map(col).collect();
                c.key(&cols)
            }
        }
    }
}

/// The build side: its rows, its table and what the probes found.
struct Build {
    batch: RecordBatch,
    /// The key the table holds (the one key column, or the composite key).
    keys: ArrayRef,
    /// How several key columns make that key.
    composite: Composite,
    /// The build side's key columns widened to i64, for checking hashed pairs.
    wide_keys: Vec<Vec<i64>>,
    table: Table,
    /// Build rows some probe row matched (bits), for joins that emit by it.
    visited: Vec<AtomicU32>,
    /// Probe partitions still running (`CollectLeft`: the last one emits the
    /// build rows that depend on every probe).
    remaining: AtomicUsize,
    /// The build rows' share of the query's memory pool.
    _reservation: datafusion::execution::memory_pool::MemoryReservation,
}

enum Table {
    Device { dev: Arc<GpuContext>, table: DeviceJoinTable, host: std::sync::OnceLock<HostJoinTable> },
    Host(HostJoinTable),
}

impl std::fmt::Debug for Build {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Build({} rows)", self.batch.num_rows())
    }
}

/// What a probe found.
enum Found {
    /// (probe row, build row) pairs, probe-major.
    Pairs(Vec<u32>, Vec<u32>),
    /// Matched bits of the probe rows.
    Bits(Vec<u32>),
}

/// Per-partition metrics.
#[derive(Clone)]
struct Metrics {
    build_rows: Count,
    probe_rows: Count,
    gpu_probes: Count,
    cpu_probes: Count,
    output_rows: Count,
    build_time: Time,
    probe_time: Time,
}

impl GpuHashJoinExec {
    fn metrics_for(&self, partition: usize) -> Metrics {
        let m = &self.metrics;
        Metrics {
            build_rows: MetricBuilder::new(m).counter("build_rows", partition),
            probe_rows: MetricBuilder::new(m).counter("probe_rows", partition),
            gpu_probes: MetricBuilder::new(m).counter("gpu_probes", partition),
            cpu_probes: MetricBuilder::new(m).counter("cpu_probes", partition),
            output_rows: MetricBuilder::new(m).output_rows(partition),
            build_time: MetricBuilder::new(m).subset_time("build_time", partition),
            probe_time: MetricBuilder::new(m).subset_time("probe_time", partition),
        }
    }

    /// Builds the table of `batch`'s keys: on the device when there is one, else
    /// (or when the device fails) on the host.
    fn make_build(
        &self,
        batch: RecordBatch,
        dev: Option<Arc<GpuContext>>,
        probe_partitions: usize,
        reservation: datafusion::execution::memory_pool::MemoryReservation,
    ) -> Result<Build> {
        reservation.try_grow(batch.get_array_memory_size())?;
        // several key columns: widened once, for the plan, the key and (hashed) the checks
        let (composite, keys, wide_keys) = if self.keys.len() == 1 {
            (Composite::One, batch.column(self.keys[0].0).clone(), Vec::new())
        } else {
            let cols: Vec<ArrayRef> = self.keys.iter().map(|&(l, _)| batch.column(l).clone()).collect();
            let wide: Vec<Vec<i64>> = cols.iter().map(|c| widen(c.as_ref())).collect::<Result<_>>()?;
            let valid = |i: usize| cols.iter().all(|c| c.is_valid(i));
            let plan = Composite::plan(&wide, &valid);
            let keys = plan.key_of_wide(&cols, &wide);
            let keep = if plan.is_hashed() { wide } else { Vec::new() };
            (plan, keys, keep)
        };
        let table = match dev {
            Some(dev) => {
                let built = with_device_keys(&dev, keys.as_ref(), self.width, |kc| build_table_gpu(&dev, kc, &JoinOptions::default()).map_err(gerr));
                match built {
                    Ok(table) => Table::Device { dev, table, host: std::sync::OnceLock::new() },
                    Err(e) if gpu_failure(&e) => {
                        super::warn_fallback(&self.warned, "a hash join", &e);
                        Table::Host(host_table(keys.as_ref())?)
                    }
                    Err(e) => return Err(e),
                }
            }
            None => Table::Host(host_table(keys.as_ref())?),
        };
        let words = if self.needs_visited() { batch.num_rows().div_ceil(32) } else { 0 };
        Ok(Build {
            visited: (0..words).map(|_| AtomicU32::new(0)).collect(),
            remaining: AtomicUsize::new(probe_partitions),
            batch,
            keys,
            composite,
            wide_keys,
            table,
            _reservation: reservation,
        })
    }

    /// Probes one batch of probe keys (`device`: the same keys already on the device).
    fn probe(&self, build: &Build, keys: &dyn Array, device: Option<&GpuColumn>, m: &Metrics) -> Result<Found> {
        let bits = self.bits_only(build);
        if let Table::Device { dev, table, .. } = &build.table {
            let on_device = |kc: &KeyColumn<'_>| -> Result<Found> {
                if bits {
                    let words = probe_matched_gpu(dev, table, kc, &JoinOptions::default()).map_err(gerr)?;
                    let mut w: Vec<u32> = words.download(dev).map_err(gerr)?;
                    w.truncate(keys.len().div_ceil(32));
                    return Ok(Found::Bits(w));
                }
                let (mut p, mut b) = (Vec::new(), Vec::new());
                for part in probe_gpu(dev, table, kc, &JoinOptions::default()).map_err(gerr)? {
                    let (pp, bb) = part.download(dev).map_err(gerr)?;
                    p.extend_from_slice(&pp);
                    b.extend_from_slice(&bb);
                }
                Ok(Found::Pairs(p, b))
            };
            let r = match device.map(|c| &c.data) {
                Some(ColumnData::Device { values, validity, .. }) => {
                    on_device(&KeyColumn { keys: values, width: self.width, validity: validity.as_ref(), rows: keys.len() })
                }
                _ => with_device_keys(dev, keys, self.width, on_device),
            };
            match r {
                Ok(f) => {
                    m.gpu_probes.add(1);
                    return Ok(f);
                }
                Err(e) if gpu_failure(&e) => super::warn_fallback(&self.warned, "a hash join", &e),
                Err(e) => return Err(e),
            }
        }
        m.cpu_probes.add(1);
        let table = match &build.table {
            Table::Host(t) => t,
            Table::Device { host, .. } => {
                if host.get().is_none() {
                    let t = host_table(build.keys.as_ref())?;
                    let _ = host.set(t);
                }
                host.get().expect("set above")
            }
        };
        let words = KeyWords::of(keys)?;
        let hk = host_keys(&words);
        let valid = validity_words(keys);
        Ok(if bits {
            Found::Bits(table.matched(hk, valid.as_deref()))
        } else {
            let (p, b) = table.probe(hk, valid.as_deref());
            Found::Pairs(p, b)
        })
    }

    /// The output of one probe batch (and the build rows it visited).
    fn join_batch(&self, build: &Build, probe: &RecordBatch, device_key: Option<&GpuColumn>, m: &Metrics) -> Result<Vec<RecordBatch>> {
        let t = m.probe_time.timer();
        let pkeys = self.key_of(probe, JoinSide::Right, &build.composite)?;
        let device_key = if self.keys.len() == 1 { device_key } else { None };
        let found = self.probe(build, pkeys.as_ref(), device_key, m)?;
        drop(t);
        self.emit(build, probe, found)
    }

    /// The outputs of several probe batches probed as one: their keys are gathered
    /// (only the keys are copied) and probed once, and each batch gets its share
    /// of what was found.
    fn join_batches(&self, build: &Build, probes: &[RecordBatch], m: &Metrics) -> Result<Vec<RecordBatch>> {
        let t = m.probe_time.timer();
        let keys: Vec<ArrayRef> = probes.iter().map(|b| self.key_of(b, JoinSide::Right, &build.composite)).collect::<Result<_>>()?;
        let refs: Vec<&dyn Array> = keys.iter().map(|k| k.as_ref()).collect();
        let all = arrow::compute::concat(&refs)?;
        drop(keys);
        let found = self.probe(build, all.as_ref(), None, m)?;
        drop(t);
        let mut out = Vec::new();
        let mut start = 0usize;
        let mut k = 0usize;
        for b in probes {
            let n = b.num_rows();
            let part = match &found {
                Found::Bits(words) => {
                    let mut w = vec![0u32; n.div_ceil(32)];
                    for i in 0..n {
                        let g = start + i;
                        if (words[g / 32] >> (g % 32)) & 1 == 1 {
                            w[i / 32] |= 1 << (i % 32);
                        }
                    }
                    Found::Bits(w)
                }
                Found::Pairs(p, bb) => {
                    let end = (start + n) as u32;
                    let first = k;
                    while k < p.len() && p[k] < end {
                        k += 1;
                    }
                    Found::Pairs(p[first..k].iter().map(|&i| i - start as u32).collect(), bb[first..k].to_vec())
                }
            };
            out.extend(self.emit(build, b, part)?);
            start += n;
        }
        Ok(out)
    }

    /// The output of one probe batch from what its probe found (and the build rows
    /// it visited).
    fn emit(&self, build: &Build, probe: &RecordBatch, found: Found) -> Result<Vec<RecordBatch>> {
        let n = probe.num_rows();
        let jt = *self.join.join_type();
        let (p, b) = match found {
            Found::Bits(words) => {
                let want = jt == JoinType::RightSemi;
                let rows: Vec<u32> = (0..n as u32).filter(|&i| ((words[i as usize / 32] >> (i % 32)) & 1 == 1) == want).collect();
                return Ok(self.finish_batch(probe_side_only(probe, &rows)?)?.into_iter().collect());
            }
            Found::Pairs(p, b) => {
                let (p, b) = if build.composite.is_hashed() { self.check_hashed(build, probe, p, b)? } else { (p, b) };
                match self.join.filter() {
                    Some(f) => apply_filter(f, &build.batch, probe, p, b)?,
                    None => (p, b),
                }
            }
        };
        if self.needs_visited() {
            for &j in &b {
                build.visited[j as usize / 32].fetch_or(1 << (j % 32), Ordering::Relaxed);
            }
        }
        let out = match jt {
            JoinType::Inner | JoinType::Left => {
                let bi = UInt32Array::from(b);
                let pi = UInt32Array::from(p);
                self.both_sides(&build.batch, &bi, probe, &pi)?
            }
            JoinType::Right | JoinType::Full => {
                // pairs and the unmatched probe rows, in probe order
                let mut bi: Vec<Option<u32>> = Vec::with_capacity(p.len());
                let mut pi: Vec<u32> = Vec::with_capacity(p.len());
                let mut k = 0;
                for i in 0..n as u32 {
                    if k < p.len() && p[k] == i {
                        while k < p.len() && p[k] == i {
                            bi.push(Some(b[k]));
                            pi.push(i);
                            k += 1;
                        }
                    } else {
                        bi.push(None);
                        pi.push(i);
                    }
                }
                self.both_sides(&build.batch, &UInt32Array::from(bi), probe, &UInt32Array::from(pi))?
            }
            JoinType::RightSemi | JoinType::RightAnti => {
                let mut matched = vec![false; n];
                for &i in &p {
                    matched[i as usize] = true;
                }
                let want = jt == JoinType::RightSemi;
                let rows: Vec<u32> = (0..n as u32).filter(|&i| matched[i as usize] == want).collect();
                vec![probe_side_only(probe, &rows)?]
            }
            // emitted when the probes are done
            JoinType::LeftSemi | JoinType::LeftAnti => Vec::new(),
            other => return Err(DataFusionError::Internal(format!("GPU hash join of type {other}"))),
        };
        let mut done = Vec::with_capacity(out.len());
        for o in out {
            done.extend(self.finish_batch(o)?);
        }
        Ok(done)
    }

    /// The pairs of hashed composite keys whose key columns are all equal.
    fn check_hashed(&self, build: &Build, probe: &RecordBatch, p: Vec<u32>, b: Vec<u32>) -> Result<(Vec<u32>, Vec<u32>)> {
        let pw: Vec<Vec<i64>> = self.keys.iter().map(|&(_, r)| widen(probe.column(r).as_ref())).collect::<Result<_>>()?;
        let (mut po, mut bo) = (Vec::with_capacity(p.len()), Vec::with_capacity(b.len()));
        for (&i, &j) in p.iter().zip(&b) {
            if pw.iter().zip(&build.wide_keys).all(|(pc, bc)| pc[i as usize] == bc[j as usize]) {
                po.push(i);
                bo.push(j);
            }
        }
        Ok((po, bo))
    }

    /// Build columns at `bi` beside probe columns at `pi` (the join schema's order),
    /// in batches of at most [`OUTPUT_ROWS`] rows (a probe batch of many matches
    /// is not gathered into one huge batch).
    fn both_sides(&self, build: &RecordBatch, bi: &UInt32Array, probe: &RecordBatch, pi: &UInt32Array) -> Result<Vec<RecordBatch>> {
        let n = bi.len();
        let mut out = Vec::with_capacity(n.div_ceil(OUTPUT_ROWS));
        for start in (0..n).step_by(OUTPUT_ROWS) {
            let len = OUTPUT_ROWS.min(n - start);
            let (b, p) = (bi.slice(start, len), pi.slice(start, len));
            let mut cols: Vec<ArrayRef> = Vec::with_capacity(build.num_columns() + probe.num_columns());
            for c in build.columns() {
                cols.push(take(c.as_ref(), &b, None)?);
            }
            for c in probe.columns() {
                cols.push(take(c.as_ref(), &p, None)?);
            }
            let opts = RecordBatchOptions::new().with_row_count(Some(len));
            out.push(RecordBatch::try_new_with_options(self.join.join_schema().clone(), cols, &opts)?);
        }
        Ok(out)
    }

    /// The build rows that depend on every probe (left, full, semi, anti), once.
    fn final_batch(&self, build: &Build) -> Result<Option<RecordBatch>> {
        let jt = *self.join.join_type();
        if !self.needs_visited() {
            return Ok(None);
        }
        let seen = |j: usize| (build.visited[j / 32].load(Ordering::Relaxed) >> (j % 32)) & 1 == 1;
        let want_seen = jt == JoinType::LeftSemi;
        let rows: Vec<u32> = (0..build.batch.num_rows()).filter(|&j| seen(j) == want_seen).map(|j| j as u32).collect();
        if rows.is_empty() {
            return Ok(None);
        }
        let idx = UInt32Array::from(rows);
        let mut cols: Vec<ArrayRef> = build.batch.columns().iter().map(|c| take(c.as_ref(), &idx, None)).collect::<std::result::Result<_, _>>()?;
        if matches!(jt, JoinType::Left | JoinType::Full) {
            for f in self.join.right().schema().fields() {
                cols.push(new_null_array(f.data_type(), idx.len()));
            }
        }
        let opts = RecordBatchOptions::new().with_row_count(Some(idx.len()));
        let out = RecordBatch::try_new_with_options(self.join.join_schema().clone(), cols, &opts)?;
        self.finish_batch(out)
    }

    /// Applies the join's projection; `None` for an empty batch.
    fn finish_batch(&self, out: RecordBatch) -> Result<Option<RecordBatch>> {
        if out.num_rows() == 0 {
            return Ok(None);
        }
        Ok(Some(match &self.join.projection {
            Some(p) => out.project(p)?,
            None => out,
        }))
    }

    /// Gathers the build side of `partition` and builds its table.
    async fn build_side(self: Arc<Self>, partition: usize, ctx: Arc<TaskContext>, m: Metrics) -> Result<Arc<Build>> {
        let opts = RidgelineOptions::from_config(ctx.session_config().options());
        let dev = device_for(opts.mode()?)?;
        let probe_partitions = self.join.right().output_partitioning().partition_count();
        let left = self.join.left().clone();
        let reservation = datafusion::execution::memory_pool::MemoryConsumer::new(format!("GpuHashJoinExec[{partition}]")).register(ctx.memory_pool());
        let collect = |me: Arc<Self>, batches: Vec<RecordBatch>, dev: Option<Arc<GpuContext>>, parts: usize, m: Metrics| async move {
            tokio::task::spawn_blocking(move || {
                let _t = m.build_time.timer();
                let batch = concat_batches(&me.join.left().schema(), &batches)?;
                drop(batches);
                m.build_rows.add(batch.num_rows());
                me.make_build(batch, dev, parts, reservation).map(Arc::new)
            })
            .await
            .map_err(super::blocking_err)?
        };
        match self.join.partition_mode() {
            PartitionMode::CollectLeft => {
                let me = self.clone();
                let cell = self.shared.clone();
                let b = cell
                    .get_or_try_init(|| async move {
                        let batches = datafusion::physical_plan::collect(left, ctx).await?;
                        collect(me, batches, dev, probe_partitions, m).await
                    })
                    .await?;
                Ok(b.clone())
            }
            _ => {
                let batches = datafusion::physical_plan::common::collect(left.execute(partition, ctx)?).await?;
                collect(self.clone(), batches, dev, 1, m).await
            }
        }
    }
}

impl DisplayAs for GpuHashJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let on: Vec<String> = self.join.on().iter().map(|(l, r)| format!("({l}, {r})")).collect();
        write!(f, "GpuHashJoinExec: mode={:?}, join_type={}, on=[{}]", self.join.partition_mode(), self.join.join_type(), on.join(", "))?;
        if let Some(flt) = self.join.filter() {
            write!(f, ", filter={}", flt.expression())?;
        }
        if let Some(p) = &self.join.projection {
            let names: Vec<String> = p.iter().map(|&i| self.join.join_schema().field(i).name().clone()).collect();
            write!(f, ", projection=[{}]", names.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GpuHashJoinExec {
    fn name(&self) -> &str {
        "GpuHashJoinExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.join.properties()
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        self.join.apply_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![self.join.left(), self.join.right()]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        self.join.maintains_input_order()
    }
    fn input_distribution_requirements(&self) -> datafusion::physical_plan::InputDistributionRequirements {
        self.join.input_distribution_requirements()
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        let join = self.join.clone().with_new_children(children)?;
        let join = join
            .downcast_ref::<HashJoinExec>()
            .ok_or_else(|| DataFusionError::Internal("a hash join rebuilt as another node".into()))?
            .builder()
            .build()
            .map(Arc::new)?;
        Ok(Arc::new(GpuHashJoinExec::try_new(join).map_err(DataFusionError::Internal)?))
    }
    fn reset_state(self: Arc<Self>) -> Result<Arc<dyn ExecutionPlan>> {
        let join = Arc::new(self.join.builder().reset_state().build()?);
        Ok(Arc::new(GpuHashJoinExec::try_new(join).map_err(DataFusionError::Internal)?))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        // the stream's tasks own a copy of the node sharing its state (the plan only lends `self`)
        let me = Arc::new(self.clone());
        let m = self.metrics_for(partition);
        let probe = self.probe_stream(partition, ctx.clone())?;
        let build = me.clone().build_side(partition, ctx, m.clone());
        let state = ProbeState { me, build: None, build_fut: Some(Box::pin(build)), probe, pending: Vec::new(), pending_rows: 0, done: false, m };
        let s = futures::stream::unfold(state, |mut st| async move {
            let item = st.step().await;
            item.map(|r| (r, st))
        })
        .flat_map(|r: Result<Vec<RecordBatch>>| {
            futures::stream::iter(match r {
                Ok(v) => v.into_iter().map(Ok).collect::<Vec<_>>(),
                Err(e) => vec![Err(e)],
            })
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), s)))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}
