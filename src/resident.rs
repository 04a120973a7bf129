//! GPU-resident tables: registered once, their columns stay on the device, so
//! repeated queries pay no upload. A [`crate::exec::GpuScanExec`] reads them: on
//! the device for GPU operators, and from the host copy the table keeps (the
//! batches it was registered with, shared, not copied) for CPU operators, so a
//! plan that does not use the GPU never pays a download. Column statistics
//! (min, max, NULLs) are computed once at registration, so DataFusion can
//! estimate selectivities and the GPU rules can weigh downloads.
use crate::exec::{GpuScanExec, HostScanExec};
use crate::gpu_batch::{ColumnData, GpuBatch, GpuColumn, Storage};
use arrow::array::{ArrayRef, RecordBatch};
use ridgeline_operators::DeviceArray;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::common::stats::Precision;
use datafusion::common::{ColumnStatistics, Statistics};
use datafusion::error::Result;
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::ExecutionPlan;
use ridgeline_operators::GpuContext;
use std::sync::Arc;

/// The device data of a resident table.
#[derive(Debug)]
pub struct ResidentData {
    /// The same rows on the host (one batch per device chunk), with the table's
    /// name, schema and exact statistics.
    pub table: HostData,
    /// Device chunks.
    pub chunks: Vec<GpuBatch>,
    /// Dictionaries of string columns, built on first use (`None`: too many
    /// distinct values, or not a string column).
    dicts: Mutex<HashMap<usize, Option<Arc<StringDict>>>>,
}

pub use crate::tuning::limits::MAX_DICT_VALUES;

/// A resident string column as codes: its distinct non-NULL values in sorted
/// order, and per device chunk a device column of `u32` codes (index into
/// `values`; NULL is `values.len()`). GPU operators group by the codes.
#[derive(Debug)]
pub struct StringDict {
    /// The distinct values, sorted, of the column's type.
    pub values: ArrayRef,
    /// Codes per chunk (`UInt32` device columns without NULLs), segmented like the
    /// chunk's columns.
    pub codes: Vec<Arc<GpuColumn>>,
}

/// A code column appended to a GPU program's input: the dictionary codes of the
/// scanned table's column `table_col`.
#[derive(Debug, Clone)]
pub struct CodeColumn {
    /// The table column (not the scan's output column).
    pub table_col: usize,
    /// Its dictionary.
    pub dict: Arc<StringDict>,
}

/// Name of the `k`-th appended code column.
pub fn code_field_name(k: usize) -> String {
    format!("__rl_strcode{k}")
}

/// `schema` with a non-null `UInt32` field per code column appended.
pub fn augmented_schema(schema: &SchemaRef, codes: &[CodeColumn]) -> SchemaRef {
    if codes.is_empty() {
        return schema.clone();
    }
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend((0..codes.len()).map(|k| Field::new(code_field_name(k), DataType::UInt32, false)));
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Whether `dt` is a string type (the types a dictionary codes).
pub fn is_string(dt: &DataType) -> bool {
    matches!(dt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// The strings of a string array (`None` for other types).
fn strings(a: &ArrayRef) -> Option<Box<dyn Iterator<Item = Option<&str>> + '_>> {
    use arrow::array::AsArray;
    use arrow::datatypes::DataType;
    Some(match a.data_type() {
        DataType::Utf8 => Box::new(a.as_string::<i32>().iter()),
        DataType::LargeUtf8 => Box::new(a.as_string::<i64>().iter()),
        DataType::Utf8View => Box::new(a.as_string_view().iter()),
        _ => return None,
    })
}

fn at_extreme(v: &datafusion::common::ScalarValue) -> bool {
    use datafusion::common::ScalarValue as S;
    match v {
        S::Int8(Some(x)) => *x == i8::MIN || *x == i8::MAX,
        S::Int16(Some(x)) => *x == i16::MIN || *x == i16::MAX,
        S::Int32(Some(x)) | S::Date32(Some(x)) => *x == i32::MIN || *x == i32::MAX,
        S::Int64(Some(x)) | S::Date64(Some(x)) => *x == i64::MIN || *x == i64::MAX,
        S::TimestampSecond(Some(x), _)
        | S::TimestampMillisecond(Some(x), _)
        | S::TimestampMicrosecond(Some(x), _)
        | S::TimestampNanosecond(Some(x), _) => *x == i64::MIN || *x == i64::MAX,
        S::UInt8(Some(x)) => *x == u8::MAX,
        S::UInt16(Some(x)) => *x == u16::MAX,
        S::UInt32(Some(x)) => *x == u32::MAX,
        S::UInt64(Some(x)) => *x == u64::MAX,
        S::Float32(Some(x)) => !x.is_finite(),
        S::Float64(Some(x)) => !x.is_finite(),
        _ => false,
    }
}

/// Exact NULL counts, estimated distinct counts, and min / max for the types with
/// a device layout.
pub(crate) fn column_statistics(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<ColumnStatistics>> {
    use datafusion::functions_aggregate::min_max::{MaxAccumulator, MinAccumulator};
    use datafusion::logical_expr::Accumulator;
    use rayon::prelude::*;
    let fields: Vec<_> = schema.fields().iter().enumerate().collect();
    fields
        .into_par_iter()
        .map(|(i, f)| {
            let mut cs = ColumnStatistics::new_unknown();
            cs.null_count = Precision::Exact(batches.iter().map(|b| b.column(i).null_count()).sum());
            // Distinct counts (HyperLogLog) for the join-order rule; a type the
            // hasher does not take simply has none.
            let cols: Vec<_> = batches.iter().map(|b| b.column(i)).collect();
            if let Ok(d) = crate::hll::distinct_count(&cols) {
                cs.distinct_count = Precision::Inexact(d);
            }
            if crate::gpu_batch::Storage::of(f.data_type()).is_some() && f.data_type() != &arrow::datatypes::DataType::Boolean {
                let mut lo = MinAccumulator::try_new(f.data_type())?;
                let mut hi = MaxAccumulator::try_new(f.data_type())?;
                for b in batches {
                    lo.update_batch(std::slice::from_ref(b.column(i)))?;
                    hi.update_batch(std::slice::from_ref(b.column(i)))?;
                }
                let (lo, hi) = (lo.evaluate()?, hi.evaluate()?);
                // DataFusion's interval analysis raises an overflow error (planning
                // fails) for `-x` when x's minimum is its type's minimum: report no
                // bounds for columns that reach their type's extremes.
                if !lo.is_null() && !at_extreme(&lo) && !at_extreme(&hi) {
                    cs.min_value = Precision::Exact(lo);
                    cs.max_value = Precision::Exact(hi);
                }
            }
            Ok(cs)
        })
        .collect()
}

/// `batches` cut and joined into chunks of at most `chunk_rows` rows (and at least
/// `min_chunks` chunks when there are enough rows, so scans can run in parallel):
/// the chunks of a resident table, and of a [`HostTable`] of the same rows.
pub(crate) fn table_chunks(schema: &SchemaRef, batches: &[RecordBatch], chunk_rows: usize, min_chunks: usize) -> Result<Vec<RecordBatch>> {
    let num_rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let per = chunk_rows.min(num_rows.div_ceil(min_chunks.max(1)).max(8192)).max(1);
    let mut out = Vec::new();
    let mut pending: Vec<RecordBatch> = Vec::new();
    let mut rows = 0;
    for b in batches {
        let mut off = 0;
        while off < b.num_rows() {
            let take = (per - rows).min(b.num_rows() - off);
            pending.push(b.slice(off, take));
            rows += take;
            off += take;
            if rows == per {
                out.push(concat_batches(schema, pending.iter())?);
                pending.clear();
                rows = 0;
            }
        }
    }
    if !pending.is_empty() {
        out.push(concat_batches(schema, pending.iter())?);
    }
    Ok(out)
}

impl ResidentData {
    /// Uploads `batches` as chunks of at most `chunk_rows` rows (and at least
    /// `min_chunks` chunks when there are enough rows, so scans can run in parallel).
    pub fn upload(ctx: &GpuContext, name: &str, schema: SchemaRef, batches: &[RecordBatch], chunk_rows: usize, min_chunks: usize) -> Result<ResidentData> {
        let table = HostData::new(name, schema, batches, chunk_rows, min_chunks)?;
        let chunks = table.host.iter().map(|b| GpuBatch::upload(ctx, b).map(|g| g.with_host(b.clone()))).collect::<Result<Vec<_>>>()?;
        Ok(ResidentData { table, chunks, dicts: Mutex::default() })
    }

    /// The dictionary of string column `col` (built once, in parallel over the
    /// chunks, and cached); `None` when it is not a string column or has more than
    /// [`MAX_DICT_VALUES`] distinct values.
    pub fn string_dict(&self, ctx: &GpuContext, col: usize) -> Result<Option<Arc<StringDict>>> {
        use rayon::prelude::*;
        let mut dicts = self.dicts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(d) = dicts.get(&col) {
            return Ok(d.clone());
        }
        let columns: Vec<&ArrayRef> = self.table.host.iter().map(|b| b.column(col)).collect();
        if strings(self.table.host.first().map(|b| b.column(col)).unwrap_or(&arrow::array::new_empty_array(self.table.schema.field(col).data_type()))).is_none() {
            dicts.insert(col, None);
            return Ok(None);
        }
        // Distinct values per chunk, giving up past the limit.
        let sets: Option<Vec<HashSet<&str>>> = columns
            .par_iter()
            .map(|a| {
                let mut set = HashSet::new();
                for v in strings(a).expect("string column").flatten() {
                    if set.insert(v) && set.len() > MAX_DICT_VALUES {
                        return None;
                    }
                }
                Some(set)
            })
            .collect();
        let mut all: Vec<&str> = match sets {
            Some(sets) => sets.into_iter().flatten().collect::<HashSet<&str>>().into_iter().collect(),
            None => Vec::new(),
        };
        if all.len() > MAX_DICT_VALUES || (all.is_empty() && self.table.column_stats[col].null_count != Precision::Exact(self.table.num_rows)) {
            dicts.insert(col, None);
            return Ok(None);
        }
        all.sort_unstable();
        let index: HashMap<&str, u32> = all.iter().enumerate().map(|(i, v)| (*v, i as u32)).collect();
        let null_code = all.len() as u32;
        let codes: Vec<Vec<u32>> = columns
            .par_iter()
            .map(|a| strings(a).expect("string column").map(|v| v.map_or(null_code, |v| index[v])).collect())
            .collect();
        let seg = ctx.segment_rows();
        let codes = codes
            .iter()
            .map(|c| {
                let values = DeviceArray::upload_segmented(ctx, c, seg).map_err(crate::gpu_batch::gpu_err)?;
                Ok(Arc::new(GpuColumn {
                    data_type: arrow::datatypes::DataType::UInt32,
                    data: ColumnData::Device { storage: Storage::U32, values, validity: None },
                    len: c.len(),
                    null_count: 0,
                }))
            })
            .collect::<Result<Vec<_>>>()?;
        let values: ArrayRef = Arc::new(arrow::array::StringArray::from(all));
        let values = arrow::compute::cast(&values, self.table.schema.field(col).data_type())?;
        let d = Some(Arc::new(StringDict { values, codes }));
        dicts.insert(col, d.clone());
        Ok(d)
    }

    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        self.chunks.iter().map(|c| c.device_bytes()).sum()
    }
}

/// An in-memory table with the statistics of a resident one: the same chunks, the
/// same exact row count, NULL counts and min / max, read by [`HostScanExec`]
/// exactly as a [`GpuScanExec`] reads its host copy. Registered batches use it (in
/// every mode), so DataFusion plans a query over host tables as it plans it over
/// resident ones, and a query that the GPU rules leave alone runs the same plan in
/// both modes. (A plain `MemTable` reports no min / max: its plans differed, and
/// they were slower on TPC-H q7, q18 and q21.)
#[derive(Debug)]
pub struct HostTable {
    data: Arc<HostData>,
}

/// The rows and statistics of a [`HostTable`], and the host copy of a resident table.
#[derive(Debug)]
pub struct HostData {
    /// Table name (for EXPLAIN).
    pub name: String,
    /// Schema.
    pub schema: SchemaRef,
    /// Rows.
    pub num_rows: usize,
    /// Bytes of the registered batches.
    pub host_bytes: usize,
    /// The rows as chunks (see [`table_chunks`]).
    pub host: Vec<RecordBatch>,
    /// Per-column statistics (exact).
    pub column_stats: Vec<ColumnStatistics>,
}

impl HostData {
    /// Chunks `batches` (see [`table_chunks`]) and computes their statistics.
    pub fn new(name: &str, schema: SchemaRef, batches: &[RecordBatch], chunk_rows: usize, min_chunks: usize) -> Result<Self> {
        let num_rows: usize = batches.iter().map(|b| b.num_rows()).sum();
        let host_bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let host = table_chunks(&schema, batches, chunk_rows, min_chunks)?;
        let column_stats = column_statistics(&schema, &host)?;
        Ok(HostData { name: name.to_string(), schema, num_rows, host_bytes, host, column_stats })
    }
}

impl HostData {
    /// Statistics of the whole table: rows, bytes and every column's statistics
    /// (what [`TableProvider::statistics`] answers, for the join-order rule).
    pub fn table_statistics(&self) -> Statistics {
        Statistics {
            num_rows: Precision::Exact(self.num_rows),
            total_byte_size: Precision::Inexact(self.host_bytes),
            column_statistics: self.column_stats.clone(),
        }
    }
}

impl HostTable {
    /// Chunks `batches` like a resident table with `chunk_rows` rows a chunk and at
    /// least `min_chunks` chunks, and computes their statistics.
    pub fn try_new(name: &str, schema: SchemaRef, batches: &[RecordBatch], chunk_rows: usize, min_chunks: usize) -> Result<Self> {
        Ok(HostTable { data: Arc::new(HostData::new(name, schema, batches, chunk_rows, min_chunks)?) })
    }
    /// The rows.
    pub fn data(&self) -> &Arc<HostData> {
        &self.data
    }
}

#[async_trait]
impl TableProvider for HostTable {
    fn schema(&self) -> SchemaRef {
        self.data.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    fn statistics(&self) -> Option<Statistics> {
        Some(self.data.table_statistics())
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let parts = state.config().target_partitions();
        Ok(Arc::new(HostScanExec::try_new(self.data.clone(), projection.cloned(), parts)?))
    }
}

/// A table whose columns live on the GPU.
#[derive(Debug)]
pub struct ResidentTable {
    data: Arc<ResidentData>,
}

impl ResidentTable {
    /// Wraps uploaded data.
    pub fn new(data: ResidentData) -> Self {
        ResidentTable { data: Arc::new(data) }
    }
    /// The device data.
    pub fn data(&self) -> &Arc<ResidentData> {
        &self.data
    }
}

#[async_trait]
impl TableProvider for ResidentTable {
    fn schema(&self) -> SchemaRef {
        self.data.table.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    fn statistics(&self) -> Option<Statistics> {
        Some(self.data.table.table_statistics())
    }
    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let parts = state.config().target_partitions();
        Ok(Arc::new(GpuScanExec::try_new(self.data.clone(), projection.cloned(), parts)?))
    }
}
