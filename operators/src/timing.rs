//! Kernel timing with timestamp queries, where the adapter has them.
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};

/// Milliseconds of work a benchmark runs before timing (see the constant's
/// documentation for the measurement).
pub use crate::tuning::device::WARM_UP_MS;

/// Runs `f` at least once and then again until `min_ms` have passed (at most 1000
/// runs): the warm-up before a timed measurement (pipelines compiled, caches and
/// clocks up).
pub fn warm_up<E>(min_ms: f64, mut f: impl FnMut() -> Result<(), E>) -> Result<(), E> {
    let t = std::time::Instant::now();
    f()?;
    let mut runs = 1;
    while t.elapsed().as_secs_f64() * 1e3 < min_ms && runs < 1000 {
        f()?;
        runs += 1;
    }
    Ok(())
}

/// Times compute passes: pass `i` writes timestamps `2i` and `2i+1`.
pub struct KernelTimer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    read: wgpu::Buffer,
    passes: u32,
    period_ns: f64,
}

impl KernelTimer {
    /// A timer for up to `passes` passes, or `None` without TIMESTAMP_QUERY or with
    /// `RIDGELINE_TIMESTAMPS=0`. On the H100's driver a timer costs tens of
    /// milliseconds of host time (query set, buffers, readback): a benchmark that
    /// makes one per call leaves the GPU idle enough to drop its clock, and its
    /// kernels then run up to 4x slower (docs/benchmarks/history/session-12.md). Wall times
    /// without timers are the figures to quote.
    pub fn new(ctx: &GpuContext, passes: u32) -> Option<KernelTimer> {
        if !ctx.has_timestamps() || passes == 0 || crate::tuning::flag("RIDGELINE_TIMESTAMPS") == Some(false) {
            return None;
        }
        let count = passes * 2;
        let set = ctx.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("ridgeline-timer"),
            ty: wgpu::QueryType::Timestamp,
            count,
        });
        let bytes = count as u64 * 8;
        let resolve = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timer-resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = ctx.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timer-read"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Some(KernelTimer { set, resolve, read, passes, period_ns: ctx.queue.get_timestamp_period() as f64 })
    }

    /// Timestamp writes for pass `i`.
    pub fn writes(&self, i: u32) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        (i < self.passes).then(|| wgpu::ComputePassTimestampWrites {
            query_set: &self.set,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        })
    }

    /// Encodes the resolve; call after the timed passes, before submitting.
    pub fn resolve(&self, enc: &mut wgpu::CommandEncoder) {
        enc.resolve_query_set(&self.set, 0..self.passes * 2, &self.resolve, 0);
        enc.copy_buffer_to_buffer(&self.resolve, 0, &self.read, 0, self.passes as u64 * 16);
    }

    /// Milliseconds of each pass (after the submission that resolved them).
    pub fn read_ms(&self, ctx: &GpuContext) -> GpuResult<Vec<f64>> {
        let slice = self.read.slice(..);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        ctx.wait()?;
        rx.recv()
            .map_err(|e| GpuError::Map(e.to_string()))?
            .map_err(|e| GpuError::Map(e.to_string()))?;
        let out = {
            let view = slice.get_mapped_range().map_err(|e| GpuError::Map(e.to_string()))?;
            let ts: &[u64] = bytemuck::cast_slice(&view);
            ts.chunks(2).map(|p| p[1].saturating_sub(p[0]) as f64 * self.period_ns / 1e6).collect()
        };
        self.read.unmap();
        Ok(out)
    }
}
