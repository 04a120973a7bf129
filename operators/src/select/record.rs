//! Recording and submitting the selection's dispatches: compute passes of
//! recorded dispatches, the call's clock (timestamp queries or wall time, and the
//! profile's phase marks), small readbacks and the call's scratch buffers.
use super::contract::SelectOptions;
use super::kernels::bind;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::transfer::Extent;
use std::sync::Arc;
use std::time::Instant;

/// Workgroup counts of a dispatch: given, or read from a buffer at an offset.
#[derive(Clone)]
pub(super) enum Dims {
    Direct(u32, u32, u32),
    Indirect(wgpu::Buffer, u64),
}

/// One recorded dispatch: pipeline, bind group, workgroup counts.
pub(super) type Dispatch = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, Dims);

/// Records dispatches into one compute pass.
pub(super) struct Rec<'a> {
    ctx: &'a GpuContext,
    list: Vec<Dispatch>,
}

impl<'a> Rec<'a> {
    pub(super) fn new(ctx: &'a GpuContext) -> Self {
        Rec { ctx, list: Vec::new() }
    }
    pub(super) fn dispatch(&mut self, pipe: &Arc<wgpu::ComputePipeline>, entries: &[(u32, &wgpu::Buffer)], groups: u64) -> GpuResult<()> {
        if groups == 0 {
            return Ok(());
        }
        let max = self.ctx.limits().max_compute_workgroups_per_dimension.max(1) as u64;
        if groups > max * max {
            return Err(GpuError::Invalid(format!("dispatch of {groups} workgroups exceeds two dimensions")));
        }
        let bg = lap("bind group", || bind(self.ctx, pipe, entries));
        let (x, y, z) = dispatch_dims(groups, max as u32);
        self.list.push((pipe.clone(), bg, Dims::Direct(x, y, z)));
        Ok(())
    }
    /// A dispatch with a prepared bind group.
    pub(super) fn push(&mut self, pipe: &Arc<wgpu::ComputePipeline>, bg: &wgpu::BindGroup, dims: Dims) {
        self.list.push((pipe.clone(), bg.clone(), dims));
    }
    pub(super) fn encode(&self, enc: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        if self.list.is_empty() && timestamps.is_none() {
            return;
        }
        let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("select"), timestamp_writes: timestamps });
        for (p, bg, dims) in &self.list {
            cp.set_pipeline(p);
            cp.set_bind_group(0, bg, &[]);
            match dims {
                Dims::Direct(x, y, z) => cp.dispatch_workgroups(*x, *y, *z),
                Dims::Indirect(buf, off) => cp.dispatch_workgroups_indirect(buf, *off),
            }
        }
    }
}

/// Whether the selection's profile (log target `ridgeline::profile::select`) is on:
/// host steps slower than 0.1 ms and every phase's wall time are logged.
pub(super) fn profiling() -> bool {
    crate::tuning::profiling!("ridgeline::profile::select")
}

/// Runs `f`, logging its host time when profiling and above 0.1 ms.
pub(super) fn lap<R>(what: &str, f: impl FnOnce() -> R) -> R {
    if !profiling() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if ms > 0.1 {
        log::debug!(target: "ridgeline::profile::select", "host {what}: {ms:.3} ms");
    }
    r
}

pub(super) fn uni<T: bytemuck::Pod>(ctx: &GpuContext, p: &T) -> wgpu::Buffer {
    lap("uniform", || ctx.uniform(p))
}

/// Kernel time of a call: the sum of its compute passes' timestamps where the
/// adapter has timestamp queries, else the wall-clock time of the whole call.
pub(super) struct GpuClock {
    start: Instant,
    kernel_ms: f64,
    timed: bool,
    /// Profiling (see [`profiling`]): wait after each phase and log its wall time.
    profile: Option<Instant>,
}

impl GpuClock {
    /// A clock for one call; kernel times by timestamp queries when
    /// `opts.timestamps` asks for them (see [`SelectOptions::timestamps`]).
    pub(super) fn new(ctx: &GpuContext, opts: &SelectOptions) -> Self {
        GpuClock {
            start: Instant::now(),
            kernel_ms: 0.0,
            timed: ctx.has_timestamps() && opts.timestamps,
            profile: profiling().then(Instant::now),
        }
    }
    /// When profiling: waits for the device and logs the wall time since the
    /// previous mark (a diagnosis aid; it serialises the phases).
    pub(super) fn mark(&mut self, ctx: &GpuContext, what: std::fmt::Arguments<'_>) -> GpuResult<()> {
        if let Some(t) = self.profile {
            ctx.wait()?;
            log::debug!(target: "ridgeline::profile::select", "{what}: {:.3} ms", t.elapsed().as_secs_f64() * 1e3);
            self.profile = Some(Instant::now());
        }
        Ok(())
    }
    /// Encodes `recs` as one compute pass each (timed), submits `enc`.
    pub(super) fn submit(&mut self, ctx: &GpuContext, mut enc: wgpu::CommandEncoder, recs: &[&Rec<'_>]) -> GpuResult<()> {
        let timer = if self.timed { crate::timing::KernelTimer::new(ctx, recs.len() as u32) } else { None };
        for (i, r) in recs.iter().enumerate() {
            r.encode(&mut enc, timer.as_ref().and_then(|t| t.writes(i as u32)));
        }
        if let Some(t) = &timer {
            t.resolve(&mut enc);
        }
        lap("submit", || ctx.submit(enc))?;
        if let Some(t) = timer {
            self.kernel_ms += t.read_ms(ctx)?.iter().sum::<f64>();
        }
        Ok(())
    }
    pub(super) fn ms(&self) -> f64 {
        if self.timed {
            self.kernel_ms
        } else {
            self.start.elapsed().as_secs_f64() * 1e3
        }
    }
}

/// Reads `count` elements of `T` from the start of `buf`.
pub(super) fn read_buf<T: bytemuck::Pod + Default>(ctx: &GpuContext, buf: &wgpu::Buffer, count: usize) -> GpuResult<Vec<T>> {
    let mut v = vec![T::default(); count];
    let bytes = (count * std::mem::size_of::<T>()) as u64;
    if bytes == 0 {
        return Ok(v);
    }
    if !bytes.is_multiple_of(4) {
        return Err(GpuError::Invalid("readback of a size that is not a multiple of 4".into()));
    }
    lap("download", || ctx.download_stream(&[Extent { buffer: buf, offset: 0, stream_offset: 0, len: bytes }], bytemuck::cast_slice_mut(&mut v)))?;
    Ok(v)
}

/// Scratch allocations of one call, with their byte total.
pub(super) struct Scratch<'a> {
    pub(super) ctx: &'a GpuContext,
    pub(super) bytes: u64,
}

impl Scratch<'_> {
    pub(super) fn alloc(&mut self, bytes: u64) -> GpuResult<GpuBuffer> {
        let b = lap("alloc", || self.ctx.pool().alloc(bytes.max(4).div_ceil(4) * 4))?;
        self.bytes += b.size();
        Ok(b)
    }
    pub(super) fn with_data(&mut self, data: &[u8]) -> GpuResult<GpuBuffer> {
        let b = self.alloc(data.len() as u64)?;
        if !data.is_empty() {
            lap("small write", || self.ctx.write_small(b.raw(), 0, data))?;
        }
        Ok(b)
    }
}
