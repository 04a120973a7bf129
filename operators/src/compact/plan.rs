//! One call's validated shapes ([`Plan`]), the pipelines of shaders/compact/ (each
//! assembled from the scan's element and workgroup parts, shaders/scan/, and the
//! compaction's own files) and the count pass.
use super::codegen::{generate_fast, generate_per_row, ColumnLayout};
use super::{Column, CompactOptions, CompactPath, Selection};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::scan::{check_workgroup, elem_u32_part, wg_part, Pass, ScanAlgorithm, ScanKernel, ScanKind, ScanOptions, ScanType};
use crate::timing::KernelTimer;
use std::sync::Arc;

const BLOCK_WGSL: &str = include_str!("../../../shaders/compact/block.wgsl");
const COUNT_BLOCKS_WGSL: &str = include_str!("../../../shaders/compact/count_blocks.wgsl");
const PER_ROW_WGSL: &str = include_str!("../../../shaders/compact/per_row.wgsl");
const JUMPING_JACK_WGSL: &str = include_str!("../../../shaders/compact/jumping_jack.wgsl");
const SEL_FLAGS_WGSL: &str = include_str!("../../../shaders/compact/selection/flags.wgsl");
const SEL_BITMAP_WGSL: &str = include_str!("../../../shaders/compact/selection/bitmap.wgsl");
const COUNT_WGSL: &str = include_str!("../../../shaders/compact/count.wgsl");
const STABLE_WGSL: &str = include_str!("../../../shaders/compact/stable.wgsl");

/// shaders/compact/block.wgsl (and count.wgsl, stable.wgsl) `Params`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct Params {
    n: u32,
    blocks: u32,
    block_base: u32,
    out_first: u32,
    out_rows: u32,
    out_first_word: u32,
    out_words: u32,
    pad: u32,
}

/// Validated shapes of one call.
pub(super) struct Plan {
    pub(super) n: usize,
    pub(super) seg_rows: usize,
    /// Rows of each input segment.
    pub(super) seg_len: Vec<usize>,
    /// Blocks of each input segment and the index of its first block.
    pub(super) seg_blocks: Vec<(u64, u64)>,
    pub(super) blocks: u64,
    pub(super) subgroups: bool,
    pub(super) wg: u32,
    pub(super) block: u32,
    /// CompactPath::Fast.
    pub(super) fast: bool,
}

/// Output of the count step.
pub(super) struct Counted {
    /// Exclusive block offsets (kept for the scatter).
    pub(super) offs: crate::pool::GpuBuffer,
    /// First output row of each input segment, then the total.
    pub(super) seg_first: Vec<u64>,
    pub(super) count: usize,
    pub(super) scratch_bytes: u64,
    /// Fast path with flags: the selection as a bitmap, one buffer per segment
    /// (`ceil(rows / 32)` words, the Arrow layout).
    pub(super) bits: Vec<crate::pool::GpuBuffer>,
}

impl Plan {
    pub(super) fn new(ctx: &GpuContext, sel: &Selection<'_>, columns: &[Column<'_>], opts: &CompactOptions) -> GpuResult<Plan> {
        let n = sel.rows();
        let seg_rows = sel.seg_rows();
        let s = sel.array();
        if s.elem_size() != 4 {
            return Err(GpuError::Invalid(format!("selection of {}-byte elements (expected u32)", s.elem_size())));
        }
        if let Selection::Bitmap { bits, rows } = sel {
            if bits.len() != rows.div_ceil(32) {
                return Err(GpuError::Invalid(format!("bitmap of {} words for {rows} rows", bits.len())));
            }
        }
        if n as u64 > u32::MAX as u64 {
            return Err(GpuError::Invalid(format!("compaction of {n} rows (at most 2^32 - 1)")));
        }
        for (i, c) in columns.iter().enumerate() {
            let v = c.values;
            if v.len() != n || v.seg_rows() != seg_rows {
                return Err(GpuError::Invalid(format!(
                    "column {i}: {} rows in segments of {} where the selection has {n} rows in segments of {seg_rows}",
                    v.len(),
                    v.seg_rows()
                )));
            }
            if let Some(b) = c.validity {
                if b.elem_size() != 4 || b.len() != n.div_ceil(32) || b.seg_rows() * 32 != seg_rows {
                    return Err(GpuError::Invalid(format!(
                        "column {i}: validity of {} x {} bytes in segments of {} (expected {} words in segments of {})",
                        b.len(),
                        b.elem_size(),
                        b.seg_rows(),
                        n.div_ceil(32),
                        seg_rows / 32
                    )));
                }
            }
        }
        let (wg, block) = (opts.workgroup_size, opts.block_rows);
        if block == 0 || !block.is_multiple_of(128) || block as u64 > 32 * wg as u64 {
            return Err(GpuError::Invalid(format!(
                "blocks of {block} rows (expected a multiple of 128, at most 32 x the workgroup size {wg})"
            )));
        }
        let fast = opts.path == CompactPath::Fast;
        let per_block = if fast { (block as u64).max(3 * (block as u64 / 32) * 4) } else { 3 * (block as u64 / 32) * 4 };
        let shared = 2 * wg as u64 * 4 + per_block + 64;
        let subgroups = check_workgroup(ctx, opts.subgroups, wg, shared)?;
        let mut seg_len = Vec::new();
        let mut seg_blocks = Vec::new();
        let mut blocks = 0u64;
        for i in 0..s.num_segments() {
            let rows = (n - i * seg_rows).min(seg_rows);
            let b = (rows as u64).div_ceil(block as u64);
            seg_len.push(rows);
            seg_blocks.push((b, blocks));
            blocks += b;
        }
        Ok(Plan { n, seg_rows, seg_len, seg_blocks, blocks, subgroups, wg, block, fast })
    }

    fn selection_part(&self, bitmap: bool) -> (&'static str, &'static str) {
        if bitmap {
            ("bitmap", SEL_BITMAP_WGSL)
        } else {
            ("flags", SEL_FLAGS_WGSL)
        }
    }

    /// A kernel on the block machinery (shaders/compact/block.wgsl plus the entry
    /// point's file: `count_blocks`, `scatter_stable` of the per-row path, or
    /// `scatter_jj`) for a column layout (`None`: the count kernel only), reading
    /// the selection as a bitmap or as flags.
    pub(super) fn pipeline(
        &self,
        ctx: &GpuContext,
        bitmap: bool,
        layout: Option<&[ColumnLayout]>,
        entry: &str,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let (sname, spart) = self.selection_part(bitmap);
        let cols = layout.unwrap_or(&[]);
        let gen = generate_per_row(cols, self.block);
        let name = format!(
            "compact-{sname}-{}-{}",
            if self.subgroups { "subgroup" } else { "shared" },
            gen.key
        );
        let kernel = match entry {
            "count_blocks" => COUNT_BLOCKS_WGSL,
            "scatter_jj" => JUMPING_JACK_WGSL,
            _ => PER_ROW_WGSL,
        };
        let src = format!("{}\n{}\n{spart}\n{BLOCK_WGSL}\n{kernel}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [
            ("WG", self.wg.to_string()),
            ("BLOCK", self.block.to_string()),
            ("VB_WORDS", gen.vb_words.to_string()),
            ("COLUMN_DECLS", gen.decls),
            ("COPY_COLUMNS", gen.copy),
            ("FLUSH_COLUMNS", gen.flush),
        ];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// The fast path's count kernels (shaders/compact/count.wgsl).
    fn count_pipeline(&self, ctx: &GpuContext, entry: &str) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let name = format!("compact-count-{}", if self.subgroups { "subgroup" } else { "shared" });
        let src = format!("{}\n{}\n{COUNT_WGSL}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [("WG", self.wg.to_string()), ("BLOCK", self.block.to_string())];
        ctx.pipeline(&name, &src, entry, &defs)
    }

    /// The fast path's stable scatter (shaders/compact/stable.wgsl) for a column layout.
    pub(super) fn stable_pipeline(&self, ctx: &GpuContext, layout: &[ColumnLayout]) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let gen = generate_fast(layout, self.block);
        let name = format!("compact-stable-{}-{}", if self.subgroups { "subgroup" } else { "shared" }, gen.key);
        let src = format!("{}\n{}\n{STABLE_WGSL}", elem_u32_part(), wg_part(self.subgroups));
        let defs = [
            ("WG", self.wg.to_string()),
            ("BLOCK", self.block.to_string()),
            ("VB_WORDS", gen.vb_words.to_string()),
            ("COLUMN_DECLS", gen.decls),
            ("COPY_COLUMNS", gen.copy),
            ("FLUSH_COLUMNS", gen.flush),
        ];
        ctx.pipeline(&name, &src, "scatter", &defs)
    }

    pub(super) fn params(&self, seg: usize, out_first: u64) -> Params {
        let (blocks, base) = self.seg_blocks[seg];
        Params {
            n: self.seg_len[seg] as u32,
            blocks: blocks as u32,
            block_base: base as u32,
            out_first: out_first as u32,
            out_rows: self.seg_rows as u32,
            out_first_word: (out_first / 32) as u32,
            out_words: (self.seg_rows / 32) as u32,
            pad: 0,
        }
    }

    /// Count pass + scan of the block counts, then the readback of the per-segment
    /// output offsets and the count. Fast path: shaders/compact/count.wgsl (flags
    /// are also written as a bitmap) and the single-pass scan; per-row path:
    /// count_blocks.wgsl and reduce-then-scan.
    pub(super) fn count(&self, ctx: &GpuContext, sel: &Selection<'_>, timer: Option<&KernelTimer>) -> GpuResult<Counted> {
        let nseg = self.seg_len.len();
        if self.n == 0 {
            if let Some(t) = timer {
                // Keep the timer's pass 0 written, as for a non-empty input.
                let mut enc = ctx.encoder("compact-count");
                Pass::default().encode(&mut enc, t.writes(0));
                ctx.submit(enc)?;
            }
            let offs = ctx.pool().alloc(4)?;
            let scratch_bytes = offs.size();
            return Ok(Counted { offs, seg_first: vec![0], count: 0, scratch_bytes, bits: Vec::new() });
        }
        let counts = ctx.pool().alloc(self.blocks * 4)?;
        let offs = ctx.pool().alloc(self.blocks * 4)?;
        let total = ctx.pool().alloc(4)?;
        let probe = DeviceArray::alloc_segmented(ctx, nseg + 1, 4, (nseg + 1).div_ceil(4) * 4)?;
        let mut pass = Pass::default();
        let mut bits = Vec::new();
        if self.fast {
            let bitmap = sel.is_bitmap();
            let pipe = self.count_pipeline(ctx, if bitmap { "count_bitmap" } else { "count_flags" })?;
            for seg in 0..nseg {
                let ub = ctx.uniform(&self.params(seg, 0));
                let sbuf = sel.array().segment(seg).0;
                if bitmap {
                    pass.dispatch(
                        ctx,
                        &pipe,
                        &[
                            wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 5, resource: sbuf.as_entire_binding() },
                        ],
                        self.seg_blocks[seg].0,
                    )?;
                } else {
                    let b = ctx.pool().alloc((self.seg_len[seg].div_ceil(32) * 4) as u64)?;
                    pass.dispatch(
                        ctx,
                        &pipe,
                        &[
                            wgpu::BindGroupEntry { binding: 0, resource: sbuf.as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 2, resource: b.raw().as_entire_binding() },
                            wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                        ],
                        self.seg_blocks[seg].0,
                    )?;
                    bits.push(b);
                }
            }
        } else {
            let count_pipe = self.pipeline(ctx, sel.is_bitmap(), None, "count_blocks")?;
            for seg in 0..nseg {
                let ub = ctx.uniform(&self.params(seg, 0));
                pass.dispatch(
                    ctx,
                    &count_pipe,
                    &[
                        wgpu::BindGroupEntry { binding: 0, resource: sel.array().segment(seg).0.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 1, resource: counts.raw().as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
                    ],
                    self.seg_blocks[seg].0,
                )?;
            }
        }
        let algorithm = if self.fast { ScanAlgorithm::SinglePass } else { ScanAlgorithm::ReduceThenScan };
        let sk = ScanKernel::new(
            ctx,
            ScanType::U32,
            &ScanOptions { subgroups: self.subgroups, workgroup_size: self.wg, algorithm, ..Default::default() },
        )?;
        sk.record(ctx, &mut pass, &[(counts.raw(), offs.raw(), self.blocks)], ScanKind::Exclusive, total.raw())?;
        let mut enc = ctx.encoder("compact-count");
        pass.encode(&mut enc, timer.and_then(|t| t.writes(0)));
        let pb = probe.segment(0).0;
        for (seg, &(_, base)) in self.seg_blocks.iter().enumerate() {
            enc.copy_buffer_to_buffer(offs.raw(), base * 4, pb, seg as u64 * 4, 4);
        }
        enc.copy_buffer_to_buffer(total.raw(), 0, pb, nseg as u64 * 4, 4);
        ctx.submit(enc)?;
        let seg_first: Vec<u64> = probe.download::<u32>(ctx)?.into_iter().map(u64::from).collect();
        let count = seg_first[nseg] as usize;
        let scratch_bytes = counts.size()
            + offs.size()
            + total.size()
            + probe.device_bytes()
            + pass.keep.iter().map(|b| b.size()).sum::<u64>()
            + bits.iter().map(|b| b.size()).sum::<u64>();
        Ok(Counted { offs, seg_first, count, scratch_bytes, bits })
    }
}

