//! The selection's kernels: their parameter blocks, one configuration per key
//! width and device ([`Kern`]: sample size, buckets, key representation), and the
//! pipelines assembled from shaders/select/ (a key file, common.wgsl, then the
//! files of the kernel's family and stage).
use super::contract::SelectOptions;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::scan::Int64Path;
pub(super) use crate::tuning::select::{CITEMS, ITEMS, WG};
use std::sync::Arc;

/// Keys of one workgroup of the filter, window and top-k kernels.
pub(super) const CHUNK: u32 = WG * ITEMS;
/// Keys of one workgroup of the count kernels.
pub(super) const CCHUNK: u32 = WG * CITEMS;
/// No slot, no window bound (`0xffffffffu` in the shaders).
pub(super) const NONE: u32 = u32::MAX;

/// The key part of every kernel, by representation.
const KEY_U32: &str = include_str!("../../../shaders/select/key_u32.wgsl");
const KEY_U64: &str = include_str!("../../../shaders/select/key_u64.wgsl");
const KEY_U64EMU: &str = include_str!("../../../shaders/select/key_u64emu.wgsl");
/// Constants, parameter blocks and helpers shared by every kernel.
const COMMON: &str = include_str!("../../../shaders/select/common.wgsl");

/// The kernel files after common.wgsl, by name (shaders/select/NAME.wgsl).
const SECTIONS: &[(&str, &str)] = &[
    ("sample_gather", include_str!("../../../shaders/select/sample_gather.wgsl")),
    ("sample_bitonic", include_str!("../../../shaders/select/sample_bitonic.wgsl")),
    ("sample_sort", include_str!("../../../shaders/select/sample_sort.wgsl")),
    ("sample_sort_sg", include_str!("../../../shaders/select/sample_sort_sg.wgsl")),
    ("bucket", include_str!("../../../shaders/select/bucket.wgsl")),
    ("bucket_oracle", include_str!("../../../shaders/select/bucket_oracle.wgsl")),
    ("bucket_probe", include_str!("../../../shaders/select/bucket_probe.wgsl")),
    ("window", include_str!("../../../shaders/select/window.wgsl")),
    ("chain", include_str!("../../../shaders/select/chain.wgsl")),
    ("chain_first", include_str!("../../../shaders/select/chain_first.wgsl")),
    ("chain_next", include_str!("../../../shaders/select/chain_next.wgsl")),
    ("chain_gather", include_str!("../../../shaders/select/chain_gather.wgsl")),
    ("chain_plan", include_str!("../../../shaders/select/chain_plan.wgsl")),
    ("chain_window", include_str!("../../../shaders/select/chain_window.wgsl")),
    ("approx", include_str!("../../../shaders/select/approx.wgsl")),
    ("approx_sg", include_str!("../../../shaders/select/approx_sg.wgsl")),
    ("approx_kc", include_str!("../../../shaders/select/approx_kc.wgsl")),
    ("topk", include_str!("../../../shaders/select/topk.wgsl")),
    ("order_keys", include_str!("../../../shaders/select/order_keys.wgsl")),
];

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) off: u32,
    pub(super) n: u32,
    pub(super) cnt: u32,
    pub(super) dst_off: u32,
    pub(super) seed: u32,
    pub(super) task: u32,
    pub(super) mode: u32,
    pub(super) pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct WinParams {
    pub(super) off: u32,
    pub(super) n: u32,
    pub(super) pad: u32,
    pub(super) wg_base: u32,
    pub(super) lo_idx: [u32; 4],
    pub(super) hi_idx: [u32; 4],
    pub(super) woff: [u32; 4],
    pub(super) cap: [u32; 4],
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct TkParams {
    pub(super) n: u32,
    pub(super) block_base: u32,
    pub(super) row0: u32,
    pub(super) need: u32,
    pub(super) win_lo: u32,
    pub(super) win_len: u32,
    pub(super) blocks: u32,
    pub(super) lt_total: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Repr {
    U32,
    U64,
    U64Emu,
}


/// One configuration of the kernels for a key width on this device.
#[derive(Clone, Copy, Debug)]
pub(super) struct Kern {
    pub(super) repr: Repr,
    pub(super) kb: usize,
    pub(super) s: u32,
    pub(super) ns: u32,
    /// Sample sorts by `sort_sample_sg` (sample_sort_sg.wgsl).
    pub(super) sg_sort: bool,
}

impl Kern {
    pub(super) fn new(ctx: &GpuContext, kb: usize, opts: &SelectOptions) -> GpuResult<Kern> {
        let repr = match (kb, opts.int64) {
            (4, _) => Repr::U32,
            (8, Int64Path::Auto) if ctx.has_int64() => Repr::U64,
            (8, Int64Path::Auto) | (8, Int64Path::Emulated) => Repr::U64Emu,
            (8, Int64Path::Native) if ctx.has_int64() => Repr::U64,
            (8, Int64Path::Native) => {
                return Err(GpuError::Invalid("native 64-bit selection without SHADER_INT64 on this device".into()))
            }
            _ => return Err(GpuError::Invalid(format!("key of {kb} bytes (expected 4 or 8)"))),
        };
        let l = ctx.limits();
        if l.max_compute_invocations_per_workgroup < WG || l.max_compute_workgroup_size_x < WG {
            return Err(GpuError::Invalid(format!("selection needs workgroups of {WG} invocations")));
        }
        let mem = l.max_compute_workgroup_storage_size as usize;
        let mut s = opts.max_sample.clamp(64, 4096).next_power_of_two();
        while s > 64 && s as usize * kb > mem {
            s /= 2;
        }
        // B buckets (power of two): B - 1 splitters and 2B - 1 counters must fit,
        // with oversampling S / B >= 4 where possible.
        let mut b = (s / 4).clamp(16, 1024);
        // The oracle filter also holds a 16-entry residue table.
        let need = |b: usize| (b - 1) * kb + (2 * b - 1) * 4 + 64;
        while b > 16 && need(b as usize) > mem {
            b /= 2;
        }
        if s as usize * kb > mem || need(b as usize) > mem {
            return Err(GpuError::Invalid(format!("workgroup memory of {mem} bytes is too small for selection")));
        }
        let sg_sort = opts.subgroup_sort && ctx.has_subgroups() && s / 4 <= l.max_compute_invocations_per_workgroup && s / 4 <= l.max_compute_workgroup_size_x;
        Ok(Kern { repr, kb, s, ns: b - 1, sg_sort })
    }

    pub(super) fn nb(&self) -> u32 {
        2 * self.ns + 1
    }

    /// The sample sort (bindings 0: keys, 1: output, 2: Params; one workgroup).
    pub(super) fn sort_pipe(&self, ctx: &GpuContext) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        if !self.sg_sort {
            return self.pipe(ctx, "sample_bitonic+sample_sort", "sort_sample");
        }
        let shx = match self.repr {
            Repr::U32 | Repr::U64Emu => "return subgroupShuffleXor(a, m);",
            Repr::U64 => "let v = subgroupShuffleXor(vec2<u32>(u32(a & 0xfffffffflu), u32(a >> 32u)), m); return u64(v.x) | (u64(v.y) << 32u);",
        };
        self.pipe_with(ctx, "sample_bitonic+sample_sort+sample_sort_sg", "sort_sample_sg", &[("SWG", (self.s / 4).to_string()), ("KSHX", shx.to_string())])
    }

    /// The pipeline of `entry` compiled from the files `section` names (names of
    /// shaders/select/*.wgsl joined by '+', in order), after the key file and
    /// common.wgsl.
    pub(super) fn pipe(&self, ctx: &GpuContext, section: &str, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.pipe_with(ctx, section, entry, &[])
    }

    /// [`Kern::pipe`] with further placeholder values (`NWIN` of window.wgsl).
    pub(super) fn pipe_with(&self, ctx: &GpuContext, section: &str, entry: &str, extra: &[(&str, String)]) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let (key, kname) = match self.repr {
            Repr::U32 => (KEY_U32, "u32"),
            Repr::U64 => (KEY_U64, "u64"),
            Repr::U64Emu => (KEY_U64EMU, "u64emu"),
        };
        // The key file, the shared file, then the named files in order (`section`
        // joins them with '+': "bucket+bucket_oracle"). Assembled only on a cache miss.
        let source = || {
            let mut src = format!("{key}{COMMON}");
            for part in section.split('+') {
                let (_, text) = SECTIONS
                    .iter()
                    .find(|s| s.0 == part)
                    .ok_or_else(|| GpuError::Invalid(format!("shaders/select has no file {part}.wgsl")))?;
                src.push('\n');
                src.push_str(text);
            }
            Ok(src)
        };
        let mut defs = vec![
            ("KEY", kname.to_string()),
            ("WG", WG.to_string()),
            ("S", self.s.to_string()),
            ("NS", self.ns.to_string()),
            ("ITEMS", ITEMS.to_string()),
            ("CITEMS", CITEMS.to_string()),
        ];
        defs.extend(extra.iter().cloned());
        ctx.pipeline_lazy(&format!("select-{section}"), entry, &defs, source)
    }
}

pub(super) fn bind(ctx: &GpuContext, pipe: &wgpu::ComputePipeline, entries: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
    let e: Vec<wgpu::BindGroupEntry<'_>> = entries
        .iter()
        .map(|(b, buf)| wgpu::BindGroupEntry { binding: *b, resource: buf.as_entire_binding() })
        .collect();
    ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("select"),
        layout: &pipe.get_bind_group_layout(0),
        entries: &e,
    })
}
