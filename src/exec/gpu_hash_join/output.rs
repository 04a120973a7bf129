//! The host side of a join's output: probe rows alone (semi, anti) and the
//! residual filter over the pairs.
use super::*;

/// Probe rows `rows` alone (right semi and anti joins).
pub(super) fn probe_side_only(probe: &RecordBatch, rows: &[u32]) -> Result<RecordBatch> {
    let idx = UInt32Array::from(rows.to_vec());
    let cols = probe.columns().iter().map(|c| take(c.as_ref(), &idx, None)).collect::<std::result::Result<Vec<_>, _>>()?;
    let opts = RecordBatchOptions::new().with_row_count(Some(rows.len()));
    Ok(RecordBatch::try_new_with_options(probe.schema(), cols, &opts)?)
}

/// The pairs whose rows pass the join's residual filter.
pub(super) fn apply_filter(filter: &JoinFilter, build: &RecordBatch, probe: &RecordBatch, p: Vec<u32>, b: Vec<u32>) -> Result<(Vec<u32>, Vec<u32>)> {
    if p.is_empty() {
        return Ok((p, b));
    }
    let pi = UInt32Array::from(p);
    let bi = UInt32Array::from(b);
    let cols = filter
        .column_indices()
        .iter()
        .map(|c| match c.side {
            JoinSide::Left => Ok(take(build.column(c.index).as_ref(), &bi, None)?),
            JoinSide::Right => Ok(take(probe.column(c.index).as_ref(), &pi, None)?),
            JoinSide::None => Err(DataFusionError::Internal("join filter column of no side".into())),
        })
        .collect::<Result<Vec<_>>>()?;
    let opts = RecordBatchOptions::new().with_row_count(Some(pi.len()));
    let batch = RecordBatch::try_new_with_options(filter.schema().clone(), cols, &opts)?;
    let mask = filter.expression().evaluate(&batch)?.into_array(batch.num_rows())?;
    let mask = mask
        .as_any()
        .downcast_ref::<BooleanArray>()
        .ok_or_else(|| DataFusionError::Internal(format!("join filter of type {}", mask.data_type())))?;
    let (mut po, mut bo) = (Vec::new(), Vec::new());
    for i in 0..mask.len() {
        if mask.is_valid(i) && mask.value(i) {
            po.push(pi.value(i));
            bo.push(bi.value(i));
        }
    }
    Ok((po, bo))
}
