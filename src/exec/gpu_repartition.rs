//! `GpuRepartitionExec`: hash repartitioning of a GPU island's output on the
//! device (the rule is `optimizer::gpu_repartition`).
//!
//! Every device batch of the input (a resident scan, a GPU filter) is partitioned
//! in one device pass by a hash of the key columns ([`PartitionFn::Hash`]:
//! per-tile histograms, a scan, a stable scatter of every column, the partition
//! offsets read back), downloaded once per column, and cut into the output
//! partitions at those offsets, so the CPU hashes and copies nothing. The whole
//! input is partitioned once, on the first `execute` of any partition; every
//! output partition then streams its share.
//!
//! The hash is Ridgeline's, not DataFusion's: both inputs of a partitioned hash
//! join move together (the rule sees to it), and a node whose inputs come from the
//! CPU (the fallback plan, or a GPU that failed) hashes the same key words on the
//! CPU ([`partition_ids`]), so equal keys always meet in the same partition.
use super::{as_gpu, cpu_equivalent};
use crate::gpu_batch::{download_column, gpu_err, is_gpu_error, validity_words, ColumnData, GpuBatch, GpuColumn, KeyWords, Storage};
use arrow::array::{ArrayRef, RecordBatch, UInt32Array};
use arrow::datatypes::DataType;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning, PlanProperties};
use futures::{StreamExt, TryStreamExt};
use ridgeline_operators::compact::Column;
use ridgeline_operators::partition::{partition_gpu, partition_ids, HostColumn, HostValues, PartitionFn};
use std::sync::Arc;

/// Whether a key column of this type is hashed on the device and the same way on
/// the CPU (floats are not keys: -0.0 and +0.0 hash apart; strings and Booleans
/// have no device words). Other columns may be of any type: the ones without a
/// device layout follow the partition's row permutation on the host.
pub fn partitionable_key(dt: &DataType) -> bool {
    !matches!(Storage::of(dt), None | Some(Storage::Bool | Storage::F32 | Storage::F64))
}

/// Hash repartitioning on the GPU.
#[derive(Debug)]
pub struct GpuRepartitionExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<usize>,
    partitions: usize,
    props: Arc<PlanProperties>,
    done: Arc<tokio::sync::OnceCell<Arc<Vec<Vec<RecordBatch>>>>>,
}

impl GpuRepartitionExec {
    /// Repartitions `input` by the key columns `keys` into `partitioning` (a
    /// `Hash` partitioning over those columns, as the replaced node reported).
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<usize>, partitioning: Partitioning) -> Self {
        let partitions = partitioning.partition_count();
        let props = PlanProperties::new(input.equivalence_properties().clone(), partitioning, EmissionType::Final, Boundedness::Bounded);
        GpuRepartitionExec { input, keys, partitions, props: Arc::new(props), done: Arc::default() }
    }
}

impl DisplayAs for GpuRepartitionExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let schema = self.input.schema();
        let keys: Vec<String> = self.keys.iter().map(|&k| format!("{}@{k}", schema.field(k).name())).collect();
        write!(f, "GpuRepartitionExec: hash=[{}], partitions={}, input_partitions={}", keys.join(", "), self.partitions, self.input.output_partitioning().partition_count())
    }
}

impl ExecutionPlan for GpuRepartitionExec {
    fn name(&self) -> &str {
        "GpuRepartitionExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
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
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(GpuRepartitionExec::new(children[0].clone(), self.keys.clone(), self.props.output_partitioning().clone())))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let (input, keys, n, done) = (self.input.clone(), self.keys.clone(), self.partitions, self.done.clone());
        let fut = async move {
            let parts = done.get_or_try_init(|| async { repartition(input, keys, n, ctx).await.map(Arc::new) }).await?;
            let batches: Vec<Result<RecordBatch>> = parts[partition].iter().cloned().map(Ok).collect();
            Ok::<_, DataFusionError>(futures::stream::iter(batches))
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), futures::stream::once(fut).try_flatten())))
    }
}

/// All output partitions: on the GPU when the input is a GPU island, else (or
/// when the GPU fails) with the same hash on the CPU.
async fn repartition(input: Arc<dyn ExecutionPlan>, keys: Vec<usize>, n: usize, ctx: Arc<TaskContext>) -> Result<Vec<Vec<RecordBatch>>> {
    let mut input = input;
    if let Some(g) = as_gpu(&input) {
        let mut batches = Vec::new();
        let gpu_input = async {
            for p in 0..input.output_partitioning().partition_count() {
                let mut s = g.execute_gpu(p, ctx.clone())?;
                while let Some(b) = s.next().await {
                    batches.push(b?);
                }
            }
            Ok::<_, DataFusionError>(())
        };
        let r = match gpu_input.await {
            Ok(()) => {
                let k = keys.clone();
                tokio::task::spawn_blocking(move || {
                    let dev = ridgeline_operators::context::global().map_err(gpu_err)?;
                    let mut out = vec![Vec::new(); n];
                    for b in &batches {
                        if b.host_only() {
                            // rows a GPU operator below finished on the CPU
                            split_cpu(&b.to_host(&dev)?, &k, n, &mut out)?;
                        } else {
                            split_gpu(&dev, b, &k, n, &mut out)?;
                        }
                    }
                    Ok(out)
                })
                .await
                .map_err(super::blocking_err)?
            }
            Err(e) => Err(e),
        };
        match r {
            Ok(out) => return Ok(out),
            Err(e) if is_gpu_error(&e) => {
                log::warn!("GPU repartition failed ({e}); repartitioning on the CPU");
                // Every partition of the input is read again, from fresh state (the
                // abandoned GPU run consumed the scans' shared work queues).
                input = match cpu_equivalent(&input) {
                    Some(c) => super::fresh_plan(&c?)?,
                    None => return Err(e),
                };
            }
            Err(e) => return Err(e),
        }
    }
    let mut out = vec![Vec::new(); n];
    for p in 0..input.output_partitioning().partition_count() {
        let mut s = input.execute(p, ctx.clone())?;
        while let Some(b) = s.next().await {
            split_cpu(&b?, &keys, n, &mut out)?;
        }
    }
    Ok(out)
}

/// Partitions one device batch on the GPU and cuts the downloaded columns.
/// Columns kept on the host (strings) and Boolean bitmaps follow a row-number
/// column partitioned with the rest (the permutation), by a host `take`.
fn split_gpu(dev: &ridgeline_operators::GpuContext, b: &GpuBatch, keys: &[usize], n: usize, out: &mut [Vec<RecordBatch>]) -> Result<()> {
    if b.num_rows == 0 {
        return Ok(());
    }
    let on_device = |c: &GpuColumn| matches!(&c.data, ColumnData::Device { storage, .. } if *storage != Storage::Bool);
    let dev_idx: Vec<usize> = (0..b.columns.len()).filter(|&i| on_device(&b.columns[i])).collect();
    let needs_perm = dev_idx.len() < b.columns.len();
    let iota = if needs_perm {
        let rows: Vec<u32> = (0..b.num_rows as u32).collect();
        Some(ridgeline_operators::DeviceArray::upload_segmented(dev, &rows, dev.segment_rows()).map_err(gpu_err)?)
    } else {
        None
    };
    let mut cols: Vec<Column<'_>> = dev_idx
        .iter()
        .map(|&i| match &b.columns[i].data {
            ColumnData::Device { values, validity, .. } => Column { values, validity: validity.as_ref() },
            ColumnData::Host(_) => unreachable!("device columns only"),
        })
        .collect();
    if let Some(iota) = &iota {
        cols.push(Column::new(iota));
    }
    // Keys are device columns (the rule checks): their positions among `cols`.
    let key_pos = keys
        .iter()
        .map(|k| dev_idx.iter().position(|i| i == k).ok_or_else(|| DataFusionError::Internal("GPU repartition key kept on the host".into())))
        .collect::<Result<Vec<_>>>()?;
    let mut part = partition_gpu(dev, &cols, &key_pos, &PartitionFn::Hash { fanout: n as u32 }, &ridgeline_operators::partition::PartitionOptions::default()).map_err(gpu_err)?;
    let perm = match iota {
        Some(_) => {
            let c = part.columns.pop().expect("the row numbers");
            Some(UInt32Array::from(c.values.download::<u32>(dev).map_err(gpu_err)?[..b.num_rows].to_vec()))
        }
        None => None,
    };
    let mut arrays: Vec<Option<ArrayRef>> = vec![None; b.columns.len()];
    for (c, &i) in part.columns.into_iter().zip(&dev_idx) {
        let src = &b.columns[i];
        let ColumnData::Device { storage, .. } = &src.data else { unreachable!("device columns only") };
        let col = GpuColumn { data_type: src.data_type.clone(), data: ColumnData::Device { storage: *storage, values: c.values, validity: c.validity }, len: b.num_rows, null_count: 0 };
        arrays[i] = Some(download_column(dev, &col)?);
    }
    if let Some(perm) = &perm {
        for (i, a) in arrays.iter_mut().enumerate() {
            if a.is_none() {
                let whole = download_column(dev, &b.columns[i])?;
                *a = Some(arrow::compute::take(whole.as_ref(), perm, None)?);
            }
        }
    }
    let arrays: Vec<ArrayRef> = arrays.into_iter().map(|a| a.expect("every column")).collect();
    let whole = RecordBatch::try_new(b.schema.clone(), arrays)?;
    for (p, o) in out.iter_mut().enumerate() {
        let (a, e) = (part.offsets[p] as usize, part.offsets[p + 1] as usize);
        if e > a {
            o.push(whole.slice(a, e - a));
        }
    }
    Ok(())
}

/// Partitions one host batch with the GPU's hash, on the CPU.
fn split_cpu(b: &RecordBatch, keys: &[usize], n: usize, out: &mut [Vec<RecordBatch>]) -> Result<()> {
    if b.num_rows() == 0 {
        return Ok(());
    }
    let words = keys
        .iter()
        .map(|&k| Ok((KeyWords::of(b.column(k).as_ref())?, validity_words(b.column(k).as_ref()))))
        .collect::<Result<Vec<_>>>()?;
    let cols: Vec<HostColumn<'_>> = words
        .iter()
        .map(|(w, v)| HostColumn {
            values: match w {
                KeyWords::W32(x) => HostValues::U32(x),
                KeyWords::W64(x) => HostValues::U64(x),
            },
            validity: v.as_deref(),
        })
        .collect();
    let key_idx: Vec<usize> = (0..keys.len()).collect();
    let ids = partition_ids(&cols, &key_idx, &PartitionFn::Hash { fanout: n as u32 });
    let mut rows: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (i, &id) in ids.iter().enumerate() {
        rows[id as usize].push(i as u32);
    }
    for (p, r) in rows.into_iter().enumerate() {
        if !r.is_empty() {
            out[p].push(arrow::compute::take_record_batch(b, &UInt32Array::from(r))?);
        }
    }
    Ok(())
}
