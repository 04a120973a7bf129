//! [`super::compact`]'s steps after validation: the count pass ([`Plan::count`]),
//! the algorithm Auto picks, the outputs, and the scatter pass (one dispatch per
//! input segment and group of columns).
use super::codegen::{group_columns, ColumnLayout, FIRST_COLUMN_BINDING};
use super::plan::{Counted, Plan};
use super::{Column, CompactAlgo, CompactOptions, Compacted, CompactedColumn, Selection};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::scan::Pass;
use crate::timing::KernelTimer;

/// [`super::compact`], the count pass timed as pass 0 and the scatter pass as
/// pass 1 of `timer`.
pub(super) fn compact_timed(
    ctx: &GpuContext,
    sel: Selection<'_>,
    columns: &[Column<'_>],
    opts: &CompactOptions,
    timer: Option<&KernelTimer>,
) -> GpuResult<Compacted> {
    let plan = Plan::new(ctx, &sel, columns, opts)?;
    let input_bytes = (sel.array().len() * 4) as u64
        + columns
            .iter()
            .map(|c| (c.values.len() * c.values.elem_size() + c.validity.map_or(0, |v| v.len() * 4)) as u64)
            .sum::<u64>();
    let counted = plan.count(ctx, &sel, timer)?;
    let count = counted.count;
    let algo = pick_algo(opts, count, plan.n);
    let outputs = alloc_outputs(ctx, columns, count, plan.seg_rows)?;
    let mut enc = ctx.encoder("compact-scatter");
    let mut pass = Pass::default();
    if count > 0 && !columns.is_empty() {
        for o in &outputs {
            if let Some(v) = &o.validity {
                for i in 0..v.num_segments() {
                    enc.clear_buffer(v.segment(i).0, 0, None);
                }
            }
        }
        record_scatter(ctx, &mut pass, &plan, &counted, &sel, columns, &outputs, algo)?;
    }
    pass.encode(&mut enc, timer.and_then(|t| t.writes(1)));
    if let Some(t) = timer {
        t.resolve(&mut enc);
    }
    ctx.submit(enc)?;
    drop(pass);
    Ok(Compacted { columns: outputs, count, algo, scratch_bytes: counted.scratch_bytes, input_bytes })
}

/// The algorithm that runs: Auto picks Jumping Jack inside the options'
/// selectivity range (`count / n`), Stable elsewhere.
fn pick_algo(opts: &CompactOptions, count: usize, n: usize) -> CompactAlgo {
    match opts.algo {
        CompactAlgo::Auto => {
            let s = if n == 0 { 0.0 } else { count as f64 / n as f64 };
            if s >= opts.jj_min_selectivity && s <= opts.jj_max_selectivity {
                CompactAlgo::JumpingJack
            } else {
                CompactAlgo::Stable
            }
        }
        a => a,
    }
}

/// Output columns of `count` rows shaped like `columns` (`seg_rows` rows a segment).
fn alloc_outputs(ctx: &GpuContext, columns: &[Column<'_>], count: usize, seg_rows: usize) -> GpuResult<Vec<CompactedColumn>> {
    let mut outputs = Vec::with_capacity(columns.len());
    for c in columns {
        let values = DeviceArray::alloc_segmented(ctx, count, c.values.elem_size(), seg_rows)?;
        let validity = match c.validity {
            Some(_) => Some(DeviceArray::alloc_segmented(ctx, count.div_ceil(32), 4, seg_rows / 32)?),
            None => None,
        };
        outputs.push(CompactedColumn { values, validity });
    }
    Ok(outputs)
}

/// Records the scatter of every column: per input segment with selected rows, one
/// dispatch per group of columns, writing into the (at most two) output segments
/// its rows land in.
#[allow(clippy::too_many_arguments)]
fn record_scatter(
    ctx: &GpuContext,
    pass: &mut Pass,
    plan: &Plan,
    counted: &Counted,
    sel: &Selection<'_>,
    columns: &[Column<'_>],
    outputs: &[CompactedColumn],
    algo: CompactAlgo,
) -> GpuResult<()> {
    let s = plan.seg_rows;
    let layout: Vec<ColumnLayout> =
        columns.iter().map(|c| ColumnLayout { wide: c.values.elem_size() == 8, validity: c.validity.is_some() }).collect();
    let fast_stable = plan.fast && algo == CompactAlgo::Stable;
    // The fast path's scatter reads the selection as a bitmap: the selection's
    // own, or the one the count pass built from the flags.
    let bitmap = plan.fast || sel.is_bitmap();
    let sel_buf = |seg: usize| -> &wgpu::Buffer {
        if plan.fast && !sel.is_bitmap() {
            counted.bits[seg].raw()
        } else {
            sel.array().segment(seg).0
        }
    };
    let entry = if algo == CompactAlgo::JumpingJack { "scatter_jj" } else { "scatter_stable" };
    let groups = group_columns(ctx, &layout, plan.block, plan.wg)?;
    let pipes = groups
        .iter()
        .map(|g| {
            if fast_stable {
                plan.stable_pipeline(ctx, &layout[g.clone()])
            } else {
                plan.pipeline(ctx, bitmap, Some(&layout[g.clone()]), entry)
            }
        })
        .collect::<GpuResult<Vec<_>>>()?;
    for seg in 0..plan.seg_len.len() {
        let (first, end) = (counted.seg_first[seg], counted.seg_first[seg + 1]);
        if end == first {
            continue; // nothing selected in this segment
        }
        let lo = (first / s as u64) as usize;
        let hi = if (end - 1) / s as u64 > lo as u64 { lo + 1 } else { lo };
        let ub = ctx.uniform(&plan.params(seg, lo as u64 * s as u64));
        for (g, pipe) in groups.iter().zip(&pipes) {
            let mut entries = vec![
                wgpu::BindGroupEntry { binding: 0, resource: sel_buf(seg).as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: counted.offs.raw().as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: ub.as_entire_binding() },
            ];
            let mut b = FIRST_COLUMN_BINDING;
            for ci in g.clone() {
                let (col, out) = (&columns[ci], &outputs[ci]);
                let trio = [col.values.segment(seg).0, out.values.segment(lo).0, out.values.segment(hi).0];
                for buf in trio {
                    entries.push(wgpu::BindGroupEntry { binding: b, resource: buf.as_entire_binding() });
                    b += 1;
                }
                if let (Some(vin), Some(vout)) = (col.validity, &out.validity) {
                    let trio = [vin.segment(seg).0, vout.segment(lo).0, vout.segment(hi).0];
                    for buf in trio {
                        entries.push(wgpu::BindGroupEntry { binding: b, resource: buf.as_entire_binding() });
                        b += 1;
                    }
                }
            }
            pass.dispatch(ctx, pipe, &entries, plan.seg_blocks[seg].0)?;
        }
    }
    Ok(())
}
