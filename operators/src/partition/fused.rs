//! The fused rank-and-scatter kernel (shaders/partition/scatter.wgsl, appended to
//! common.wgsl): per digit pass, one kernel ranks every round of a tile by
//! subgroup ballots, sorts it by digit in workgroup memory and writes every
//! partition's rows of it as one run; the per-column code is generated here.
//! On the H100 at 2^28 rows it beat the rank kernel and the moves at every fan-out
//! (docs/benchmarks/history/session-20.md; the module documentation of
//! [`super`]).
use super::kernels::{entry, key_fns, word, Kernels, Params, COMMON_WGSL, F_MULTI};
use super::options::{FusedPreload as Preload, PartitionOptions};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::pool::GpuBuffer;
use crate::scan::Pass;
use crate::tuning::partition as tuned;
use std::sync::Arc;

const SCATTER_WGSL: &str = include_str!("../../../shaders/partition/scatter.wgsl");
const SCATTER_COLUMN_WGSL: &str = include_str!("../../../shaders/partition/scatter_column.wgsl");

/// A section of shaders/partition/scatter_column.wgsl (after the line `// {marker}`
/// up to the next marker) with column `j`'s pieces filled in.
fn column_section(marker: &str, j: usize, lead: &str, stage: &str, ahead: &str, value: &str) -> String {
    let start = SCATTER_COLUMN_WGSL.find(&format!("// {marker}\n")).expect("scatter_column.wgsl marker") + marker.len() + 4;
    let rest = &SCATTER_COLUMN_WGSL[start..];
    let section = &rest[..rest.find("// @@").unwrap_or(rest.len())];
    section
        .replace("{{COLUMN}}", &j.to_string())
        .replace("{{LEAD}}", lead)
        .replace("{{STAGE}}", stage)
        .replace("{{AHEAD}}", ahead)
        .replace("{{VALUE}}", value)
}

/// Workgroup shape of the fused rank-and-scatter kernel on this adapter, or
/// `None` where it cannot run (no subgroups, subgroups outside 4..=32 lanes, too
/// little workgroup memory or too few storage bindings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct FusedShape {
    /// Invocations: [`tuned::FUSED_SUBGROUPS`] subgroups of the smallest size,
    /// 32..=256 ([`PartitionOptions::fused_workgroup`] overrides).
    swg: u32,
    /// Rows per invocation and round (`for_digits` sets it per pass).
    items: u32,
    /// The most rows per invocation the workgroup memory allows.
    max_items: u32,
    /// Rows per invocation asked for ([`PartitionOptions::fused_items`]).
    items_set: Option<u32>,
    /// Subgroups a workgroup can have (counters in workgroup memory).
    nsgmax: u32,
    /// When the column values are read (for the first columns, up to
    /// [`tuned::FUSED_PRELOAD_WORDS`] registers per item).
    preload: Preload,
    /// The preload asked for ([`PartitionOptions::fused_preload`]).
    preload_set: Option<Preload>,
}

impl FusedShape {
    /// The fused kernel's shape on this adapter under `opts`, or `None` where it
    /// cannot run.
    pub(super) fn new(ctx: &GpuContext, opts: &PartitionOptions) -> Option<FusedShape> {
        if !ctx.has_subgroups() {
            return None;
        }
        let (smin, smax) = (ctx.info().subgroup_min_size, ctx.info().subgroup_max_size);
        if smin < 4 || smax > 32 || smin > smax {
            return None;
        }
        let swg = opts
            .fused_workgroup
            .filter(|w| w.is_power_of_two() && (32..=256).contains(w))
            .unwrap_or((tuned::FUSED_SUBGROUPS * smin).clamp(32, 256));
        if swg % smax != 0 || ctx.limits().max_storage_buffers_per_shader_stage < 8 {
            return None;
        }
        let nsgmax = swg / smin;
        // subgroup counters, two staging arrays of R words, three digit arrays
        let storage = |items: u32| 4 * 256 * nsgmax + 8 * swg * items + 3 * 1024 + 64;
        let mut max_items = 16;
        while max_items > 1 && storage(max_items) > ctx.limits().max_compute_workgroup_storage_size {
            max_items /= 2;
        }
        if storage(max_items) > ctx.limits().max_compute_workgroup_storage_size {
            return None;
        }
        let items_set = opts.fused_items.filter(|i| (1..=16).contains(i));
        Some(FusedShape { swg, items: 4, max_items, items_set, nsgmax, preload: Preload::Round, preload_set: opts.fused_preload })
    }

    /// The shape of a pass over digits of `dbits` bits: up to
    /// [`tuned::FUSED_NARROW_DIGIT_BITS`] bits, [`tuned::FUSED_ITEMS_NARROW`] rows
    /// a round preloaded at its start; wider, [`tuned::FUSED_ITEMS_WIDE`] rows
    /// read a round ahead (the measurements are in `crate::tuning::partition`).
    fn for_digits(mut self, dbits: u32) -> Self {
        let (items, preload) = if dbits > tuned::FUSED_NARROW_DIGIT_BITS {
            (tuned::FUSED_ITEMS_WIDE, Preload::Ahead)
        } else {
            (tuned::FUSED_ITEMS_NARROW, Preload::Round)
        };
        self.items = self.items_set.unwrap_or(items).min(self.max_items);
        self.preload = self.preload_set.unwrap_or(preload);
        self
    }
}

/// The WGSL of one column's part of the fused kernel: (bindings, code before
/// the round loop, code at the start of a round, moves).
/// Column `j` binds `16 + 4j` (input), `17 + 4j` (output) and, with validity,
/// `18 + 4j` / `19 + 4j` (input / output bitmap).
///
/// With `from_key` the column is the key column itself,
/// whose words the kernel already holds in registers (`pk`, loaded a round
/// ahead): its values and validity bits are copied from there (`key_keep`)
/// instead of being loaded a second time.
fn fused_column_wgsl(j: usize, wide: bool, validity: bool, preload: Preload, from_key: bool) -> [String; 4] {
    // The first column's staging follows the destinations' barrier; a wide
    // one writes `sb`, which every invocation has just read, so it waits.
    let lead = if j > 0 || wide { "        workgroupBarrier();\n" } else { "" };
    let b = 16 + 4 * j;
    let t = if wide { "vec2<u32>" } else { "u32" };
    let mut decl = format!(
        "@group(0) @binding({}) var<storage, read> ci{j}: array<{t}>;\n@group(0) @binding({}) var<storage, read_write> co{j}: array<{t}>;\n",
        b,
        b + 1
    );
    let (stage, value) = if wide {
        ("sa[pos[@K]] = v.x; sb[pos[@K]] = v.y;", "vec2<u32>(sa[i], sb[i])")
    } else {
        ("sa[pos[@K]] = v;", "sa[i]")
    };
    // row `row`'s validity bit
    let bit = format!("(cvi{j}[row / 32u] >> (row % 32u)) & 1u");
    // item @K of the round whose first row of this invocation is `base`: its
    // value into `pv` or, staged, `v`; its validity bit into `pb` or `sa`
    let item = |base: &str, what: &str| format!("        //@unroll\n        {{ let row = {base} + @K * istride; if (row < tend) {{ {what} }} }}\n        //@end\n");
    let load_v = |base: &str| item(base, &format!("pv{j}[@K] = ci{j}[row];"));
    let load_b = |base: &str| item(base, &format!("pb{j}[@K] = {bit};"));
    let (mut before, mut start) = (String::new(), String::new());
    let mut arrays = format!("    var pv{j}: array<{t}, ITEMS>;\n");
    if validity {
        arrays += &format!("    var pb{j}: array<u32, ITEMS>;\n");
    }
    match preload {
        _ if from_key => start += &arrays,
        Preload::Late => {}
        Preload::Round => {
            start += &arrays;
            start += &load_v("sbase");
            if validity {
                start += &load_b("sbase");
            }
        }
        Preload::Ahead => {
            before += &arrays;
            before += &load_v("sbase0");
            if validity {
                before += &load_b("sbase0");
            }
        }
    }
    let stage_v = match preload {
        Preload::Late if !from_key => item("sbase", &format!("let v = ci{j}[row]; {stage}")),
        _ => item("sbase", &format!("let v = pv{j}[@K]; {stage}")),
    };
    let ahead = |s: String| if preload == Preload::Ahead && !from_key { s } else { String::new() };
    let mut code = column_section("@@VALUES", j, lead, &stage_v, &ahead(load_v("(sbase + R)")), value);
    if validity {
        decl += &format!(
            "@group(0) @binding({}) var<storage, read> cvi{j}: array<u32>;\n@group(0) @binding({}) var<storage, read_write> cvo{j}: array<atomic<u32>>;\n",
            b + 2,
            b + 3
        );
        let stage_b = match preload {
            Preload::Late if !from_key => item("sbase", &format!("sa[pos[@K]] = {bit};")),
            _ => item("sbase", &format!("sa[pos[@K]] = pb{j}[@K];")),
        };
        code += &column_section("@@VALIDITY", j, "", &stage_b, &ahead(load_b("(sbase + R)")), "");
    }
    [decl, before, start, code]
}

/// Repeats every `//@unroll` .. `//@end` block of `src` once per item, with
/// `@K` replaced by the item's number: the per-item arrays of the fused kernel
/// are then indexed by constants (kept in registers; a loop indexing them
/// dynamically put them in memory).
fn unroll_items(src: &str, items: u32) -> String {
    let mut out = String::with_capacity(src.len() * 2);
    let mut rest = src;
    while let Some(a) = rest.find("//@unroll\n") {
        out.push_str(&rest[..a]);
        let body_start = a + "//@unroll\n".len();
        let Some(e) = rest[body_start..].find("//@end\n") else { break };
        let body = &rest[body_start..body_start + e];
        for k in 0..items {
            out.push_str(&body.replace("@K", &format!("{k}u")));
        }
        rest = &rest[body_start + e + "//@end\n".len()..];
    }
    out.push_str(rest);
    out
}

/// Where the fused kernel gets each row's partition id: computed from the one
/// key column, or read from an ids array (several key columns, or the digit
/// passes after the first).
#[derive(Clone, Copy)]
pub(super) enum IdSource<'a> {
    Key(&'a Column<'a>),
    Ids(&'a DeviceArray),
}

/// One digit pass of the fused kernel: the scanned histogram and the pass's
/// parameters (`base.dshift`, `base.nb` digits).
pub(super) struct FusedPass<'a> {
    pub(super) base: Params,
    pub(super) counts: &'a GpuBuffer,
    pub(super) offs: &'a GpuBuffer,
    /// Tiles of each input segment.
    pub(super) seg_tiles: &'a [usize],
}

/// Records the fused rank-and-scatter of every column for one digit pass: one
/// dispatch per group of columns (as many as the storage bindings allow, at most
/// 8) and per (input segment, output segment). `outputs[i]` receives
/// `columns[i]` (values, validity).
pub(super) fn record_fused(
    ctx: &GpuContext,
    k: &Kernels,
    shape: FusedShape,
    pass: &mut Pass,
    columns: &[Column<'_>],
    outputs: &[(&DeviceArray, Option<&DeviceArray>)],
    ids: IdSource<'_>,
    fp: &FusedPass<'_>,
) -> GpuResult<()> {
    let dbits = if fp.base.nb <= 1 { 0 } else { 32 - (fp.base.nb - 1).leading_zeros() };
    let shape = shape.for_digits(dbits);
    let key_col = key_column(columns, ids);
    for g in &column_groups(ctx, columns) {
        let pipe = scatter_pipeline(ctx, k, shape, columns, g, ids, key_col, dbits)?;
        dispatch_group(ctx, pass, &pipe, columns, outputs, g, ids, key_col, fp)?;
    }
    Ok(())
}

/// Groups of columns that share a dispatch: as many as the storage bindings allow
/// (2 per column, 4 with validity), at most 8.
fn column_groups(ctx: &GpuContext, columns: &[Column<'_>]) -> Vec<Vec<usize>> {
    let budget = ctx.limits().max_storage_buffers_per_shader_stage.saturating_sub(4).min(64);
    let mut groups: Vec<Vec<usize>> = Vec::new();
    let mut used = u32::MAX;
    for (i, c) in columns.iter().enumerate() {
        let cost = if c.validity.is_some() { 4 } else { 2 };
        match groups.last_mut() {
            Some(g) if used + cost <= budget && g.len() < 8 => {
                g.push(i);
                used += cost;
            }
            _ => {
                groups.push(vec![i]);
                used = cost;
            }
        }
    }
    groups
}

/// The moved column that is the key column itself (same values and validity
/// arrays), whose words the kernel loads a round ahead anyway.
fn key_column(columns: &[Column<'_>], ids: IdSource<'_>) -> Option<usize> {
    match ids {
        IdSource::Key(key) => columns.iter().position(|c| {
            std::ptr::eq(c.values, key.values)
                && match (c.validity, key.validity) {
                    (None, None) => true,
                    (Some(a), Some(b)) => std::ptr::eq(a, b),
                    _ => false,
                }
        }),
        IdSource::Ids(_) => None,
    }
}

/// The fused kernel for one group of columns (`g`, indices into `columns`): the
/// pipeline's definitions, and its source generated when not cached yet.
#[allow(clippy::too_many_arguments)]
fn scatter_pipeline(
    ctx: &GpuContext,
    k: &Kernels,
    shape: FusedShape,
    columns: &[Column<'_>],
    g: &[usize],
    ids: IdSource<'_>,
    key_col: Option<usize>,
    dbits: u32,
) -> GpuResult<Arc<wgpu::ComputePipeline>> {
    let key_wide = matches!(ids, IdSource::Key(key) if key.values.elem_size() == 8);
    let nbs = 1u32 << dbits;
    let sig: String = g
        .iter()
        .map(|&i| format!("{}{}", columns[i].values.elem_size(), if columns[i].validity.is_some() { "v" } else { "" }))
        .collect::<Vec<_>>()
        .join(",");
    let defs = [
        ("KT", word(key_wide).to_string()),
        ("T", "u32".to_string()),
        ("KEY_FNS", key_fns(key_wide).to_string()),
        ("WG", k.wg.to_string()),
        ("CHUNKS", k.chunks.to_string()),
        (
            "ROW_RAW",
            match ids {
                // without NULLs the validity word is a constant
                IdSource::Key(key) if key.validity.is_none() => "let k = keys[r]; return vec3<u32>(klo(k), khi(k), 1u);",
                IdSource::Key(_) => "return key_words(r);",
                IdSource::Ids(_) => "return vec3<u32>(pid_in[r], 0u, 1u);",
            }
            .to_string(),
        ),
        ("RAW_PID", if matches!(ids, IdSource::Key(_)) { "return words_pid(w);" } else { "return w.x;" }.to_string()),
        ("SWG", shape.swg.to_string()),
        ("ITEMS", shape.items.to_string()),
        ("NSGMAX", shape.nsgmax.to_string()),
        ("NBS", nbs.to_string()),
        ("DPT", (nbs / shape.swg).max(1).to_string()),
        ("COLS", sig),
        ("DBITS", dbits.to_string()),
        ("PRELOAD", format!("{:?}", shape.preload)),
        ("KEEP", format!("{:?}", key_col.and_then(|c| g.iter().position(|&i| i == c)))),
    ];
    ctx.pipeline_lazy("partition_scatter", "scatter", &defs, || Ok(scatter_source(shape, columns, g, key_col)))
}

/// The fused kernel's source for one group of columns: common.wgsl, then
/// scatter.wgsl with every column's declarations, loads and moves filled in and
/// the item loops unrolled.
fn scatter_source(shape: FusedShape, columns: &[Column<'_>], g: &[usize], key_col: Option<usize>) -> String {
    let (mut decls, mut before, mut start, mut moves) = (String::new(), String::new(), String::new(), String::new());
    let mut budget = tuned::FUSED_PRELOAD_WORDS;
    let mut key_keep = String::new();
    for (j, &i) in g.iter().enumerate() {
        let wide = columns[i].values.elem_size() == 8;
        let validity = columns[i].validity.is_some();
        // registers per item this column's preload holds
        let words = 1 + wide as u32 + validity as u32;
        let from_key = key_col == Some(i);
        let mode = if words <= budget || from_key { shape.preload } else { Preload::Late };
        if mode != Preload::Late || from_key {
            budget = budget.saturating_sub(words);
        }
        if from_key {
            let v = if wide { "vec2<u32>(pk[@K].x, pk[@K].y)" } else { "pk[@K].x" };
            key_keep += &format!("            pv{j}[@K] = {v};\n");
            if validity {
                key_keep += &format!("            pb{j}[@K] = pk[@K].z;\n");
            }
        }
        let [d, b, st, m] = fused_column_wgsl(j, wide, validity, mode, from_key);
        decls += &d;
        before += &b;
        start += &st;
        moves += &m;
    }
    if moves.is_empty() {
        // the zeroed counters must wait for the next round's ranking
        moves.push_str("        workgroupBarrier();\n");
    }
    let src = SCATTER_WGSL
        .replace("{{COL_DECLS}}", &decls)
        .replace("{{COL_PREFETCH}}", &before)
        .replace("{{COL_PRELOAD}}", &start)
        .replace("{{KEY_KEEP}}", &key_keep)
        .replace("{{COL_MOVES}}", &moves);
    format!("{COMMON_WGSL}\n{}", unroll_items(&src, shape.items))
}

/// Records the dispatches of one group of columns: one per (input segment,
/// output segment), a workgroup per tile.
#[allow(clippy::too_many_arguments)]
fn dispatch_group(
    ctx: &GpuContext,
    pass: &mut Pass,
    pipe: &Arc<wgpu::ComputePipeline>,
    columns: &[Column<'_>],
    outputs: &[(&DeviceArray, Option<&DeviceArray>)],
    g: &[usize],
    ids: IdSource<'_>,
    key_col: Option<usize>,
    fp: &FusedPass<'_>,
) -> GpuResult<()> {
    let nsegs = columns[0].values.num_segments();
    let nout = outputs[0].0.num_segments();
    let mut tb = 0usize;
    for s in 0..nsegs {
        let rows = columns[0].values.segment(s).2;
        for t in 0..nout {
            let (_, out_first, out_rows) = outputs[0].0.segment(t);
            let ub = ctx.uniform(&Params {
                n: rows as u32,
                tiles: fp.seg_tiles[s] as u32,
                tile_base: tb as u32,
                out_first: out_first as u32,
                out_rows: out_rows as u32,
                flags: fp.base.flags | if nout > 1 { F_MULTI } else { 0 },
                ..fp.base
            });
            let mut e = vec![entry(4, fp.counts.raw()), entry(5, fp.offs.raw()), entry(15, &ub)];
            match ids {
                IdSource::Key(key) => {
                    e.push(entry(0, key.values.segment(s).0));
                    // the bitmap is read only where the key has NULLs (ROW_RAW)
                    if let Some(v) = key.validity {
                        e.push(entry(1, v.segment(s).0));
                    }
                }
                IdSource::Ids(a) => e.push(entry(3, a.segment(s).0)),
            }
            for (j, &i) in g.iter().enumerate() {
                let b = 16 + 4 * j as u32;
                // the key column's values and validity come from the key's bindings
                let from_key = key_col == Some(i);
                if !from_key {
                    e.push(entry(b, columns[i].values.segment(s).0));
                }
                e.push(entry(b + 1, outputs[i].0.segment(t).0));
                if let (Some(vin), Some(vout)) = (columns[i].validity, outputs[i].1) {
                    if !from_key {
                        e.push(entry(b + 2, vin.segment(s).0));
                    }
                    e.push(entry(b + 3, vout.segment(t).0));
                }
            }
            pass.dispatch(ctx, pipe, &e, fp.seg_tiles[s] as u64)?;
        }
        tb += fp.seg_tiles[s];
    }
    Ok(())
}
