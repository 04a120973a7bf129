//! The unfused multi-split path: the rank kernel gives every row its destination
//! (shaders/partition/rank.wgsl), then moves (shaders/partition/move.wgsl) carry
//! the ids and row numbers between digit passes and, at the end, every column by
//! the destinations (for several passes, the inverted composed permutation). It
//! runs where the fused kernel cannot (no subgroups, subgroups outside 4..=32
//! lanes, CPU adapters by default) and when [`super::PartitionOptions::fused`] is
//! `Some(false)`.
use super::kernels::{entry, Kernels, Params};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::scan::Pass;

/// Records `out[idx[i]] = src[i]` (or the row number `i` when `src` is `None`) for
/// all rows, one dispatch per (input segment, output segment).
pub(super) fn record_move(
    ctx: &GpuContext,
    k: &Kernels,
    pass: &mut Pass,
    idx: &DeviceArray,
    src: Option<&DeviceArray>,
    out: &DeviceArray,
) -> GpuResult<()> {
    let wide = src.is_some_and(|s| s.elem_size() == 8);
    let pipe = k.pipe(ctx, wide, if src.is_some() { "move_values" } else { "move_iota" })?;
    for s in 0..idx.num_segments() {
        let (ib, row_base, rows) = idx.segment(s);
        for t in 0..out.num_segments() {
            let (ob, out_first, out_rows) = out.segment(t);
            let ub = ctx.uniform(&Params {
                n: rows as u32,
                out_first: out_first as u32,
                out_rows: out_rows as u32,
                row_base: row_base as u32,
                ..Default::default()
            });
            let mut e = vec![entry(7, ib), entry(9, ob), entry(15, &ub)];
            if let Some(sa) = src {
                e.push(entry(8, sa.segment(s).0));
            }
            pass.dispatch(ctx, &pipe, &e, (rows as u64).div_ceil(k.wg as u64))?;
        }
    }
    Ok(())
}

/// Records the move of validity bits by the destinations `idx`: bit `i` of
/// `vin` to bit `idx[i]` of the zeroed `vout` (atomicOr), one dispatch per
/// (input segment, output segment).
pub(super) fn record_move_validity(ctx: &GpuContext, k: &Kernels, pass: &mut Pass, idx: &DeviceArray, vin: &DeviceArray, vout: &DeviceArray) -> GpuResult<()> {
    let pipe = k.pipe(ctx, false, "move_validity")?;
    let seg = idx.seg_rows();
    for s in 0..idx.num_segments() {
        let (ib, _, rows) = idx.segment(s);
        for t in 0..vout.num_segments() {
            let (ob, _, _) = vout.segment(t);
            let out_first = t * seg;
            let out_rows = (idx.len() - out_first).min(seg);
            let ub = ctx.uniform(&Params { n: rows as u32, out_first: out_first as u32, out_rows: out_rows as u32, ..Default::default() });
            pass.dispatch(
                ctx,
                &pipe,
                &[entry(7, ib), entry(10, vin.segment(s).0), entry(11, ob), entry(15, &ub)],
                (rows as u64).div_ceil(k.wg as u64),
            )?;
        }
    }
    Ok(())
}

