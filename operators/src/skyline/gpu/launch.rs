//! SkyAlign's shaders and dispatches: the loader (shaders/skyline/common.wgsl
//! prepended to the file of the stage that holds an entry point), the kernels'
//! parameters, one-segment uploads and the device-memory account.
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::tuning::skyline::SKY_WG;

/// What every stage shares (parameters, bindings, helpers).
const COMMON_WGSL: &str = include_str!("../../../../shaders/skyline/common.wgsl");

/// The stage file of `entry` (see the header of common.wgsl).
fn stage_wgsl(entry: &str) -> GpuResult<&'static str> {
    Ok(match entry {
        "minmax" => include_str!("../../../../shaders/skyline/prefilter.wgsl"),
        "qhist" | "qpick" => include_str!("../../../../shaders/skyline/quartiles.wgsl"),
        "mask_hist" | "scatter" => include_str!("../../../../shaders/skyline/masks.wgsl"),
        "sort_level" => include_str!("../../../../shaders/skyline/sort_level.wgsl"),
        "iterate" => include_str!("../../../../shaders/skyline/iterate.wgsl"),
        "iterate_wide" => include_str!("../../../../shaders/skyline/iterate_wide.wgsl"),
        "plan" | "repack" => include_str!("../../../../shaders/skyline/repack.wgsl"),
        "alive_bits" => include_str!("../../../../shaders/skyline/alive_bits.wgsl"),
        _ => return Err(GpuError::Invalid(format!("skyline: no kernel {entry}"))),
    })
}

/// Stripes of the test counters (common.wgsl, `CSTRIPES`).
pub(super) const CSTRIPES: usize = 256;

/// Words per level in the level table (common.wgsl, `LVW`).
pub(super) const LVW: usize = 16;

/// Keys in each partition's directory (common.wgsl, `KDIR`).
pub(super) const KDIR: usize = 16;

/// The kernels' uniform parameters (common.wgsl, `Params`).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct SkyParams {
    pub n: u32,
    pub d: u32,
    pub l: u32,
    pub tau: u32,
    pub shift: u32,
    pub full: u32,
    pub npart: u32,
    pub stride: u32,
    /// Right shift of every rank in a key (see `key_shift`).
    pub kshift: u32,
    /// iterate_wide: 1 where slot offsets come from one packed atomic.
    pub packed: u32,
    /// sort_level's lanes (the `SWG` constant its pipeline is built with).
    pub sort_lanes: u32,
    pub pad: u32,
}

/// Workgroups of a dispatch: a count, or indirect arguments in a buffer at a byte
/// offset (the level table, see `plan` in shaders/skyline/repack.wgsl).
#[derive(Clone, Copy)]
pub(super) enum Groups<'a> {
    Direct(u64),
    Indirect(&'a wgpu::Buffer, u64),
}

/// Records and launches SkyAlign's kernels with the shader constants of one call.
pub(super) struct Launcher<'a> {
    pub ctx: &'a GpuContext,
    /// `iterate_wide`'s lanes (`WGW`).
    pub wide_wg: u32,
    /// `iterate_wide`'s positions a lane per step (`WQS`).
    pub wide_step: u32,
    /// `sort_level`'s capacity (`SCAP`, see `sort_cap`).
    pub sort_cap: u32,
}

impl Launcher<'_> {
    /// Launches `entry` with one invocation per `threads` (in workgroups of [`SKY_WG`]).
    pub fn launch(&self, entry: &str, p: SkyParams, bindings: &[(u32, &wgpu::Buffer)], threads: usize) -> GpuResult<()> {
        self.launch_groups(entry, p, bindings, (threads as u64).div_ceil(SKY_WG as u64))
    }

    /// [`Launcher::launch`] by workgroups (`iterate_wide`: one per point).
    pub fn launch_groups(&self, entry: &str, p: SkyParams, bindings: &[(u32, &wgpu::Buffer)], groups: u64) -> GpuResult<()> {
        if groups == 0 {
            return Ok(());
        }
        let mut enc = self.ctx.encoder(entry);
        self.record(&mut enc, entry, p, bindings, Groups::Direct(groups))?;
        self.ctx.submit(enc)?;
        Ok(())
    }

    /// Records one dispatch of `entry` into `enc`.
    pub fn record(
        &self,
        enc: &mut wgpu::CommandEncoder,
        entry: &str,
        p: SkyParams,
        bindings: &[(u32, &wgpu::Buffer)],
        groups: Groups<'_>,
    ) -> GpuResult<()> {
        let ctx = self.ctx;
        if matches!(groups, Groups::Direct(0)) {
            return Ok(());
        }
        let defs = [
            ("WG", SKY_WG.to_string()),
            ("WGW", self.wide_wg.to_string()),
            ("WQS", self.wide_step.to_string()),
            ("SCAP", self.sort_cap.to_string()),
            ("D", p.d.to_string()),
            // sort_level's lanes (see `sort_lanes`); one variant elsewhere.
            ("SWG", if entry == "sort_level" { p.sort_lanes } else { 64 }.to_string()),
        ];
        let stage = stage_wgsl(entry)?;
        let pipe = ctx.pipeline_lazy("skyline", entry, &defs, || Ok(format!("{COMMON_WGSL}\n{stage}")))?;
        let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
        if let Groups::Direct(g) = groups {
            if g > max_dim as u64 * max_dim as u64 {
                return Err(GpuError::Invalid(format!(
                    "skyline {entry}: {g} workgroups exceed the dispatch limit"
                )));
            }
        }
        let ub = ctx.uniform(&p);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: ub.as_entire_binding(),
        }];
        for &(b, buffer) in bindings {
            entries.push(wgpu::BindGroupEntry {
                binding: b,
                resource: buffer.as_entire_binding(),
            });
        }
        let bg = ctx.scoped(|| {
            ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("skyline"),
                layout: &pipe.get_bind_group_layout(0),
                entries: &entries,
            })
        })?;
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some(entry),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipe);
        pass.set_bind_group(0, &bg, &[]);
        match groups {
            Groups::Direct(g) => {
                let (x, y, z) = dispatch_dims(g, max_dim);
                pass.dispatch_workgroups(x, y, z);
            }
            Groups::Indirect(b, off) => pass.dispatch_workgroups_indirect(b, off),
        }
        Ok(())
    }
}

/// Elements per segment so that `len` elements sit in one segment.
pub(super) fn one_seg(len: usize) -> usize {
    len.max(1).div_ceil(4) * 4
}

/// `data` in a new one-segment array. Through the small-write queue (one copy with
/// the next submission): a staging upload of its own each took a 64 MiB stage, and
/// the level tables' dozen uploads waited for the device once the stages ran out.
pub(super) fn upload_one(ctx: &GpuContext, data: &[u32]) -> GpuResult<DeviceArray> {
    let data = if data.is_empty() { &[0u32][..] } else { data };
    let a = DeviceArray::alloc_segmented(ctx, data.len(), 4, one_seg(data.len()))?;
    ctx.write_small(buf(&a), 0, bytemuck::cast_slice(data))?;
    Ok(a)
}

/// The buffer of a one-segment array.
pub(super) fn buf(a: &DeviceArray) -> &wgpu::Buffer {
    a.segment(0).0
}

/// Peak device bytes of one chunk (pool size classes included).
#[derive(Default)]
pub(super) struct Mem {
    live: u64,
    pub peak: u64,
}

impl Mem {
    pub fn add(&mut self, a: &DeviceArray) {
        self.live += a.device_bytes();
        self.peak = self.peak.max(self.live);
    }
    pub fn sub(&mut self, a: &DeviceArray) {
        self.live -= a.device_bytes();
    }
    pub fn spike(&mut self, bytes: u64) {
        self.peak = self.peak.max(self.live + bytes);
    }
}
