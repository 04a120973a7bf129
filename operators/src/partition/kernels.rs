//! The pieces every GPU step of the partition shares: the kernels' parameters and
//! flags, the pipelines of shaders/partition/ (each kernel file appended to
//! common.wgsl), bindings and scratch allocation.
use crate::array::DeviceArray;
use crate::compact::{Column, CompactedColumn};
use crate::context::GpuContext;
use crate::error::GpuResult;
use std::sync::Arc;

/// shaders/hash.wgsl and shaders/partition/common.wgsl: the prelude every
/// partition kernel is appended to.
pub(super) const COMMON_WGSL: &str =
    concat!(include_str!("../../../shaders/hash.wgsl"), include_str!("../../../shaders/partition/common.wgsl"));
const IDS_WGSL: &str = include_str!("../../../shaders/partition/ids.wgsl");
const HISTOGRAM_WGSL: &str = include_str!("../../../shaders/partition/histogram.wgsl");
const RANK_WGSL: &str = include_str!("../../../shaders/partition/rank.wgsl");
const MOVE_WGSL: &str = include_str!("../../../shaders/partition/move.wgsl");
const OFFSETS_WGSL: &str = include_str!("../../../shaders/partition/offsets.wgsl");

// Kernel flags (shaders/partition/common.wgsl `F_*`).
pub(super) const F_FIRST: u32 = 1;
pub(super) const F_LAST: u32 = 2;
pub(super) const F_VALID: u32 = 4;
pub(super) const F_DIRECT: u32 = 8;
pub(super) const F_PREV: u32 = 16;
pub(super) const F_HASH: u32 = 32;
pub(super) const F_MULTI: u32 = 64;

/// shaders/partition/common.wgsl `Params`.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    pub(super) n: u32,
    pub(super) tiles: u32,
    pub(super) tile_base: u32,
    pub(super) total_tiles: u32,
    pub(super) shift: u32,
    pub(super) mask: u32,
    pub(super) fanout: u32,
    pub(super) flags: u32,
    pub(super) out_first: u32,
    pub(super) out_rows: u32,
    pub(super) row_base: u32,
    pub(super) nb: u32,
    pub(super) dshift: u32,
    pub(super) total: u32,
    pub(super) pad0: u32,
    pub(super) pad1: u32,
}

/// The digit kernels' shape: `wg` invocations, tiles of `wg * chunks` rows.
pub(super) struct Kernels {
    pub(super) wg: u32,
    pub(super) chunks: u32,
}

impl Kernels {
    pub(super) fn pipe(&self, ctx: &GpuContext, wide: bool, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.build(ctx, wide, wide, false, entry)
    }

    /// A digit kernel (`histogram`, `rank`) computing each row's id from the one
    /// key column itself.
    pub(super) fn pipe_inline(&self, ctx: &GpuContext, key_wide: bool, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.build(ctx, key_wide, false, true, entry)
    }

    fn build(&self, ctx: &GpuContext, key_wide: bool, val_wide: bool, inline: bool, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let defs = [
            ("KT", word(key_wide).to_string()),
            ("T", word(val_wide).to_string()),
            ("KEY_FNS", key_fns(key_wide).to_string()),
            ("WG", self.wg.to_string()),
            ("CHUNKS", self.chunks.to_string()),
            ("ROW_RAW", if inline { "return key_words(r);" } else { "return vec3<u32>(pid_in[r], 0u, 1u);" }.to_string()),
            ("RAW_PID", if inline { "return words_pid(w);" } else { "return w.x;" }.to_string()),
        ];
        let kernel = match entry {
            "pid_radix" | "pid_hash" => IDS_WGSL,
            "histogram" => HISTOGRAM_WGSL,
            "rank" => RANK_WGSL,
            "move_values" | "move_iota" | "move_validity" => MOVE_WGSL,
            _ => OFFSETS_WGSL,
        };
        ctx.pipeline_lazy("partition", entry, &defs, || Ok(format!("{COMMON_WGSL}\n{kernel}")))
    }
}

/// The WGSL type of a 4- or 8-byte value.
pub(super) fn word(wide: bool) -> &'static str {
    if wide {
        "vec2<u32>"
    } else {
        "u32"
    }
}

/// The key accessors of shaders/partition/common.wgsl for a 4- or 8-byte key.
pub(super) fn key_fns(key_wide: bool) -> &'static str {
    if key_wide {
        "fn klo(k: vec2<u32>) -> u32 { return k.x; }\nfn khi(k: vec2<u32>) -> u32 { return k.y; }\nconst KWIDE: bool = true;"
    } else {
        "fn klo(k: u32) -> u32 { return k; }\nfn khi(k: u32) -> u32 { return 0u; }\nconst KWIDE: bool = false;"
    }
}

/// Where the digit kernels read segment `s`'s ids: the ids array, or the key
/// column (and its validity) with the id computed inline.
pub(super) fn id_entries<'a>(ids: Option<&'a DeviceArray>, key: &Column<'a>, s: usize) -> Vec<wgpu::BindGroupEntry<'a>> {
    match ids {
        Some(a) => vec![entry(3, a.segment(s).0)],
        None => {
            let kb = key.values.segment(s).0;
            vec![entry(0, kb), entry(1, key.validity.map_or(kb, |v| v.segment(s).0))]
        }
    }
}

/// Binds `buf` whole at `binding`.
pub(super) fn entry(binding: u32, buf: &wgpu::Buffer) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource: buf.as_entire_binding() }
}

/// A segmented `u32` scratch array plus its bytes.
pub(super) fn scratch(ctx: &GpuContext, n: usize, seg: usize, bytes: &mut u64) -> GpuResult<DeviceArray> {
    let a = DeviceArray::alloc_segmented(ctx, n, 4, seg)?;
    *bytes += a.device_bytes();
    Ok(a)
}

/// Device columns shaped like `columns` (`n` rows, `seg` rows a segment; a
/// validity bitmap where the input has one), not initialised.
pub(super) fn alloc_like(ctx: &GpuContext, columns: &[Column<'_>], n: usize, seg: usize) -> GpuResult<Vec<CompactedColumn>> {
    columns
        .iter()
        .map(|c| {
            let values = DeviceArray::alloc_segmented(ctx, n, c.values.elem_size(), seg)?;
            let validity = match c.validity {
                Some(_) => Some(DeviceArray::alloc_segmented(ctx, n.div_ceil(32), 4, seg / 32)?),
                None => None,
            };
            Ok(CompactedColumn { values, validity })
        })
        .collect()
}

/// Zeroes the validity bitmaps of `cols` (the scatters set bits with atomicOr).
pub(super) fn clear_validity(enc: &mut wgpu::CommandEncoder, cols: &[CompactedColumn]) {
    for v in cols.iter().filter_map(|c| c.validity.as_ref()) {
        for i in 0..v.num_segments() {
            enc.clear_buffer(v.segment(i).0, 0, None);
        }
    }
}

