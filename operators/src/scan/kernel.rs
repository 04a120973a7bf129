//! The scan kernels' configuration ([`ScanKernel`]: [`super::ScanOptions`] checked
//! against the adapter) and their recording: the single pass (shaders/scan/
//! single_pass.wgsl with its look-back and tile parts) and reduce-then-scan
//! (shaders/scan/reduce_then_scan.wgsl), composed as the module documentation of
//! [`super`] says.
use super::{GpuError, Int64Path, Pass, ScanAlgorithm, ScanKind, ScanOptions, ScanType, DEFAULT_SCAN_WORKGROUP};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use std::sync::Arc;

const RTS_WGSL: &str = include_str!("../../../shaders/scan/reduce_then_scan.wgsl");
const ELEM_VEC4_WGSL: &str = include_str!("../../../shaders/scan/element/vec4.wgsl");
const ELEM_U64_WGSL: &str = include_str!("../../../shaders/scan/element/u64.wgsl");
const ELEM_U64EMU_WGSL: &str = include_str!("../../../shaders/scan/element/u64emu.wgsl");
const WG_SUBGROUP_WGSL: &str = include_str!("../../../shaders/scan/workgroup/subgroup.wgsl");
const WG_SHARED_WGSL: &str = include_str!("../../../shaders/scan/workgroup/shared.wgsl");
const SINGLE_PASS_WGSL: &str = include_str!("../../../shaders/scan/single_pass.wgsl");
const LB_SUBGROUP_WGSL: &str = include_str!("../../../shaders/scan/lookback/subgroup.wgsl");
const LB_SHARED_WGSL: &str = include_str!("../../../shaders/scan/lookback/shared.wgsl");
const TILE_BLOCKED_WGSL: &str = include_str!("../../../shaders/scan/tile/blocked.wgsl");
const TILE_STRIPED_WGSL: &str = include_str!("../../../shaders/scan/tile/striped.wgsl");

/// Kernel flags (shaders/scan/reduce_then_scan.wgsl and single_pass.wgsl `F_*`).
pub(super) const F_EXCLUSIVE: u32 = 1;
const F_OFFSETS: u32 = 2;
const F_TOTAL: u32 = 4;
const F_FORCE_FB: u32 = 8;


/// Element representation in the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Elem {
    U32,
    F32,
    U64,
    U64Emu,
}

/// shaders/scan/single_pass.wgsl `LbParams`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LbParams {
    n: u32,
    nvec: u32,
    tiles: u32,
    tile_base: u32,
    flags: u32,
    ctr: u32,
    spins: u32,
    pad: u32,
}

/// shaders/scan/reduce_then_scan.wgsl `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    nvec: u32,
    tiles: u32,
    tile_base: u32,
    flags: u32,
    pad: [u32; 3],
}

/// The source of a workgroup-scan part (shaders/scan/workgroup/).
pub(crate) fn wg_part(subgroups: bool) -> &'static str {
    if subgroups {
        WG_SUBGROUP_WGSL
    } else {
        WG_SHARED_WGSL
    }
}

/// The `u32` element part (for kernels that scan 32-bit counts).
pub(crate) fn elem_u32_part() -> String {
    ELEM_VEC4_WGSL.replace("{{T}}", "u32")
}

/// Checks workgroup-size options against the adapter; returns whether subgroups
/// will be used.
pub(crate) fn check_workgroup(ctx: &GpuContext, want_subgroups: bool, wg: u32, shared_bytes: u64) -> GpuResult<bool> {
    let l = ctx.limits();
    let max = l.max_compute_invocations_per_workgroup.min(l.max_compute_workgroup_size_x).min(1024);
    if !wg.is_power_of_two() || wg < 32 || wg > max {
        return Err(GpuError::Invalid(format!("workgroup size {wg} (expected a power of two in 32..={max})")));
    }
    if shared_bytes > l.max_compute_workgroup_storage_size as u64 {
        return Err(GpuError::Invalid(format!(
            "workgroup size {wg} needs {shared_bytes} bytes of workgroup memory (limit {})",
            l.max_compute_workgroup_storage_size
        )));
    }
    let subgroups = want_subgroups && ctx.has_subgroups();
    if subgroups {
        let sg_max = ctx.info().subgroup_max_size;
        if sg_max > 0 && !wg.is_multiple_of(sg_max) {
            return Err(GpuError::Invalid(format!(
                "workgroup size {wg} is not a multiple of the subgroup size {sg_max}"
            )));
        }
    }
    Ok(subgroups)
}

/// One configuration of the scan kernels.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScanKernel {
    pub(super) elem: Elem,
    pub(super) subgroups: bool,
    pub(super) wg: u32,
    pub(super) vpt: u32,
    pub(super) single_pass: bool,
    pub(super) spins: u32,
    pub(super) force_fallback: bool,
    pub(super) transpose: bool,
    pub(super) striped: bool,
}

impl ScanKernel {
    /// Validates the options for `ty` on this device.
    pub(crate) fn new(ctx: &GpuContext, ty: ScanType, opts: &ScanOptions) -> GpuResult<ScanKernel> {
        let elem = match ty {
            ScanType::U32 | ScanType::I32 => Elem::U32,
            ScanType::F32 => Elem::F32,
            ScanType::U64 | ScanType::I64 => match opts.int64 {
                Int64Path::Auto if ctx.has_int64() => Elem::U64,
                Int64Path::Auto | Int64Path::Emulated => Elem::U64Emu,
                Int64Path::Native if ctx.has_int64() => Elem::U64,
                Int64Path::Native => {
                    return Err(GpuError::Invalid("native 64-bit scan without SHADER_INT64 on this device".into()))
                }
            },
        };
        if !(1..=16).contains(&opts.vectors_per_thread) {
            return Err(GpuError::Invalid(format!("{} vectors per thread (expected 1..=16)", opts.vectors_per_thread)));
        }
        let eb = if matches!(elem, Elem::U32 | Elem::F32) { 4 } else { 8 };
        let mut wg = opts.workgroup_size;
        if wg == DEFAULT_SCAN_WORKGROUP {
            let l = ctx.limits();
            let max = l.max_compute_invocations_per_workgroup.min(l.max_compute_workgroup_size_x);
            if max < wg && max >= 32 {
                wg = 1 << max.ilog2();
            }
        }
        let shared = 2 * wg as u64 * eb + 16;
        let subgroups = check_workgroup(ctx, opts.subgroups, wg, shared)?;
        let single_pass = opts.algorithm == ScanAlgorithm::SinglePass && matches!(elem, Elem::U32 | Elem::F32);
        let tile_bytes = wg as u64 * opts.vectors_per_thread as u64 * 16 * 9 / 8 + 16;
        let striped = single_pass && subgroups && opts.striped;
        let transpose = single_pass
            && !striped
            && opts.transpose
            && shared + tile_bytes <= ctx.limits().max_compute_workgroup_storage_size as u64;
        Ok(ScanKernel {
            elem,
            subgroups,
            wg,
            vpt: opts.vectors_per_thread,
            single_pass,
            spins: opts.lookback_spins,
            force_fallback: opts.force_fallback,
            transpose,
            striped,
        })
    }

    /// Elements per 16-byte vector.
    fn vec(&self) -> u64 {
        match self.elem {
            Elem::U32 | Elem::F32 => 4,
            Elem::U64 | Elem::U64Emu => 2,
        }
    }

    pub(crate) fn elem_bytes(&self) -> u64 {
        16 / self.vec()
    }

    /// Elements per tile (one workgroup).
    pub(crate) fn tile(&self) -> u64 {
        self.wg as u64 * self.vpt as u64 * self.vec()
    }

    fn pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let (ename, elem_src, t) = match self.elem {
            Elem::U32 => ("u32", ELEM_VEC4_WGSL, "u32"),
            Elem::F32 => ("f32", ELEM_VEC4_WGSL, "f32"),
            Elem::U64 => ("u64", ELEM_U64_WGSL, ""),
            Elem::U64Emu => ("u64emu", ELEM_U64EMU_WGSL, ""),
        };
        let name = format!("scan-{ename}-{}", if self.subgroups { "subgroup" } else { "shared" });
        let src = format!("{elem_src}\n{}\n{RTS_WGSL}", wg_part(self.subgroups));
        let defs = [("T", t.to_string()), ("WG", self.wg.to_string()), ("VPT", self.vpt.to_string())];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// A pipeline of the single-pass module (32-bit elements only).
    fn lb_pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let t = if self.elem == Elem::F32 { "f32" } else { "u32" };
        let layout = if self.striped { "striped" } else { "blocked" };
        let name = format!("scanlb-{t}-{}-{layout}-{}", if self.subgroups { "subgroup" } else { "shared" }, self.transpose);
        let lb = if self.subgroups { LB_SUBGROUP_WGSL } else { LB_SHARED_WGSL };
        let tile = if self.striped { TILE_STRIPED_WGSL } else { TILE_BLOCKED_WGSL };
        let src = format!("{ELEM_VEC4_WGSL}\n{}\n{SINGLE_PASS_WGSL}\n{lb}\n{tile}", wg_part(self.subgroups));
        let xv = if self.transpose { self.wg * self.vpt * 9 / 8 + 1 } else { 1 };
        let defs = [
            ("T", t.to_string()),
            ("WG", self.wg.to_string()),
            ("VPT", self.vpt.to_string()),
            ("XPOSE", self.transpose.to_string()),
            ("XPOSE_VECS", xv.to_string()),
        ];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// Records the single-pass scan of `parts` (see [`ScanKernel::record`]): the
    /// state initialisation, then one look-back dispatch per part.
    fn record_single_pass(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        parts: &[(&wgpu::Buffer, &wgpu::Buffer, u64)],
        kind: ScanKind,
        total: &wgpu::Buffer,
    ) -> GpuResult<()> {
        let tile = self.tile();
        let tiles: Vec<u64> = parts.iter().map(|p| p.2.div_ceil(tile)).collect();
        let nt: u64 = tiles.iter().sum();
        if nt == 0 {
            return Err(GpuError::Invalid("scan of an empty part list".into()));
        }
        for &(src, dst, n) in parts {
            self.check_padded(src, n)?;
            self.check_padded(dst, n)?;
        }
        let words = 2 * nt + parts.len() as u64;
        if words > u32::MAX as u64 {
            return Err(GpuError::Invalid(format!("single-pass scan of {nt} tiles")));
        }
        let state = ctx.pool().alloc(words * 4)?;
        let init = self.lb_pipeline(ctx, "init_state")?;
        let ub = ctx.uniform(&LbParams { n: words as u32, nvec: 0, tiles: 0, tile_base: 0, flags: 0, ctr: 0, spins: 0, pad: 0 });
        pass.dispatch(
            ctx,
            &init,
            &[
                wgpu::BindGroupEntry { binding: 2, resource: state.raw().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            words.div_ceil(self.wg as u64),
        )?;
        let pipe = self.lb_pipeline(ctx, "scan_lookback")?;
        let mut base = 0u64;
        for (i, (&(src, dst, n), &t)) in parts.iter().zip(&tiles).enumerate() {
            let mut flags = if kind == ScanKind::Exclusive { F_EXCLUSIVE } else { 0 };
            if i + 1 == parts.len() {
                flags |= F_TOTAL;
            }
            if self.force_fallback {
                flags |= F_FORCE_FB;
            }
            let ub = ctx.uniform(&LbParams {
                n: n as u32,
                nvec: n.div_ceil(self.vec()) as u32,
                tiles: t as u32,
                tile_base: base as u32,
                flags,
                ctr: (2 * nt) as u32 + i as u32,
                spins: self.spins,
                pad: 0,
            });
            pass.dispatch(
                ctx,
                &pipe,
                &[
                    wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 2, resource: state.raw().as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 3, resource: total.as_entire_binding() },
                    wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
                ],
                t,
            )?;
            base += t;
        }
        pass.keep.push(state);
        Ok(())
    }

    /// Checks that a buffer holding `n` elements can be accessed as whole vectors.
    fn check_padded(&self, buf: &wgpu::Buffer, n: u64) -> GpuResult<()> {
        let need = n.div_ceil(self.vec()) * 16;
        if buf.size() < need {
            return Err(GpuError::Invalid(format!(
                "buffer of {} bytes holds {n} elements but is not padded to whole 16-byte vectors ({need} bytes)",
                buf.size()
            )));
        }
        Ok(())
    }

    fn params(&self, ctx: &GpuContext, n: u64, tiles: u64, tile_base: u64, flags: u32) -> wgpu::Buffer {
        ctx.uniform(&Params {
            n: n as u32,
            nvec: n.div_ceil(self.vec()) as u32,
            tiles: tiles as u32,
            tile_base: tile_base as u32,
            flags,
            pad: [0; 3],
        })
    }

    /// Records a `reduce` dispatch: tile totals of `src` (n elements, `tiles`
    /// tiles) into `sums[tile_base..]`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn reduce(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        src: &wgpu::Buffer,
        n: u64,
        tiles: u64,
        tile_base: u64,
        sums: &wgpu::Buffer,
    ) -> GpuResult<()> {
        self.check_padded(src, n)?;
        let pipe = self.pipeline(ctx, "reduce")?;
        let ub = self.params(ctx, n, tiles, tile_base, 0);
        pass.dispatch(
            ctx,
            &pipe,
            &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: sums.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            tiles,
        )
    }

    /// Records a `downsweep` dispatch over `src` -> `dst` (n elements, `tiles`
    /// tiles), adding `offs[tile_base + tile]` when given and writing the grand
    /// total to `total[0]` when given.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn downsweep(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        src: &wgpu::Buffer,
        dst: &wgpu::Buffer,
        n: u64,
        tiles: u64,
        tile_base: u64,
        offs: Option<&wgpu::Buffer>,
        total: Option<&wgpu::Buffer>,
        mut flags: u32,
    ) -> GpuResult<()> {
        self.check_padded(src, n)?;
        self.check_padded(dst, n)?;
        if offs.is_some() {
            flags |= F_OFFSETS;
        }
        if total.is_some() {
            flags |= F_TOTAL;
        }
        let pipe = self.pipeline(ctx, "downsweep")?;
        let ub = self.params(ctx, n, tiles, tile_base, flags);
        // Unused bindings get a buffer of the same access already bound (a read-only
        // buffer may be bound twice read-only, a read-write one twice read-write).
        pass.dispatch(
            ctx,
            &pipe,
            &[
                wgpu::BindGroupEntry { binding: 0, resource: src.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: dst.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: offs.unwrap_or(src).as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: total.unwrap_or(dst).as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: ub.as_entire_binding() },
            ],
            tiles,
        )
    }

    /// Records the scan of a list of buffers that form one logical array
    /// (`(src, dst, rows)` per part, in order): prefix sums into each `dst`, the
    /// grand total into `total[0]`. Single pass where configured, else
    /// reduce-then-scan, recursive over the tile totals. Every part must have at
    /// least one row.
    pub(crate) fn record(
        &self,
        ctx: &GpuContext,
        pass: &mut Pass,
        parts: &[(&wgpu::Buffer, &wgpu::Buffer, u64)],
        kind: ScanKind,
        total: &wgpu::Buffer,
    ) -> GpuResult<()> {
        if self.single_pass {
            return self.record_single_pass(ctx, pass, parts, kind, total);
        }
        let flags = if kind == ScanKind::Exclusive { F_EXCLUSIVE } else { 0 };
        let tile = self.tile();
        let tiles: Vec<u64> = parts.iter().map(|p| p.2.div_ceil(tile)).collect();
        let nt: u64 = tiles.iter().sum();
        if nt == 0 {
            return Err(GpuError::Invalid("scan of an empty part list".into()));
        }
        if nt == 1 {
            let (src, dst, n) = parts[0];
            return self.downsweep(ctx, pass, src, dst, n, 1, 0, None, Some(total), flags);
        }
        let sums = ctx.pool().alloc(nt * self.elem_bytes())?;
        let offs = ctx.pool().alloc(nt * self.elem_bytes())?;
        let mut base = 0;
        for (&(src, _, n), &t) in parts.iter().zip(&tiles) {
            self.reduce(ctx, pass, src, n, t, base, sums.raw())?;
            base += t;
        }
        self.record(ctx, pass, &[(sums.raw(), offs.raw(), nt)], ScanKind::Exclusive, total)?;
        let mut base = 0;
        for (&(src, dst, n), &t) in parts.iter().zip(&tiles) {
            self.downsweep(ctx, pass, src, dst, n, t, base, Some(offs.raw()), None, flags)?;
            base += t;
        }
        pass.keep.push(sums);
        pass.keep.push(offs);
        Ok(())
    }
}

/// Records the scan of `input` into `values` (same segmentation) and its total
/// into `total`; nothing for an empty input (the caller clears the total).
pub(super) fn build_array_scan(
    ctx: &GpuContext,
    k: &ScanKernel,
    input: &DeviceArray,
    values: &DeviceArray,
    total: &DeviceArray,
    kind: ScanKind,
) -> GpuResult<Pass> {
    let mut pass = Pass::default();
    if input.is_empty() {
        return Ok(pass);
    }
    let parts: Vec<(&wgpu::Buffer, &wgpu::Buffer, u64)> = (0..input.num_segments())
        .map(|i| {
            let (s, _, rows) = input.segment(i);
            (s, values.segment(i).0, rows as u64)
        })
        .collect();
    k.record(ctx, &mut pass, &parts, kind, total.segment(0).0)?;
    Ok(pass)
}

