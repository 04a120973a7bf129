//! The embedding API: [`Ridgeline`] (a builder, table registration, `sql`) and
//! the one-line opt-in for existing DataFusion users,
//! [`RidgelineSessionExt::with_ridgeline`].
use crate::config::{device_for, RidgelineOptions};
use crate::resident::{HostTable, ResidentData, ResidentTable};
use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use datafusion::catalog::TableFunction;
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::prelude::{CsvReadOptions, DataFrame, ParquetReadOptions, SessionConfig, SessionContext};
use ridgeline_operators::GpuMode;
use std::sync::Arc;

/// Installs Ridgeline into a DataFusion session state builder.
pub trait RidgelineSessionExt {
    /// Adds Ridgeline's settings (`ridgeline.*`), physical optimizer rules and
    /// functions. The GPU mode defaults to `RIDGELINE_GPU` (else auto).
    fn with_ridgeline(self) -> Self;
}

impl RidgelineSessionExt for SessionStateBuilder {
    fn with_ridgeline(mut self) -> Self {
        let cfg = self.config().get_or_insert_with(SessionConfig::new);
        if cfg.options().extensions.get::<RidgelineOptions>().is_none() {
            let mut opts = RidgelineOptions::default();
            if let Ok(m) = GpuMode::from_env() {
                opts.gpu = crate::config::ModeSetting(m);
            }
            cfg.options_mut().extensions.insert(opts);
            ridgeline_defaults(cfg);
        }
        let mode = self
            .config()
            .as_ref()
            .and_then(|c| c.options().extensions.get::<RidgelineOptions>().and_then(|o| o.mode().ok()))
            .unwrap_or(GpuMode::Auto);
        let mut udafs = self.aggregate_functions().take().unwrap_or_default();
        udafs.extend(crate::functions::quantile::quantile_udafs(mode));
        // DataFusion's median and percentile_cont keep their names (same answers) and run on SampleSelect.
        udafs.extend(crate::functions::percentile::percentile_udafs(mode));
        self = self.with_aggregate_functions(udafs);
        // Filter estimates go right before join selection, which reads them.
        let mut po = self.physical_optimizers().take().unwrap_or_default();
        if !po.rules.iter().any(|r| r.name() == "ridgeline_filter_estimates") {
            let at = po.rules.iter().position(|r| r.name() == "join_selection").unwrap_or(0);
            po.rules.insert(at, timed(Arc::new(crate::optimizer::FilterEstimates)));
        }
        *self.physical_optimizers() = Some(po);
        let tfs = self.table_functions().get_or_insert_with(Default::default);
        for (name, f) in crate::files::ReadFiles::all() {
            tfs.insert(name.to_string(), Arc::new(TableFunction::new(name.to_string(), f)));
        }
        let mut udfs = self.scalar_functions().take().unwrap_or_default();
        udfs.push(Arc::new(crate::logical::skyline::skyline_marker_udf()));
        let mut state = self
            .with_scalar_functions(udfs)
            .with_query_planner(Arc::new(crate::planner::RidgelineQueryPlanner))
            .with_optimizer_rule(Arc::new(crate::optimizer::JoinReorder));
        for rule in crate::optimizer::gpu_placement_rules() {
            state = state.with_physical_optimizer_rule(rule);
        }
        state.with_physical_optimizer_rule(timed(Arc::new(crate::optimizer::GpuIslandRule)))
    }
}

fn timed(
    rule: Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync>,
) -> Arc<dyn datafusion::physical_optimizer::PhysicalOptimizerRule + Send + Sync> {
    Arc::new(crate::optimizer::Timed(rule))
}

/// DataFusion settings whose defaults Ridgeline changes (where they still hold
/// DataFusion's own default):
/// - `datafusion.execution.perfect_hash_join_small_build_threshold`: 1024 -> 2^22.
///   A hash join whose build keys span fewer values than this indexes an array
///   by key (4 bytes a value of the range, at most 16 MiB) instead of hashing,
///   however sparse the keys; DataFusion only does that below a range of 1024 or
///   above 15% density. TPC-H at SF 1 on 2 cores (`bench tpch --set-gpu`, runs
///   alternating): q17 3.6-3.8x, q11 1.4-1.7x, q8 1.3-1.4x faster, the geometric
///   mean of all 22 1.10x (docs/benchmarks/history/session-26.md).
fn ridgeline_defaults(config: &mut SessionConfig) {
    let ex = &mut config.options_mut().execution;
    if ex.perfect_hash_join_small_build_threshold == 1024 {
        ex.perfect_hash_join_small_build_threshold = 1 << 22;
    }
}

/// Builder for [`Ridgeline`].
#[derive(Default)]
pub struct RidgelineBuilder {
    mode: Option<GpuMode>,
    memory_budget: Option<u64>,
    config: Option<SessionConfig>,
}

impl RidgelineBuilder {
    /// Where operators run (default: `RIDGELINE_GPU`, else auto).
    pub fn gpu_mode(mut self, mode: GpuMode) -> Self {
        self.mode = Some(mode);
        self
    }
    /// The process's device memory budget in bytes (default:
    /// `RIDGELINE_GPU_MEMORY`, else a default for the adapter type). There is one
    /// device context per process, so every engine in the process shares this
    /// budget: the last engine built with one sets it for all.
    pub fn process_memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = Some(bytes);
        self
    }
    /// The old name of [`RidgelineBuilder::process_memory_budget`]: the budget is
    /// the process's, not this engine's.
    #[deprecated(note = "the budget is per process: use process_memory_budget")]
    pub fn memory_budget(self, bytes: u64) -> Self {
        self.process_memory_budget(bytes)
    }
    /// A DataFusion session configuration to start from.
    pub fn config(mut self, config: SessionConfig) -> Self {
        self.config = Some(config);
        self
    }
    /// Builds the engine. Mode `on` without a usable adapter is an error here, so
    /// a service fails at start-up rather than at its first query.
    pub fn build(self) -> Result<Ridgeline> {
        let mode = match self.mode {
            Some(m) => m,
            None => GpuMode::from_env().map_err(DataFusionError::Configuration)?,
        };
        let mut config = self.config.unwrap_or_default().with_information_schema(true);
        let mut opts = RidgelineOptions::default();
        opts.gpu = crate::config::ModeSetting(mode);
        config.options_mut().extensions.insert(opts);
        ridgeline_defaults(&mut config);
        let dev = device_for(mode)?;
        if let (Some(d), Some(b)) = (&dev, self.memory_budget) {
            d.pool().set_budget(b);
        }
        let state = SessionStateBuilder::new().with_default_features().with_config(config).with_ridgeline().build();
        let ctx = crate::files::enable_file_tables(SessionContext::new_with_state(state));
        Ok(Ridgeline { ctx })
    }
}

/// An embedded Ridgeline engine: a DataFusion session with Ridgeline installed.
#[derive(Clone)]
pub struct Ridgeline {
    ctx: SessionContext,
}

impl Ridgeline {
    /// A builder.
    pub fn builder() -> RidgelineBuilder {
        RidgelineBuilder::default()
    }
    /// An engine with the default settings.
    pub fn new() -> Result<Ridgeline> {
        Self::builder().build()
    }
    /// The DataFusion session.
    pub fn session(&self) -> &SessionContext {
        &self.ctx
    }
    /// The current GPU mode.
    pub fn gpu_mode(&self) -> Result<GpuMode> {
        RidgelineOptions::from_config(self.ctx.state().config().options()).mode()
    }
    /// Changes the GPU mode (mode `on` without an adapter is an error).
    pub fn set_gpu_mode(&self, mode: GpuMode) -> Result<()> {
        device_for(mode)?;
        let state = self.ctx.state_ref();
        let mut st = state.write();
        st.config_mut().options_mut().set("ridgeline.gpu", mode.as_str())
    }
    /// Registers a CSV file (with a header line).
    pub async fn register_csv(&self, name: &str, path: &str) -> Result<()> {
        self.ctx.register_csv(name, path, CsvReadOptions::new().has_header(true)).await
    }
    /// Registers a Parquet file or directory.
    pub async fn register_parquet(&self, name: &str, path: &str) -> Result<()> {
        self.ctx.register_parquet(name, path, ParquetReadOptions::default()).await
    }
    /// Registers an Arrow IPC file.
    pub async fn register_arrow(&self, name: &str, path: &str) -> Result<()> {
        self.ctx.register_arrow(name, path, Default::default()).await
    }
    /// Registers a file, directory or glob by its file names, as SQL reads a
    /// quoted path (see [`crate::files`]: Parquet, CSV with a header line, TSV,
    /// newline-delimited JSON, Arrow IPC; compressed CSV and JSON; any case).
    ///
    /// A file whose reader fails, even by panicking (a corrupt Parquet footer or
    /// embedded schema trips assertions in the readers), is an error that names it.
    pub async fn register_file(&self, name: &str, path: &str) -> Result<()> {
        match crate::guard::catch(self.register_file_inner(name, path)).await {
            Ok(()) => Ok(()),
            Err(e) if crate::guard::is_panic_error(&e) => Err(DataFusionError::Execution(format!(
                "cannot read '{path}': the file is corrupt or not in the format its name says ({})",
                crate::guard::panic_detail(&e)
            ))),
            Err(e) => Err(e),
        }
    }

    async fn register_file_inner(&self, name: &str, path: &str) -> Result<()> {
        let is_dir = std::path::Path::new(path).is_dir();
        if !is_dir && !path.contains(['*', '?', '[']) && crate::files::FileKind::of(path).is_none() {
            return Err(DataFusionError::Plan(format!(
                "cannot tell the format of '{path}': expected a name ending in {}, a directory or a glob",
                crate::files::KNOWN_ENDINGS
            )));
        }
        let state = self.ctx.state();
        let table = crate::files::listing_table(&state, path, &crate::files::FileOptions::default()).await?;
        self.ctx.register_table(name, table)?;
        Ok(())
    }
    /// Registers in-memory batches (host memory) as a [`HostTable`]: chunked and
    /// described by exact statistics (row count, NULL counts, min / max) as a
    /// resident table is, so the planner sees the same table in every mode.
    pub fn register_batches(&self, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<()> {
        let opts = RidgelineOptions::from_config(self.ctx.state().config().options());
        let parts = self.ctx.state().config().target_partitions().max(1);
        let table = HostTable::try_new(name, schema, &batches, opts.chunk_rows(None), parts)?;
        self.ctx.register_table(name, Arc::new(table))?;
        Ok(())
    }
    /// Registers batches as a GPU-resident table: the columns are uploaded once and
    /// stay on the device. Without a GPU (mode off, or auto without an adapter) the
    /// table is kept in host memory instead. Returns whether it is on the GPU.
    pub async fn register_resident(&self, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<bool> {
        let opts = RidgelineOptions::from_config(self.ctx.state().config().options());
        let Some(dev) = device_for(opts.mode()?)? else {
            self.register_batches(name, schema, batches)?;
            return Ok(false);
        };
        let chunk_rows = opts.chunk_rows(Some(&dev));
        let parts = self.ctx.state().config().target_partitions();
        let n = name.to_string();
        let (s2, b2) = (schema.clone(), batches.clone());
        let data = tokio::task::spawn_blocking(move || ResidentData::upload(&dev, &n, s2, &b2, chunk_rows, parts))
            .await
            .map_err(crate::exec::blocking_err)?;
        match data {
            Ok(d) => {
                self.ctx.register_table(name, Arc::new(ResidentTable::new(d)))?;
                Ok(true)
            }
            // Out of device memory (or budget), lost device: keep the table on the host.
            Err(e) if crate::gpu_batch::is_gpu_error(&e) => {
                log::warn!("table {name} stays in host memory: {e}");
                self.register_batches(name, schema, batches)?;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
    /// The host chunks of a table registered with [`register_batches`] or
    /// [`register_resident`] (a resident table's host copy), shared, not copied;
    /// `None` for other tables.
    ///
    /// [`register_batches`]: Ridgeline::register_batches
    /// [`register_resident`]: Ridgeline::register_resident
    pub async fn host_chunks(&self, name: &str) -> Result<Option<Vec<RecordBatch>>> {
        let Some(t) = self.ctx.table_provider(name).await.ok() else { return Ok(None) };
        let any: &dyn std::any::Any = t.as_ref();
        if let Some(r) = any.downcast_ref::<ResidentTable>() {
            return Ok(Some(r.data().table.host.clone()));
        }
        Ok(any.downcast_ref::<HostTable>().map(|h| h.data().host.clone()))
    }
    /// Makes an already registered table GPU-resident (reads it once).
    pub async fn make_resident(&self, name: &str) -> Result<bool> {
        let df = self.ctx.table(name).await?;
        let schema: SchemaRef = Arc::new(df.schema().as_arrow().clone());
        let batches = df.collect().await?;
        self.ctx.deregister_table(name)?;
        self.register_resident(name, schema, batches).await
    }
    /// Plans a SQL statement (with Ridgeline's extensions such as `SKYLINE OF`).
    /// A panic while planning (a reader tripping over a corrupt file, a bug) is
    /// returned as an error; to guard execution the same way, run the answer
    /// through [`crate::guard::catch_stream`] (as the CLI and the server do).
    pub async fn sql(&self, sql: &str) -> Result<DataFrame> {
        crate::guard::catch(crate::sql_ext::plan_sql(&self.ctx, sql)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A second engine registering another's host chunks reads the same memory.
    #[tokio::test]
    async fn host_chunks_are_shared() {
        use arrow::array::{Array, Int64Array};
        let a = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        let col = Arc::new(Int64Array::from_iter_values(0..100_000)) as arrow::array::ArrayRef;
        let batch = RecordBatch::try_from_iter([("x", col)]).unwrap();
        a.register_batches("t", batch.schema(), vec![batch.clone()]).unwrap();
        let chunks = a.host_chunks("t").await.unwrap().expect("a host table");
        assert_eq!(chunks.iter().map(|c| c.num_rows()).sum::<usize>(), 100_000);
        assert!(a.host_chunks("missing").await.unwrap().is_none());
        let b = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        b.register_batches("t", batch.schema(), chunks.clone()).unwrap();
        let again = b.host_chunks("t").await.unwrap().unwrap();
        assert_eq!(again.len(), chunks.len());
        for (x, y) in chunks.iter().zip(&again) {
            let (x, y) = (x.column(0).to_data(), y.column(0).to_data());
            assert_eq!(x.buffers()[0].as_ptr(), y.buffers()[0].as_ptr(), "copied instead of shared");
        }
        let n = b.sql("SELECT count(*), sum(x) FROM t").await.unwrap().collect().await.unwrap();
        let sum = n[0].column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
        assert_eq!(sum, (0..100_000i64).sum::<i64>());
    }

    #[test]
    fn perfect_hash_range_default_unless_set() {
        let threshold = |rl: &Ridgeline| rl.session().state().config().options().execution.perfect_hash_join_small_build_threshold;
        let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
        assert_eq!(threshold(&rl), 1 << 22);
        let mut own = SessionConfig::new();
        own.options_mut().execution.perfect_hash_join_small_build_threshold = 5000;
        let rl = Ridgeline::builder().gpu_mode(GpuMode::Off).config(own).build().unwrap();
        assert_eq!(threshold(&rl), 5000);
        // the one-line opt-in on a user's own state builder
        let state = SessionStateBuilder::new().with_default_features().with_ridgeline().build();
        assert_eq!(state.config().options().execution.perfect_hash_join_small_build_threshold, 1 << 22);
    }
}
