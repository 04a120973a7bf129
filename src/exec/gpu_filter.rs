//! `GpuFilterExec`: a filter (and the projection fused with it) on the GPU.
//!
//! One row-wise kernel evaluates the predicate into a selection bitmap and the
//! computed output columns at the selected rows; one compaction then gathers every
//! output column (values and validity) to the selected rows. Columns without a
//! device layout (strings) are filtered on the host by the downloaded bitmap. The
//! output stays on the device for a GPU parent; under a CPU parent only the
//! surviving rows are downloaded.
use super::{as_gpu, blocking_err, GpuBatchStream, GpuExec};
use crate::config::{device_for, RidgelineOptions};
use crate::gpu_batch::{download_column, gpu_err, is_gpu_error, ColumnData, GpuBatch, GpuColumn, Storage};
use crate::gpu_expr::RowProgram;
use arrow::array::{Array, BooleanArray};
use arrow::buffer::{BooleanBuffer, Buffer};
use arrow::datatypes::SchemaRef;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::{lit, Column};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};
use futures::StreamExt;
use ridgeline_operators::compact::{compact, count_selected, Column as CCol, CompactAlgo, CompactOptions, Selection};
use ridgeline_operators::{GpuContext, GpuError};
use crate::resident::CodeColumn;
use std::sync::Arc;

/// The selectivity from which `Auto` compacts a filter's output with Jumping Jack
/// (where the plan leaves the order free). Measured with `ridgeline bench filter`
/// (bitmap selections, i64 payload) on the H100: Jumping Jack vs stable ms at 2^27
/// rows: 1.23 vs 1.13 at 10%, 1.34 vs 1.41 at 50%, 1.50 vs 2.10 at 90%, 1.58 vs 2.33
/// at 100% (at 2^28: 2.24 vs 1.88, 2.60 vs 2.87, 2.98 vs 4.17, 2.79 vs 4.29), so
/// from 50% on. With u32 flags stable wins everywhere there (the count pass
/// dominates), which is why the operators' own default stays stable. On CPU
/// adapters (lavapipe) the crossover measured about 90%.
pub fn filter_jj_min_selectivity(dev: &GpuContext) -> f64 {
    if dev.is_cpu_adapter() {
        ridgeline_operators::compact::LAVAPIPE_JJ_MIN_SELECTIVITY
    } else {
        0.5
    }
}

/// Where an output column comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutCol {
    /// Input column `i`, passed through.
    Input(usize),
    /// Computed output `j` of the program.
    Computed(usize),
}

/// A GPU filter.
#[derive(Debug)]
pub struct GpuFilterExec {
    input: Arc<dyn ExecutionPlan>,
    program: RowProgram,
    columns: Vec<OutCol>,
    schema: SchemaRef,
    algo: CompactAlgo,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
    /// Dictionary codes the program reads after the input's columns (its input is
    /// then a resident scan), and the predicate over the input before its string
    /// tests became code tests (for display and the CPU plan).
    codes: Vec<CodeColumn>,
    source_predicate: Option<Arc<dyn PhysicalExpr>>,
    /// Whether this node has warned that the GPU failed (once per node).
    warned: Arc<std::sync::atomic::AtomicBool>,
}

impl GpuFilterExec {
    /// A filter by `program`'s predicate producing `columns` (named by `schema`),
    /// with the plan properties of the CPU node(s) it replaces.
    pub fn new(
        input: Arc<dyn ExecutionPlan>,
        program: RowProgram,
        columns: Vec<OutCol>,
        schema: SchemaRef,
        algo: CompactAlgo,
        props: Arc<PlanProperties>,
    ) -> Self {
        GpuFilterExec { input, program, columns, schema, algo, props, metrics: ExecutionPlanMetricsSet::new(), codes: Vec::new(), source_predicate: None, warned: Default::default() }
    }

    /// The same filter whose program also reads the dictionary codes `codes`
    /// (appended to a resident scan's columns); `source_predicate` is the
    /// predicate over the input with the strings themselves.
    pub fn with_codes(mut self, codes: Vec<CodeColumn>, source_predicate: Option<Arc<dyn PhysicalExpr>>) -> Self {
        if !codes.is_empty() {
            self.codes = codes;
            self.source_predicate = source_predicate;
        }
        self
    }
    /// The dictionary codes the program reads after the input's columns.
    pub fn codes(&self) -> &[CodeColumn] {
        &self.codes
    }
    /// The predicate over the input's columns (string tests as written).
    pub fn input_predicate(&self) -> Option<&Arc<dyn PhysicalExpr>> {
        if self.codes.is_empty() {
            self.program.predicate()
        } else {
            self.source_predicate.as_ref()
        }
    }
    /// The input.
    pub fn input(&self) -> &Arc<dyn ExecutionPlan> {
        &self.input
    }
    /// The compiled program.
    pub fn program(&self) -> &RowProgram {
        &self.program
    }
    /// The output columns.
    pub fn columns(&self) -> &[OutCol] {
        &self.columns
    }
    /// The compaction algorithm.
    pub fn algo(&self) -> CompactAlgo {
        self.algo
    }

    /// The output expressions over the input schema (for display and the CPU plan).
    pub fn output_exprs(&self) -> Vec<(Arc<dyn PhysicalExpr>, String)> {
        let in_schema = self.program.schema();
        self.columns
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| {
                let e: Arc<dyn PhysicalExpr> = match c {
                    OutCol::Input(i) => Arc::new(Column::new(in_schema.field(*i).name(), *i)),
                    OutCol::Computed(j) => self.program.outputs()[*j].clone(),
                };
                (e, f.name().clone())
            })
            .collect()
    }

    /// Whether the output is the input's columns, in order (no projection).
    fn passes_input_through(&self) -> bool {
        self.columns.len() == self.program.schema().fields().len() - self.codes.len()
            && self.columns.iter().enumerate().all(|(k, c)| *c == OutCol::Input(k))
    }

    /// The same node over `input`.
    fn with_input(&self, input: Arc<dyn ExecutionPlan>) -> GpuFilterExec {
        let mut f = GpuFilterExec::new(input, self.program.clone(), self.columns.clone(), self.schema.clone(), self.algo, self.props.clone())
            .with_codes(self.codes.clone(), self.source_predicate.clone());
        f.warned = self.warned.clone();
        f
    }

    /// The same work as CPU operators over `input`.
    pub fn cpu_equivalent(&self, input: Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let pred = self.input_predicate().cloned().unwrap_or_else(|| lit(true));
        let filter: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(pred, input)?);
        if self.passes_input_through() {
            return Ok(filter);
        }
        Ok(Arc::new(ProjectionExec::try_new(self.output_exprs(), filter)?))
    }

    /// Filters one batch on the GPU; a batch the GPU fails on (out of memory, lost)
    /// or that is not on the device is filtered on the CPU from its host rows, so
    /// the output stays exact and in order whatever part of a stream fails.
    fn filter_or_cpu(&self, dev: &GpuContext, batch: GpuBatch, algo: CompactAlgo) -> Result<Option<GpuBatch>> {
        if batch.num_rows == 0 {
            return Ok(None);
        }
        if !batch.host_only() {
            match self.filter_batch(dev, batch.clone(), algo) {
                Ok(out) => return Ok(out),
                Err(e) if is_gpu_error(&e) => super::warn_fallback(&self.warned, "a GPU filter", &e),
                Err(e) => return Err(e),
            }
        }
        self.filter_host(dev, &batch)
    }

    /// The CPU filter (and projection) over a batch's host rows.
    fn filter_host(&self, dev: &GpuContext, batch: &GpuBatch) -> Result<Option<GpuBatch>> {
        let inputs = self.program.schema().fields().len() - self.codes.len();
        let host = match &batch.host {
            Some(h) if h.num_columns() == inputs => h.clone(),
            _ => {
                let all = batch.download(dev)?;
                all.project(&(0..inputs).collect::<Vec<_>>())?
            }
        };
        let pred = self.input_predicate().cloned().unwrap_or_else(|| lit(true));
        let mask = pred.evaluate(&host)?.into_array(host.num_rows())?;
        let mask = mask
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| DataFusionError::Internal(format!("filter predicate of type {}", mask.data_type())))?;
        let kept = arrow::compute::filter_record_batch(&host, mask)?;
        if kept.num_rows() == 0 {
            return Ok(None);
        }
        let cols = self
            .output_exprs()
            .iter()
            .map(|(e, _)| e.evaluate(&kept).and_then(|v| v.into_array(kept.num_rows())))
            .collect::<Result<Vec<_>>>()?;
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(kept.num_rows()));
        let out = arrow::array::RecordBatch::try_new_with_options(self.schema.clone(), cols, &opts)?;
        Ok(Some(GpuBatch::from_host(out)))
    }

    fn filter_batch(&self, dev: &GpuContext, batch: GpuBatch, algo: CompactAlgo) -> Result<Option<GpuBatch>> {
        let rows = batch.num_rows;
        if rows == 0 {
            return Ok(None);
        }
        let eval = self.program.evaluate(dev, &batch)?;
        let sel = eval.selection.as_ref().ok_or_else(|| DataFusionError::Internal("GPU filter without a predicate".into()))?;
        let cols: Vec<&GpuColumn> = self
            .columns
            .iter()
            .map(|c| match c {
                OutCol::Input(i) => batch.columns[*i].as_ref(),
                OutCol::Computed(j) => &eval.outputs[*j],
            })
            .collect();
        let out = compact_columns(dev, sel, rows, &cols, algo, &self.schema)?;
        eval.check_errors(dev)?;
        Ok(out)
    }
}

/// The rows of `cols` selected by the bitmap `sel` (of `rows` rows), as a batch of
/// `schema`: device columns compacted together on the device, Booleans and host
/// columns filtered on the host by the downloaded bitmap (in input order, so the
/// compaction then keeps it). `None` when no row is selected.
pub(crate) fn compact_columns(
    dev: &GpuContext,
    sel: &ridgeline_operators::DeviceArray,
    rows: usize,
    cols_in: &[&GpuColumn],
    algo: CompactAlgo,
    schema: &SchemaRef,
) -> Result<Option<GpuBatch>> {
    let selection = Selection::Bitmap { bits: sel, rows };
    let mut device_idx = Vec::new();
    let mut host_idx = Vec::new();
    for (k, c) in cols_in.iter().enumerate() {
        match &c.data {
            ColumnData::Device { storage, .. } if *storage != Storage::Bool => device_idx.push(k),
            _ => host_idx.push(k),
        }
    }
    let algo = if host_idx.is_empty() { algo } else { CompactAlgo::Stable };
    let cols: Vec<CCol<'_>> = device_idx
        .iter()
        .map(|&k| match &cols_in[k].data {
            ColumnData::Device { values, validity: Some(v), .. } => CCol::with_validity(values, v),
            ColumnData::Device { values, .. } => CCol::new(values),
            ColumnData::Host(_) => unreachable!(),
        })
        .collect();
    let (count, mut compacted) = if cols.is_empty() {
        (count_selected(dev, selection).map_err(gpu_err)?, Vec::new())
    } else {
        let mut opts = CompactOptions::with_algo(algo);
        opts.jj_min_selectivity = filter_jj_min_selectivity(dev);
        let c = compact(dev, selection, &cols, &opts).map_err(gpu_err)?;
        (c.count, c.columns.into_iter().map(Some).collect::<Vec<_>>())
    };
    let mut out: Vec<Option<Arc<GpuColumn>>> = vec![None; cols_in.len()];
    for (pos, &k) in device_idx.iter().enumerate() {
        let src = cols_in[k];
        let c = compacted[pos].take().expect("one output per column");
        out[k] = Some(Arc::new(GpuColumn {
            data_type: src.data_type.clone(),
            data: ColumnData::Device { storage: Storage::of(&src.data_type).expect("device type"), values: c.values, validity: c.validity },
            len: count,
            null_count: 0,
        }));
    }
    if !host_idx.is_empty() {
        let words: Vec<u32> = sel.download(dev).map_err(gpu_err)?;
        let mask = BooleanArray::new(BooleanBuffer::new(Buffer::from_vec(words), 0, rows), None);
        for &k in &host_idx {
            let src = cols_in[k];
            let array = download_column(dev, src)?;
            let filtered = arrow::compute::filter(array.as_ref(), &mask)?;
            out[k] = Some(Arc::new(GpuColumn {
                data_type: src.data_type.clone(),
                len: filtered.len(),
                null_count: filtered.null_count(),
                data: ColumnData::Host(filtered),
            }));
        }
    }
    if count == 0 {
        return Ok(None);
    }
    Ok(Some(GpuBatch { schema: schema.clone(), columns: out.into_iter().map(|c| c.expect("filled")).collect(), num_rows: count, host: None }))
}

impl DisplayAs for GpuFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let pred = self.input_predicate().map(|p| p.to_string()).unwrap_or_else(|| "true".into());
        let algo = match self.algo {
            CompactAlgo::Stable => "stable",
            CompactAlgo::JumpingJack => "jumping_jack",
            CompactAlgo::Auto => "auto",
        };
        write!(f, "GpuFilterExec: {pred}, compaction={algo}")?;
        if !self.codes.is_empty() {
            write!(f, ", strings by dictionary codes")?;
        }
        if !self.passes_input_through() {
            let items: Vec<String> = self
                .output_exprs()
                .into_iter()
                .map(|(e, name)| {
                    let s = e.to_string();
                    if s == name || s.starts_with(&format!("{name}@")) { s } else { format!("{s} as {name}") }
                })
                .collect();
            write!(f, ", projection=[{}]", items.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GpuFilterExec {
    fn name(&self) -> &str {
        "GpuFilterExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        use datafusion::common::tree_node::TreeNodeRecursion;
        if let Some(p) = self.input_predicate() {
            if f(p)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        for e in self.program.outputs() {
            if f(e)? == TreeNodeRecursion::Stop {
                return Ok(TreeNodeRecursion::Stop);
            }
        }
        Ok(TreeNodeRecursion::Continue)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![self.algo == CompactAlgo::Stable]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(self.with_input(children.swap_remove(0))))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let gpu = self.execute_gpu(partition, ctx.clone())?;
        super::gpu_unload::download_stream(self.schema.clone(), gpu, ctx.session_config().batch_size())
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

impl GpuExec for GpuFilterExec {
    fn execute_gpu(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<GpuBatchStream> {
        let opts = RidgelineOptions::from_config(ctx.session_config().options());
        let dev = device_for(opts.mode()?)?.ok_or_else(|| gpu_err(GpuError::Disabled))?;
        let child = as_gpu(&self.input)
            .ok_or_else(|| DataFusionError::Internal(format!("GpuFilterExec over a CPU operator ({})", self.input.name())))?;
        let input = if self.codes.is_empty() {
            child.execute_gpu(partition, ctx)?
        } else {
            // String tests read the resident table's dictionary codes beside its columns.
            let scan = self
                .input
                .downcast_ref::<super::GpuScanExec>()
                .ok_or_else(|| DataFusionError::Internal(format!("GPU filter with dictionary codes over {}", self.input.name())))?;
            let batches = scan.chunks_with_codes(partition, &self.codes, self.program.schema())?;
            futures::stream::iter(batches.into_iter().map(Ok)).boxed()
        };
        // The stream's tasks own a copy of the node (the plan only lends `self`).
        let me = Arc::new(self.with_input(self.input.clone()));
        let rows_in = MetricBuilder::new(&self.metrics).counter("input_rows", partition);
        let rows_out = MetricBuilder::new(&self.metrics).output_rows(partition);
        let time = MetricBuilder::new(&self.metrics).elapsed_compute(partition);
        let algo = self.algo;
        let s = input
            .then(move |b: Result<GpuBatch>| {
                let (me, dev, rows_in, rows_out, time) = (me.clone(), dev.clone(), rows_in.clone(), rows_out.clone(), time.clone());
                async move {
                    let b = b?;
                    tokio::task::spawn_blocking(move || {
                        let _t = time.timer();
                        rows_in.add(b.num_rows);
                        let out = me.filter_or_cpu(&dev, b, algo)?;
                        if let Some(o) = &out {
                            rows_out.add(o.num_rows);
                        }
                        Ok(out)
                    })
                    .await
                    .map_err(blocking_err)?
                }
            })
            .filter_map(|r: Result<Option<GpuBatch>>| async move { r.transpose() });
        Ok(s.boxed())
    }
    fn cpu_plan(&self) -> Option<Result<Arc<dyn ExecutionPlan>>> {
        let input = super::cpu_equivalent(&self.input)?;
        Some(input.and_then(|i| self.cpu_equivalent(i)))
    }
}
