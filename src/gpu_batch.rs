//! Arrow data on the GPU: [`GpuColumn`] and [`GpuBatch`].
//!
//! Device layouts (so kernels see at most three element kinds):
//! - Int8/Int16/Int32/Date32 as `i32`; UInt8/UInt16/UInt32 as `u32`; Float32 as `f32`;
//! - Int64/Date64/Timestamp/Duration as `i64`; UInt64 as `u64`; Float64 as `f64`;
//! - Decimal128 with precision up to 18 as its scaled value in an `i64`;
//! - Boolean as a bitmap of `u32` words (bit `i % 32` of word `i / 32`, like Arrow);
//! - validity, when the column has NULLs, as the same kind of bitmap;
//! - other types (strings, nested) stay in host memory beside the device columns.
//!
//! Narrow integers are widened on upload and narrowed on download, so a round trip
//! is bit-identical. Every column of a batch is split into segments at the same row
//! boundaries (`GpuContext::segment_rows`), so segment `k` of every column holds
//! the same rows and fits one storage binding.
use arrow::array::{make_array, Array, ArrayData, ArrayRef, RecordBatch};
use arrow::buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow::datatypes::{DataType, SchemaRef};
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::transfer::UploadSource;
use ridgeline_operators::{DeviceArray, GpuContext, GpuError};
use std::sync::Arc;

/// How a column's values are stored on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Storage {
    /// 32-bit signed (Int8, Int16, Int32, Date32).
    I32,
    /// 32-bit unsigned (UInt8, UInt16, UInt32).
    U32,
    /// 32-bit float.
    F32,
    /// 64-bit signed (Int64, Date64, Timestamp, Duration, Decimal128 p <= 18).
    I64,
    /// 64-bit unsigned.
    U64,
    /// 64-bit float.
    F64,
    /// Bitmap of u32 words.
    Bool,
}

impl Storage {
    /// The device storage of an Arrow type, or `None` when it has none.
    pub fn of(dt: &DataType) -> Option<Storage> {
        use DataType::*;
        Some(match dt {
            Int8 | Int16 | Int32 | Date32 => Storage::I32,
            UInt8 | UInt16 | UInt32 => Storage::U32,
            Float32 => Storage::F32,
            Int64 | Date64 | Timestamp(_, _) | Duration(_) => Storage::I64,
            Decimal128(p, _) if *p <= 18 => Storage::I64,
            UInt64 => Storage::U64,
            Float64 => Storage::F64,
            Boolean => Storage::Bool,
            _ => return None,
        })
    }
    /// Bytes per element on the device (bitmaps: per word).
    pub fn elem_size(self) -> usize {
        match self {
            Storage::I32 | Storage::U32 | Storage::F32 | Storage::Bool => 4,
            _ => 8,
        }
    }
}

/// Whether a column of this type can live on the GPU.
pub fn gpu_supported(dt: &DataType) -> bool {
    Storage::of(dt).is_some()
}

/// Converts a GPU error into a DataFusion error that names the GPU.
pub fn gpu_err(e: GpuError) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// Whether a DataFusion error came from the GPU (and the work may be retried on the CPU).
pub fn is_gpu_error(e: &DataFusionError) -> bool {
    match e {
        DataFusionError::External(b) => b.downcast_ref::<GpuError>().is_some_and(|g| g.should_fall_back()),
        DataFusionError::Context(_, inner) => is_gpu_error(inner),
        DataFusionError::Shared(inner) => is_gpu_error(inner),
        _ => false,
    }
}

/// Where a column's data is.
#[derive(Debug)]
pub enum ColumnData {
    /// On the device.
    Device {
        /// Device storage kind.
        storage: Storage,
        /// Values (or a bitmap for Boolean).
        values: DeviceArray,
        /// Validity bitmap, `None` when there are no NULLs.
        validity: Option<DeviceArray>,
    },
    /// Kept in host memory: types without a device layout (strings, nested types)
    /// travel beside the device columns, so a batch can be partly resident.
    Host(ArrayRef),
}

/// A column of a [`GpuBatch`].
#[derive(Debug)]
pub struct GpuColumn {
    /// The Arrow type it came from and goes back to.
    pub data_type: DataType,
    /// The data.
    pub data: ColumnData,
    /// Rows.
    pub len: usize,
    /// NULLs.
    pub null_count: usize,
}

impl GpuColumn {
    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        match &self.data {
            ColumnData::Device { values, validity, .. } => values.device_bytes() + validity.as_ref().map_or(0, |v| v.device_bytes()),
            ColumnData::Host(_) => 0,
        }
    }
    /// Whether the column is on the device.
    pub fn on_device(&self) -> bool {
        matches!(self.data, ColumnData::Device { .. })
    }
}

/// A batch on the device: what GPU operators hand to each other.
#[derive(Debug, Clone)]
pub struct GpuBatch {
    /// Schema.
    pub schema: SchemaRef,
    /// Columns, shared (a projection clones the `Arc`s, not the data).
    pub columns: Vec<Arc<GpuColumn>>,
    /// Rows.
    pub num_rows: usize,
    /// The same rows in host memory, where the batch came from there (an upload,
    /// a resident table's host copy): what a GPU operator that fails on this
    /// batch finishes it from on the CPU. Its schema is the batch's, less any
    /// columns appended for the device only (dictionary codes).
    pub host: Option<RecordBatch>,
}

impl GpuBatch {
    /// A batch whose columns all stay in host memory (what a GPU operator hands
    /// on for rows it processed on the CPU).
    pub fn from_host(batch: RecordBatch) -> GpuBatch {
        let columns = batch
            .columns()
            .iter()
            .map(|a| {
                Arc::new(GpuColumn { data_type: a.data_type().clone(), len: a.len(), null_count: a.null_count(), data: ColumnData::Host(a.clone()) })
            })
            .collect();
        GpuBatch { schema: batch.schema(), columns, num_rows: batch.num_rows(), host: Some(batch) }
    }
    /// Whether the batch has columns and none of them is on the device.
    pub fn host_only(&self) -> bool {
        !self.columns.is_empty() && self.columns.iter().all(|c| !c.on_device())
    }
    /// The batch with its host copy attached.
    pub fn with_host(mut self, host: RecordBatch) -> GpuBatch {
        self.host = Some(host);
        self
    }
    /// The rows in host memory: the host copy, else downloaded.
    pub fn to_host(&self, ctx: &GpuContext) -> Result<RecordBatch> {
        match &self.host {
            Some(h) if h.num_columns() == self.columns.len() => Ok(h.clone()),
            _ => self.download(ctx),
        }
    }
    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        self.columns.iter().map(|c| c.device_bytes()).sum()
    }
    /// The batch restricted to `indices` columns.
    pub fn project(&self, indices: &[usize]) -> Result<GpuBatch> {
        Ok(GpuBatch {
            schema: Arc::new(self.schema.project(indices)?),
            columns: indices.iter().map(|&i| self.columns[i].clone()).collect(),
            num_rows: self.num_rows,
            host: match &self.host {
                Some(h) if indices.iter().all(|&i| i < h.num_columns()) => Some(h.project(indices)?),
                _ => None,
            },
        })
    }

    /// Uploads a record batch (one staged transfer per buffer).
    pub fn upload(ctx: &GpuContext, batch: &RecordBatch) -> Result<GpuBatch> {
        let columns = batch
            .columns()
            .iter()
            .map(|c| upload_column(ctx, c).map(Arc::new))
            .collect::<Result<Vec<_>>>()?;
        Ok(GpuBatch { schema: batch.schema(), columns, num_rows: batch.num_rows(), host: None })
    }

    /// Downloads the whole batch.
    pub fn download(&self, ctx: &GpuContext) -> Result<RecordBatch> {
        let arrays = self.columns.iter().map(|c| download_column(ctx, c)).collect::<Result<Vec<_>>>()?;
        let opts = arrow::array::RecordBatchOptions::new().with_row_count(Some(self.num_rows));
        Ok(RecordBatch::try_new_with_options(self.schema.clone(), arrays, &opts)?)
    }
}

/// Upload source that converts `n` elements on the fly (widening, decimal narrowing).
struct Convert<'a, S, D, F: Fn(S) -> D + Sync> {
    src: &'a [S],
    f: F,
    _d: std::marker::PhantomData<D>,
}

impl<S: Copy + Sync, D: bytemuck::Pod + Default + Sync, F: Fn(S) -> D + Sync> UploadSource for Convert<'_, S, D, F> {
    fn len_bytes(&self) -> u64 {
        (self.src.len() * std::mem::size_of::<D>()) as u64
    }
    fn write(&self, offset: u64, mut dst: ridgeline_operators::wgpu::WriteOnly<'_, [u8]>) {
        let es = std::mem::size_of::<D>();
        let first = offset as usize / es;
        let n = dst.len() / es;
        let mut tmp: Vec<D> = Vec::with_capacity(n);
        tmp.extend(self.src[first..first + n].iter().map(|&v| (self.f)(v)));
        dst.copy_from_slice(bytemuck::cast_slice(&tmp));
    }
}

fn convert<'a, S: Copy + Sync, D: bytemuck::Pod + Default + Sync>(
    src: &'a [S],
    f: impl Fn(S) -> D + Sync + 'a,
) -> Convert<'a, S, D, impl Fn(S) -> D + Sync + 'a> {
    Convert { src, f, _d: std::marker::PhantomData }
}

fn upload_bitmap(ctx: &GpuContext, bits: &BooleanBuffer) -> Result<DeviceArray> {
    // `sliced` realigns a bitmap with a non-zero offset so bit 0 is row 0.
    let buf = bits.sliced();
    let words = bits.len().div_ceil(32);
    // BytesSource pads the bitmap's bytes with zeros up to whole words.
    let bytes = &buf.as_slice()[..bits.len().div_ceil(8)];
    let seg = ctx.segment_rows() / 32;
    DeviceArray::upload_from(ctx, words, 4, seg, &ridgeline_operators::transfer::BytesSource(bytes)).map_err(gpu_err)
}

/// Uploads one Arrow array; types without a device layout stay on the host.
pub fn upload_column(ctx: &GpuContext, array: &ArrayRef) -> Result<GpuColumn> {
    if Storage::of(array.data_type()).is_none() {
        return Ok(GpuColumn { data_type: array.data_type().clone(), len: array.len(), null_count: array.null_count(), data: ColumnData::Host(array.clone()) });
    }
    upload_array(ctx, array.as_ref())
}

/// Uploads one Arrow array of a type with a device layout.
pub fn upload_array(ctx: &GpuContext, array: &dyn Array) -> Result<GpuColumn> {
    use arrow::array::*;
    use arrow::datatypes::*;
    let dt = array.data_type().clone();
    let storage = Storage::of(&dt)
        .ok_or_else(|| DataFusionError::NotImplemented(format!("GPU columns of type {dt}")))?;
    let len = array.len();
    let seg = ctx.segment_rows();

    fn bytes_of<T: ArrowPrimitiveType>(a: &dyn Array) -> &[u8] {
        let v = a.as_primitive::<T>().values();
        let s: &[T::Native] = v;
        // SAFETY: Arrow native types are plain old data.
        unsafe { std::slice::from_raw_parts(s.as_ptr() as *const u8, std::mem::size_of_val(s)) }
    }
    let up = |src: &dyn UploadSource, es: usize| DeviceArray::upload_from(ctx, len, es, seg, src).map_err(gpu_err);
    let raw = |bytes: &[u8], es: usize| up(&ridgeline_operators::transfer::BytesSource(bytes), es);
    let values = match &dt {
        DataType::Int8 => up(&convert(array.as_primitive::<Int8Type>().values(), |v: i8| v as i32), 4)?,
        DataType::Int16 => up(&convert(array.as_primitive::<Int16Type>().values(), |v: i16| v as i32), 4)?,
        DataType::UInt8 => up(&convert(array.as_primitive::<UInt8Type>().values(), |v: u8| v as u32), 4)?,
        DataType::UInt16 => up(&convert(array.as_primitive::<UInt16Type>().values(), |v: u16| v as u32), 4)?,
        DataType::Int32 => raw(bytes_of::<Int32Type>(array), 4)?,
        DataType::Date32 => raw(bytes_of::<Date32Type>(array), 4)?,
        DataType::UInt32 => raw(bytes_of::<UInt32Type>(array), 4)?,
        DataType::Float32 => raw(bytes_of::<Float32Type>(array), 4)?,
        DataType::Int64 => raw(bytes_of::<Int64Type>(array), 8)?,
        DataType::Date64 => raw(bytes_of::<Date64Type>(array), 8)?,
        DataType::UInt64 => raw(bytes_of::<UInt64Type>(array), 8)?,
        DataType::Float64 => raw(bytes_of::<Float64Type>(array), 8)?,
        DataType::Timestamp(u, _) => match u {
            TimeUnit::Second => raw(bytes_of::<TimestampSecondType>(array), 8)?,
            TimeUnit::Millisecond => raw(bytes_of::<TimestampMillisecondType>(array), 8)?,
            TimeUnit::Microsecond => raw(bytes_of::<TimestampMicrosecondType>(array), 8)?,
            TimeUnit::Nanosecond => raw(bytes_of::<TimestampNanosecondType>(array), 8)?,
        },
        DataType::Duration(u) => match u {
            TimeUnit::Second => raw(bytes_of::<DurationSecondType>(array), 8)?,
            TimeUnit::Millisecond => raw(bytes_of::<DurationMillisecondType>(array), 8)?,
            TimeUnit::Microsecond => raw(bytes_of::<DurationMicrosecondType>(array), 8)?,
            TimeUnit::Nanosecond => raw(bytes_of::<DurationNanosecondType>(array), 8)?,
        },
        // Precision <= 18 fits an i64 exactly (|v| < 10^18 < 2^63).
        DataType::Decimal128(_, _) => up(&convert(array.as_primitive::<Decimal128Type>().values(), |v: i128| v as i64), 8)?,
        DataType::Boolean => upload_bitmap(ctx, array.as_boolean().values())?,
        other => return Err(DataFusionError::NotImplemented(format!("GPU columns of type {other}"))),
    };
    let validity = match array.logical_nulls() {
        Some(n) if n.null_count() > 0 => Some(upload_bitmap(ctx, n.inner())?),
        _ => None,
    };
    Ok(GpuColumn { data_type: dt, data: ColumnData::Device { storage, values, validity }, len, null_count: array.null_count() })
}

fn download_vec<T: bytemuck::Pod + Default>(ctx: &GpuContext, a: &DeviceArray) -> Result<Vec<T>> {
    a.download::<T>(ctx).map_err(gpu_err)
}

fn bitmap(ctx: &GpuContext, a: &DeviceArray, len: usize) -> Result<BooleanBuffer> {
    let words: Vec<u32> = download_vec(ctx, a)?;
    Ok(BooleanBuffer::new(Buffer::from_vec(words), 0, len))
}

/// Downloads one column into an Arrow array of its original type.
pub fn download_column(ctx: &GpuContext, col: &GpuColumn) -> Result<ArrayRef> {
    let len = col.len;
    let (storage, values, validity) = match &col.data {
        ColumnData::Host(a) => return Ok(a.clone()),
        ColumnData::Device { storage, values, validity } => (*storage, values, validity),
    };
    let nulls = match validity {
        Some(v) => Some(NullBuffer::new(bitmap(ctx, v, len)?)),
        None => None,
    };
    let values: Buffer = match (&col.data_type, storage) {
        (DataType::Int8, _) => Buffer::from_vec(download_vec::<i32>(ctx, values)?.into_iter().map(|v| v as i8).collect::<Vec<_>>()),
        (DataType::Int16, _) => Buffer::from_vec(download_vec::<i32>(ctx, values)?.into_iter().map(|v| v as i16).collect::<Vec<_>>()),
        (DataType::UInt8, _) => Buffer::from_vec(download_vec::<u32>(ctx, values)?.into_iter().map(|v| v as u8).collect::<Vec<_>>()),
        (DataType::UInt16, _) => Buffer::from_vec(download_vec::<u32>(ctx, values)?.into_iter().map(|v| v as u16).collect::<Vec<_>>()),
        (DataType::Decimal128(_, _), _) => Buffer::from_vec(download_vec::<i64>(ctx, values)?.into_iter().map(|v| v as i128).collect::<Vec<_>>()),
        (DataType::Boolean, _) => {
            let bits = bitmap(ctx, values, len)?;
            let data = ArrayData::builder(DataType::Boolean).len(len).add_buffer(bits.into_inner()).nulls(nulls).build()?;
            return Ok(make_array(data));
        }
        (_, Storage::I32 | Storage::U32 | Storage::F32) => Buffer::from_vec(download_vec::<u32>(ctx, values)?),
        (_, _) => Buffer::from_vec(download_vec::<u64>(ctx, values)?),
    };
    let data = ArrayData::builder(col.data_type.clone()).len(len).add_buffer(values).nulls(nulls).build()?;
    Ok(make_array(data))
}

/// A key column in host memory as the device stores it (what the GPU hashes and
/// compares): 4-byte keys as their 32-bit patterns (narrow integers sign- or
/// zero-extended first, as on upload), 8-byte keys (decimals of at most 18 digits
/// as their scaled `i64`) as 64-bit patterns.
pub(crate) enum KeyWords {
    /// 4-byte keys.
    W32(Vec<u32>),
    /// 8-byte keys.
    W64(Vec<u64>),
}

impl KeyWords {
    /// The words of `a`, an integer, date, timestamp, duration or decimal (p <= 18) column.
    pub(crate) fn of(a: &dyn Array) -> Result<KeyWords> {
        use arrow::array::AsArray;
        use arrow::datatypes::*;
        Ok(match a.data_type() {
            DataType::Int8 => KeyWords::W32(a.as_primitive::<Int8Type>().values().iter().map(|&v| v as i32 as u32).collect()),
            DataType::Int16 => KeyWords::W32(a.as_primitive::<Int16Type>().values().iter().map(|&v| v as i32 as u32).collect()),
            DataType::Int32 => KeyWords::W32(a.as_primitive::<Int32Type>().values().iter().map(|&v| v as u32).collect()),
            DataType::Date32 => KeyWords::W32(a.as_primitive::<Date32Type>().values().iter().map(|&v| v as u32).collect()),
            DataType::UInt8 => KeyWords::W32(a.as_primitive::<UInt8Type>().values().iter().map(|&v| v as u32).collect()),
            DataType::UInt16 => KeyWords::W32(a.as_primitive::<UInt16Type>().values().iter().map(|&v| v as u32).collect()),
            DataType::UInt32 => KeyWords::W32(a.as_primitive::<UInt32Type>().values().to_vec()),
            DataType::Int64 => KeyWords::W64(a.as_primitive::<Int64Type>().values().iter().map(|&v| v as u64).collect()),
            DataType::UInt64 => KeyWords::W64(a.as_primitive::<UInt64Type>().values().to_vec()),
            DataType::Decimal128(p, _) if *p <= 18 => {
                KeyWords::W64(a.as_primitive::<Decimal128Type>().values().iter().map(|&v| v as i64 as u64).collect())
            }
            DataType::Date64 | DataType::Timestamp(_, _) | DataType::Duration(_) => {
                let d = a.to_data();
                let vals: &[i64] = d.buffer::<i64>(0);
                KeyWords::W64(vals[d.offset()..d.offset() + d.len()].iter().map(|&v| v as u64).collect())
            }
            other => return Err(DataFusionError::Internal(format!("a key of type {other} has no device words"))),
        })
    }
}

/// Arrow-style validity words of `a` (bit `i % 32` of word `i / 32` set for a
/// valid row `i`), `None` without NULLs.
pub(crate) fn validity_words(a: &dyn Array) -> Option<Vec<u32>> {
    let nulls = a.logical_nulls().filter(|n| n.null_count() > 0)?;
    let bits = nulls.inner().sliced();
    let bytes = &bits.as_slice()[..a.len().div_ceil(8)];
    let mut words = vec![0u32; a.len().div_ceil(32)];
    for (i, b) in bytes.iter().enumerate() {
        words[i / 4] |= (*b as u32) << (8 * (i % 4));
    }
    Some(words)
}
