//! The per-column WGSL of the scatter kernels (bindings, the copy of a row or of a
//! 4-row vector, the validity flush), and the split of many columns into launches
//! that fit the adapter's limits.
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use std::fmt::Write as _;

/// A column's shape in the generated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ColumnLayout {
    pub(super) wide: bool,
    pub(super) validity: bool,
}

impl ColumnLayout {
    /// One letter of a pipeline's cache key.
    fn key(&self) -> char {
        match (self.wide, self.validity) {
            (false, false) => 'a',
            (false, true) => 'b',
            (true, false) => 'c',
            (true, true) => 'd',
        }
    }
    fn bindings(&self) -> u32 {
        if self.validity {
            6
        } else {
            3
        }
    }
}

/// Generated WGSL for a column layout.
pub(super) struct Generated {
    pub(super) key: String,
    pub(super) decls: String,
    pub(super) copy: String,
    pub(super) flush: String,
    pub(super) vb_words: u32,
}

/// First binding of the column bindings (0: selection, 1: counts, 2: block
/// offsets, 3: params).
pub(super) const FIRST_COLUMN_BINDING: u32 = 4;

/// Three bindings from `b`: the input array `input` (read) and the two output
/// segments `lo` and `hi` (read-write).
fn column_decls(decls: &mut String, b: u32, input: &str, in_ty: &str, lo: &str, hi: &str, out_ty: &str) {
    let _ = writeln!(
        decls,
        "@group(0) @binding({b}) var<storage, read> {input}: array<{in_ty}>;\n\
         @group(0) @binding({}) var<storage, read_write> {lo}: array<{out_ty}>;\n\
         @group(0) @binding({}) var<storage, read_write> {hi}: array<{out_ty}>;",
        b + 1,
        b + 2
    );
}

/// WGSL for the columns of one launch of the block kernels (shaders/compact/
/// block.wgsl: the per-row scatter and Jumping Jack): per column, bindings `in`, `lo`, `hi` (the
/// values of the input segment and of the two output segments) and, with validity,
/// `vin`, `vlo`, `vhi`; the per-row copy and the per-word validity flush.
pub(super) fn generate_per_row(cols: &[ColumnLayout], block: u32) -> Generated {
    let mut g = Generated { key: String::new(), decls: String::new(), copy: String::new(), flush: String::new(), vb_words: 1 };
    let mut b = FIRST_COLUMN_BINDING;
    let mut k = 0u32;
    for (c, col) in cols.iter().enumerate() {
        let ty = if col.wide { "vec2<u32>" } else { "u32" };
        g.key.push(col.key());
        column_decls(&mut g.decls, b, &format!("in{c}"), ty, &format!("lo{c}"), &format!("hi{c}"), ty);
        let _ = writeln!(
            g.copy,
            "    {{ let v = in{c}[row]; if (in_lo) {{ lo{c}[idx] = v; }} else {{ hi{c}[idx] = v; }} }}"
        );
        b += 3;
        if col.validity {
            column_decls(&mut g.decls, b, &format!("vin{c}"), "u32", &format!("vlo{c}"), &format!("vhi{c}"), "atomic<u32>");
            let _ = writeln!(
                g.copy,
                "    if (((vin{c}[row / 32u] >> (row % 32u)) & 1u) != 0u) {{ atomicOr(&vb[{k}u * VBW + q / 32u], 1u << (q % 32u)); }}"
            );
            let _ = writeln!(
                g.flush,
                "        {{ let bits = atomicLoad(&vb[{k}u * VBW + w]); if (bits != 0u) {{ if (in_lo) {{ atomicOr(&vlo{c}[widx], bits); }} else {{ atomicOr(&vhi{c}[widx], bits); }} }} }}"
            );
            b += 3;
            k += 1;
        }
    }
    g.vb_words = (k * (block / 32 + 1)).max(1);
    g
}

/// WGSL for the columns of one launch of the fast stable scatter
/// (shaders/compact/stable.wgsl): per column, bindings `in` (read as 16-byte vectors), `lo`,
/// `hi` and, with validity, `vin`, `vlo`, `vhi`; the loads of one 4-row vector `v`
/// with selection nibble `nib`, the stores of its selected rows (rank `q` in the
/// block, output row `boff + q`), and the per-word validity flush.
pub(super) fn generate_fast(cols: &[ColumnLayout], block: u32) -> Generated {
    let mut g = Generated { key: String::new(), decls: String::new(), copy: String::new(), flush: String::new(), vb_words: 1 };
    let mut loads = String::new();
    let mut lanes: [String; 4] = Default::default();
    let mut b = FIRST_COLUMN_BINDING;
    let mut k = 0u32;
    for (c, col) in cols.iter().enumerate() {
        let oty = if col.wide { "vec2<u32>" } else { "u32" };
        g.key.push(col.key());
        column_decls(&mut g.decls, b, &format!("in{c}"), "vec4<u32>", &format!("lo{c}"), &format!("hi{c}"), oty);
        b += 3;
        let exprs: [String; 4] = if col.wide {
            let _ = writeln!(
                loads,
                "        var a{c} = vec4<u32>();\n        var b{c} = vec4<u32>();\n        \
                 if ((nib & 3u) != 0u) {{ a{c} = in{c}[2u * v]; }}\n        \
                 if ((nib & 12u) != 0u) {{ b{c} = in{c}[2u * v + 1u]; }}"
            );
            [format!("a{c}.xy"), format!("a{c}.zw"), format!("b{c}.xy"), format!("b{c}.zw")]
        } else {
            let _ = writeln!(loads, "        let x{c} = in{c}[v];");
            [format!("x{c}.x"), format!("x{c}.y"), format!("x{c}.z"), format!("x{c}.w")]
        };
        for (lane, e) in exprs.iter().enumerate() {
            let _ = writeln!(lanes[lane], "            if (in_lo) {{ lo{c}[idx] = {e}; }} else {{ hi{c}[idx] = {e}; }}");
        }
        if col.validity {
            column_decls(&mut g.decls, b, &format!("vin{c}"), "u32", &format!("vlo{c}"), &format!("vhi{c}"), "atomic<u32>");
            let _ = writeln!(loads, "        let vn{c} = vin{c}[v / 8u] >> ((v % 8u) * 4u);");
            for (lane, l) in lanes.iter_mut().enumerate() {
                let _ = writeln!(
                    l,
                    "            if (((vn{c} >> {lane}u) & 1u) != 0u) {{ let qq = bq + q; atomicOr(&vb[{k}u * VBW + qq / 32u], 1u << (qq % 32u)); }}"
                );
            }
            let _ = writeln!(
                g.flush,
                "        {{ let bits = atomicLoad(&vb[{k}u * VBW + w]);\n          \
                 if (shared_word) {{ if (bits != 0u) {{ if (in_lo) {{ atomicOr(&vlo{c}[widx], bits); }} else {{ atomicOr(&vhi{c}[widx], bits); }} }} }}\n          \
                 else if (in_lo) {{ atomicStore(&vlo{c}[widx], bits); }} else {{ atomicStore(&vhi{c}[widx], bits); }} }}"
            );
            b += 3;
            k += 1;
        }
    }
    g.copy = loads;
    for (lane, l) in lanes.iter().enumerate() {
        let _ = write!(
            g.copy,
            "        if ((nib & {}u) != 0u) {{\n            let local = boff + q - p.out_first;\n            \
             let in_lo = local < p.out_rows;\n            let idx = select(local - p.out_rows, local, in_lo);\n{l}            q += 1u;\n        }}\n",
            1u32 << lane
        );
    }
    g.vb_words = (k * (block / 32 + 1)).max(1);
    g
}

/// Splits the columns into launches that fit the adapter's storage-binding and
/// workgroup-memory limits.
pub(super) fn group_columns(ctx: &GpuContext, layout: &[ColumnLayout], block: u32, wg: u32) -> GpuResult<Vec<std::ops::Range<usize>>> {
    let max_bind = ctx.limits().max_storage_buffers_per_shader_stage;
    let max_shared = ctx.limits().max_compute_workgroup_storage_size as u64;
    let base_shared = 2 * wg as u64 * 4 + 3 * (block as u64 / 32) * 4 + 64;
    let per_validity = (block as u64 / 32 + 1) * 4;
    let mut groups = Vec::new();
    let mut start = 0;
    let (mut binds, mut shared) = (2u32, base_shared);
    for (i, c) in layout.iter().enumerate() {
        let nb = c.bindings();
        let ns = if c.validity { per_validity } else { 0 };
        if 2 + nb > max_bind || base_shared + ns > max_shared {
            return Err(GpuError::Invalid(format!(
                "a column needs {} storage bindings (the adapter allows {max_bind} per stage)",
                2 + nb
            )));
        }
        if binds + nb > max_bind || shared + ns > max_shared {
            groups.push(start..i);
            start = i;
            binds = 2;
            shared = base_shared;
        }
        binds += nb;
        shared += ns;
    }
    if start < layout.len() {
        groups.push(start..layout.len());
    }
    Ok(groups)
}
