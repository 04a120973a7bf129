//! Device arrays split into segments at the binding limit.
//!
//! A `DeviceArray` of `len` elements is stored as segments of `seg_rows` elements
//! each (the last one shorter). Every segment is its own buffer and fits one
//! storage binding, so kernels launch once per segment and never bind more than the
//! adapter allows. Columns of a batch share `seg_rows`, so segment `k` of every
//! column holds the same rows.
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::transfer::{BytesSource, Extent, UploadSource};

/// A device array of fixed-size elements (4 or 8 bytes).
#[derive(Debug)]
pub struct DeviceArray {
    segs: Vec<GpuBuffer>,
    len: usize,
    elem: usize,
    seg_rows: usize,
}

const COPY_WG: u32 = 256;
const COPY_ITEMS: u32 = 4;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CopyParams {
    src_off: u32,
    dst_off: u32,
    n: u32,
    grid: u32,
}

impl DeviceArray {
    /// An uninitialised array with the context's segment size.
    pub fn alloc(ctx: &GpuContext, len: usize, elem: usize) -> GpuResult<Self> {
        Self::alloc_segmented(ctx, len, elem, ctx.segment_rows())
    }

    /// An uninitialised array with `seg_rows` elements per segment (tests use small
    /// segments to exercise the split; validity bitmaps use `segment_rows / 32`).
    pub fn alloc_segmented(ctx: &GpuContext, len: usize, elem: usize, seg_rows: usize) -> GpuResult<Self> {
        if elem != 4 && elem != 8 {
            return Err(GpuError::Invalid(format!("element size {elem} (expected 4 or 8)")));
        }
        if seg_rows == 0 || seg_rows % 4 != 0 {
            return Err(GpuError::Invalid(format!("segment of {seg_rows} rows (expected a positive multiple of 4)")));
        }
        let max_binding = (ctx.limits().max_storage_buffer_binding_size as u64).min((1 << 31) - 1);
        if (seg_rows * elem) as u64 > max_binding {
            return Err(GpuError::Invalid(format!(
                "segment of {seg_rows} x {elem} bytes exceeds the binding limit {max_binding}"
            )));
        }
        let mut segs = Vec::new();
        let mut left = len;
        while left > 0 {
            let rows = left.min(seg_rows);
            segs.push(ctx.pool().alloc((rows * elem) as u64)?);
            left -= rows;
        }
        Ok(DeviceArray { segs, len, elem, seg_rows })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the array is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Bytes per element.
    pub fn elem_size(&self) -> usize {
        self.elem
    }
    /// Elements per segment.
    pub fn seg_rows(&self) -> usize {
        self.seg_rows
    }
    /// Number of segments.
    pub fn num_segments(&self) -> usize {
        self.segs.len()
    }
    /// Segment `i`: its buffer, first element and element count.
    pub fn segment(&self, i: usize) -> (&wgpu::Buffer, usize, usize) {
        let start = i * self.seg_rows;
        (self.segs[i].raw(), start, (self.len - start).min(self.seg_rows))
    }
    /// Device bytes held (size classes included).
    pub fn device_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.size()).sum()
    }

    /// The extents of the logical byte stream (element 0 first), padded to 4 bytes.
    pub fn extents(&self) -> Vec<Extent<'_>> {
        (0..self.segs.len())
            .map(|i| {
                let (buf, start, rows) = self.segment(i);
                Extent {
                    buffer: buf,
                    offset: 0,
                    stream_offset: (start * self.elem) as u64,
                    len: ((rows * self.elem) as u64).div_ceil(4) * 4,
                }
            })
            .collect()
    }

    /// Uploads `data` (4- or 8-byte elements).
    pub fn upload<T: bytemuck::Pod>(ctx: &GpuContext, data: &[T]) -> GpuResult<Self> {
        Self::upload_segmented(ctx, data, ctx.segment_rows())
    }

    /// Uploads `data` with `seg_rows` elements per segment.
    pub fn upload_segmented<T: bytemuck::Pod>(ctx: &GpuContext, data: &[T], seg_rows: usize) -> GpuResult<Self> {
        let arr = Self::alloc_segmented(ctx, data.len(), std::mem::size_of::<T>(), seg_rows)?;
        ctx.upload_stream(&BytesSource(bytemuck::cast_slice(data)), &arr.extents())?;
        Ok(arr)
    }

    /// Uploads `len` elements of `elem` bytes produced by `src`.
    pub fn upload_from(ctx: &GpuContext, len: usize, elem: usize, seg_rows: usize, src: &dyn UploadSource) -> GpuResult<Self> {
        let arr = Self::alloc_segmented(ctx, len, elem, seg_rows)?;
        if src.len_bytes() != ((len * elem) as u64).div_ceil(4) * 4 {
            return Err(GpuError::Invalid(format!(
                "upload source has {} bytes for {len} elements of {elem} bytes",
                src.len_bytes()
            )));
        }
        ctx.upload_stream(src, &arr.extents())?;
        Ok(arr)
    }

    /// Reads the array back into `dst` (exactly `len * elem` bytes).
    pub fn download_into(&self, ctx: &GpuContext, dst: &mut [u8]) -> GpuResult<()> {
        if dst.len() != self.len * self.elem {
            return Err(GpuError::Invalid(format!("download into {} bytes of a {}-byte array", dst.len(), self.len * self.elem)));
        }
        if self.len == 0 {
            return Ok(());
        }
        ctx.download_stream(&self.extents(), dst)
    }

    /// Reads the array back as `T` (whose size must be the element size).
    pub fn download<T: bytemuck::Pod + Default>(&self, ctx: &GpuContext) -> GpuResult<Vec<T>> {
        if std::mem::size_of::<T>() != self.elem {
            return Err(GpuError::Invalid(format!("download as {}-byte elements of a {}-byte array", std::mem::size_of::<T>(), self.elem)));
        }
        let mut out = vec![T::default(); self.len];
        self.download_into(ctx, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// A device copy of the whole array (same segmentation), by the copy kernel.
    pub fn duplicate(&self, ctx: &GpuContext) -> GpuResult<DeviceArray> {
        let out = Self::alloc_segmented(ctx, self.len, self.elem, self.seg_rows)?;
        copy_elements(ctx, self, 0, &out, 0, self.len)?;
        Ok(out)
    }
}

/// Copies `n` elements from `src[src_start..]` to `dst[dst_start..]` on the device
/// with the copy kernel, splitting at segment boundaries of both arrays and at the
/// workgroup-count limit. Both arrays must have the same element size.
pub fn copy_elements(ctx: &GpuContext, src: &DeviceArray, src_start: usize, dst: &DeviceArray, dst_start: usize, n: usize) -> GpuResult<()> {
    let dispatches = copy_dispatches(ctx, src, src_start, dst, dst_start, n)?;
    if dispatches.is_empty() {
        return Ok(());
    }
    let mut enc = ctx.encoder("copy");
    record_copies(&mut enc, &dispatches, None);
    ctx.submit(enc)?;
    Ok(())
}

/// Whole-array copies `src -> dst` of every pair, all recorded into one compute
/// pass timed as pass 0 of `timer`, submitted: the streaming rate a kernel that
/// reads and writes the same bytes can reach (`bench partition`'s floor). Read the
/// time with `timer.read_ms`.
pub fn copy_arrays_timed(ctx: &GpuContext, pairs: &[(&DeviceArray, &DeviceArray)], timer: Option<&crate::timing::KernelTimer>) -> GpuResult<()> {
    let mut dispatches = Vec::new();
    for (src, dst) in pairs {
        dispatches.extend(copy_dispatches(ctx, src, 0, dst, 0, src.len)?);
    }
    let mut enc = ctx.encoder("copy-timed");
    record_copies(&mut enc, &dispatches, timer.and_then(|t| t.writes(0)));
    if let Some(t) = timer {
        t.resolve(&mut enc);
    }
    ctx.submit(enc)?;
    Ok(())
}

/// One dispatch of the copy kernel: pipeline, bind group (which keeps its
/// buffers and uniform alive) and workgroup counts.
struct CopyDispatch {
    pipe: std::sync::Arc<wgpu::ComputePipeline>,
    bind: wgpu::BindGroup,
    dims: (u32, u32, u32),
}

fn copy_dispatches(ctx: &GpuContext, src: &DeviceArray, src_start: usize, dst: &DeviceArray, dst_start: usize, n: usize) -> GpuResult<Vec<CopyDispatch>> {
    if src.elem != dst.elem {
        return Err(GpuError::Invalid("copy between arrays of different element sizes".into()));
    }
    if src_start + n > src.len || dst_start + n > dst.len {
        return Err(GpuError::Invalid(format!(
            "copy of {n} elements from {src_start} (of {}) to {dst_start} (of {})",
            src.len, dst.len
        )));
    }
    let mut out = Vec::new();
    if n == 0 {
        return Ok(out);
    }
    let words_per = src.elem / 4;
    let defs = [("WG", COPY_WG.to_string()), ("ITEMS", COPY_ITEMS.to_string())];
    let p4 = ctx.pipeline("copy", include_str!("../../shaders/copy.wgsl"), "copy_vec4", &defs)?;
    let p1 = ctx.pipeline("copy_words", include_str!("../../shaders/copy_words.wgsl"), "copy_words", &defs)?;
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    let mut done = 0usize;
    while done < n {
        let (si, so) = ((src_start + done) / src.seg_rows, (src_start + done) % src.seg_rows);
        let (di, doff) = ((dst_start + done) / dst.seg_rows, (dst_start + done) % dst.seg_rows);
        let (sbuf, _, srows) = src.segment(si);
        let (dbuf, _, drows) = dst.segment(di);
        let m = (n - done).min(srows - so).min(drows - doff);
        let (sw, dw, nw) = (so * words_per, doff * words_per, m * words_per);
        let vec4 = sw % 4 == 0 && dw % 4 == 0 && nw % 4 == 0;
        let (pipe, unit) = if vec4 { (&p4, 4) } else { (&p1, 1) };
        let elems = (nw / unit) as u64;
        let groups = elems.div_ceil((COPY_WG * COPY_ITEMS) as u64);
        let dims = dispatch_dims(groups, max_dim);
        let grid = (dims.0 as u64 * dims.1 as u64 * COPY_WG as u64) as u32;
        let ub = ctx.uniform(&CopyParams { src_off: (sw / unit) as u32, dst_off: (dw / unit) as u32, n: elems as u32, grid });
        let bind = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("copy"),
            layout: &pipe.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: sbuf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dbuf.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: ub.as_entire_binding() },
            ],
        });
        out.push(CopyDispatch { pipe: pipe.clone(), bind, dims });
        done += m;
    }
    Ok(out)
}

/// Records the dispatches into one compute pass (they write disjoint ranges).
fn record_copies(enc: &mut wgpu::CommandEncoder, dispatches: &[CopyDispatch], timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("copy"), timestamp_writes: timestamps });
    for d in dispatches {
        pass.set_pipeline(&d.pipe);
        pass.set_bind_group(0, &d.bind, &[]);
        pass.dispatch_workgroups(d.dims.0, d.dims.1, d.dims.2);
    }
}
