//! The recorded compute pass every GPU primitive of the crate encodes: dispatches
//! with their bind groups, the scratch they use, and a step label per dispatch for
//! per-dispatch profiles.
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::timing::KernelTimer;
use std::sync::Arc;

/// One recorded dispatch: pipeline, bind group, workgroup counts, step label.
type Dispatch = (Arc<wgpu::ComputePipeline>, wgpu::BindGroup, (u32, u32, u32), &'static str);

/// Dispatches recorded for one compute pass, plus the scratch they use (kept alive,
/// and out of the pool, until the pass is submitted).
/// Dispatches recorded for one compute pass, plus the scratch they use (kept alive,
/// and out of the pool, until the pass is submitted).
#[derive(Default)]
pub(crate) struct Pass {
    dispatches: Vec<Dispatch>,
    /// Scratch buffers the dispatches use.
    pub(crate) keep: Vec<GpuBuffer>,
    /// The step the next dispatches belong to (for [`Pass::encode_each`]'s profile).
    pub(crate) label: &'static str,
}

impl Pass {
    /// Records one dispatch of `groups` workgroups.
    pub(crate) fn dispatch(
        &mut self,
        ctx: &GpuContext,
        pipeline: &Arc<wgpu::ComputePipeline>,
        entries: &[wgpu::BindGroupEntry<'_>],
        groups: u64,
    ) -> GpuResult<()> {
        if groups == 0 {
            return Ok(());
        }
        let max = ctx.limits().max_compute_workgroups_per_dimension.max(1) as u64;
        if groups > max * max {
            return Err(GpuError::Invalid(format!("dispatch of {groups} workgroups exceeds two dimensions")));
        }
        let bg = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("ridgeline-kernel"),
            layout: &pipeline.get_bind_group_layout(0),
            entries,
        });
        let dims = dispatch_dims(groups, ctx.limits().max_compute_workgroups_per_dimension);
        self.dispatches.push((pipeline.clone(), bg, dims, self.label));
        Ok(())
    }

    /// Encodes the dispatches as one compute pass (wgpu synchronizes dispatches
    /// inside a pass), optionally timed.
    pub(crate) fn encode(&self, enc: &mut wgpu::CommandEncoder, timestamps: Option<wgpu::ComputePassTimestampWrites<'_>>) {
        if self.dispatches.is_empty() && timestamps.is_none() {
            return;
        }
        let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ridgeline"), timestamp_writes: timestamps });
        for d in &self.dispatches {
            Self::record(&mut cp, d);
        }
    }

    fn record(cp: &mut wgpu::ComputePass<'_>, (p, bg, (x, y, z), _): &Dispatch) {
        cp.set_pipeline(p);
        cp.set_bind_group(0, bg, &[]);
        cp.dispatch_workgroups(*x, *y, *z);
    }

    /// Dispatches recorded so far.
    pub(crate) fn len(&self) -> usize {
        self.dispatches.len()
    }

    /// Encodes every dispatch as its own compute pass, timed by pass `i` of
    /// `timer` (a profile: per-dispatch device times, at the cost of the passes'
    /// boundaries).
    pub(crate) fn encode_each(&self, enc: &mut wgpu::CommandEncoder, timer: &KernelTimer) {
        for (i, d) in self.dispatches.iter().enumerate() {
            let mut cp = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("ridgeline"), timestamp_writes: timer.writes(i as u32) });
            Self::record(&mut cp, d);
        }
    }

    /// Each dispatch's step label, in order.
    pub(crate) fn labels(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.dispatches.iter().map(|d| d.3)
    }
}

