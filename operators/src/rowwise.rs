//! Row-wise generated kernels: the runner for WGSL that evaluates one row per
//! invocation (compiled SQL expressions, see `ridgeline::gpu_expr`).
//!
//! The kernel contract (the generator writes the body, this module launches it):
//!
//! ```wgsl
//! struct Params { rows: u32, grid: u32, row0_lo: u32, row0_hi: u32 }
//! @group(0) @binding(0) var<uniform> params: Params;          // rows of this segment
//! @group(0) @binding(1) var<storage, read_write> err: array<atomic<u32>, 4>;
//! @group(0) @binding(2 + i) ...                                 // the arrays, in order
//! ```
//!
//! The kernel runs once per segment of the batch (every array is bound segment by
//! segment, so none exceeds the binding limit); `grid` is the number of
//! invocations per row of the 2-D dispatch, so the row is
//! `wid.y * grid + wid.x * WG + lid.x`. A kernel reports a SQL error (division by
//! zero, overflow) by `atomicMax(&err[0], code)`; [`RowwiseRun::error_code`] reads
//! it back once, after all segments.
use crate::array::DeviceArray;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};

/// Invocations per workgroup of row-wise kernels (rows per workgroup).
pub const ROWWISE_WG: u32 = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    grid: u32,
    row0_lo: u32,
    row0_hi: u32,
}

/// An array bound to a row-wise kernel.
#[derive(Clone, Copy, Debug)]
pub enum RowArray<'a> {
    /// One element per row (`seg_rows` per segment).
    Rows(&'a DeviceArray),
    /// A bitmap of `u32` words (`seg_rows / 32` words per segment).
    Bits(&'a DeviceArray),
}

impl RowArray<'_> {
    fn array(&self) -> &DeviceArray {
        match self {
            RowArray::Rows(a) | RowArray::Bits(a) => a,
        }
    }
}

/// A launched row-wise kernel; holds the error word until it is read.
#[derive(Debug)]
pub struct RowwiseRun {
    err: DeviceArray,
}

impl RowwiseRun {
    /// The largest error code any row reported (0: none). Waits for the kernel.
    pub fn error_code(&self, ctx: &GpuContext) -> GpuResult<u32> {
        let v: Vec<u32> = self.err.download(ctx)?;
        Ok(v.first().copied().unwrap_or(0))
    }

    /// The largest error code of several runs, read back in one transfer (each
    /// run's error word copied next to the others first). Waits for the kernels.
    pub fn error_code_many(ctx: &GpuContext, runs: &[&RowwiseRun]) -> GpuResult<u32> {
        match runs {
            [] => return Ok(0),
            [one] => return one.error_code(ctx),
            _ => {}
        }
        let all = DeviceArray::alloc(ctx, runs.len(), 4)?;
        let (dst, _, _) = all.segment(0);
        let mut enc = ctx.encoder("rowwise-errors");
        for (i, r) in runs.iter().enumerate() {
            enc.copy_buffer_to_buffer(r.err.segment(0).0, 0, dst, i as u64 * 4, 4);
        }
        ctx.submit(enc)?;
        let v: Vec<u32> = all.download(ctx)?;
        Ok(v.into_iter().max().unwrap_or(0))
    }
}

/// Runs the row-wise kernel `source` (entry point `main`, `{{WG}}` replaced by
/// [`ROWWISE_WG`]) over `rows` rows split into segments of `seg_rows` rows,
/// binding `arrays` after the parameters and the error word. Every array must be
/// split at the same rows: `Rows` arrays into `seg_rows` elements per segment,
/// `Bits` arrays into `seg_rows / 32` words.
///
/// With `enc` the kernel is recorded into it instead of submitted: the caller
/// submits it (with the work that reads its outputs, in one submission) and keeps
/// every array alive until then.
pub fn run_rowwise(
    ctx: &GpuContext,
    name: &str,
    source: &str,
    rows: usize,
    seg_rows: usize,
    arrays: &[RowArray<'_>],
    enc: Option<&mut wgpu::CommandEncoder>,
) -> GpuResult<RowwiseRun> {
    match enc {
        Some(enc) => record_rowwise(ctx, name, source, rows, seg_rows, arrays, enc),
        None => {
            let mut enc = ctx.encoder(name);
            let run = record_rowwise(ctx, name, source, rows, seg_rows, arrays, &mut enc)?;
            ctx.submit(enc)?;
            Ok(run)
        }
    }
}

fn record_rowwise(
    ctx: &GpuContext,
    name: &str,
    source: &str,
    rows: usize,
    seg_rows: usize,
    arrays: &[RowArray<'_>],
    enc: &mut wgpu::CommandEncoder,
) -> GpuResult<RowwiseRun> {
    if seg_rows == 0 || seg_rows % 32 != 0 {
        return Err(GpuError::Invalid(format!("row-wise kernel over segments of {seg_rows} rows (expected a multiple of 32)")));
    }
    if rows > u32::MAX as usize {
        return Err(GpuError::Invalid(format!("row-wise kernel over {rows} rows (at most 2^32 - 1)")));
    }
    let segments = rows.div_ceil(seg_rows);
    for (i, a) in arrays.iter().enumerate() {
        let arr = a.array();
        let expect_seg = match a {
            RowArray::Rows(_) => seg_rows,
            RowArray::Bits(_) => seg_rows / 32,
        };
        if arr.num_segments() != segments || (segments > 1 && arr.seg_rows() != expect_seg) {
            return Err(GpuError::Invalid(format!(
                "row-wise kernel array {i}: {} segments of {} (expected {segments} of {expect_seg})",
                arr.num_segments(),
                arr.seg_rows()
            )));
        }
    }
    let err = DeviceArray::alloc(ctx, 4, 4)?;
    let (err_buf, _, _) = err.segment(0);
    enc.clear_buffer(err_buf, 0, None);
    if segments > 0 {
        let pipe = ctx.pipeline(name, source, "main", &[("WG", ROWWISE_WG.to_string())])?;
        let layout = pipe.get_bind_group_layout(0);
        let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
        let mut uniforms = Vec::with_capacity(segments);
        for s in 0..segments {
            let start = s * seg_rows;
            let seg_len = (rows - start).min(seg_rows);
            let groups = (seg_len as u64).div_ceil(ROWWISE_WG as u64);
            let (x, y, z) = dispatch_dims(groups, max_dim);
            let ub = ctx.uniform(&Params {
                rows: seg_len as u32,
                grid: x * ROWWISE_WG,
                row0_lo: start as u32,
                row0_hi: (start as u64 >> 32) as u32,
            });
            let mut entries = vec![
                wgpu::BindGroupEntry { binding: 0, resource: ub.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: err_buf.as_entire_binding() },
            ];
            for (i, a) in arrays.iter().enumerate() {
                let (buf, _, _) = a.array().segment(s);
                entries.push(wgpu::BindGroupEntry { binding: 2 + i as u32, resource: buf.as_entire_binding() });
            }
            let bg = ctx.scoped(|| {
                ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some(name), layout: &layout, entries: &entries })
            })?;
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some(name), timestamp_writes: None });
                pass.set_pipeline(&pipe);
                pass.set_bind_group(0, &bg, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
            uniforms.push(ub);
        }
        drop(uniforms);
    }
    Ok(RowwiseRun { err })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Raises each row's value as the error code, then adds 1 to it.
    const KERNEL: &str = include_str!("../../shaders/rowwise_test.wgsl");

    #[test]
    fn recorded_runs_and_one_error_readback() {
        let Some(ctx) = crate::testing::test_context() else { return };
        // sizes not a multiple of the workgroup; one array with no error, two with
        // codes at odd rows, one row long
        let inputs: Vec<Vec<u32>> = vec![vec![0; 1000], (0..777).map(|i| if i == 500 { 7 } else { 0 }).collect(), vec![3], vec![0; 64]];
        let arrays: Vec<DeviceArray> = inputs.iter().map(|v| DeviceArray::upload(&ctx, v).unwrap()).collect();
        let mut enc = ctx.encoder("test");
        let runs: Vec<RowwiseRun> = arrays
            .iter()
            .map(|a| run_rowwise(&ctx, "rowwise_test", KERNEL, a.len(), a.len().div_ceil(32) * 32, &[RowArray::Rows(a)], Some(&mut enc)).unwrap())
            .collect();
        ctx.submit(enc).unwrap();
        let refs: Vec<&RowwiseRun> = runs.iter().collect();
        assert_eq!(RowwiseRun::error_code_many(&ctx, &refs).unwrap(), 7);
        assert_eq!(RowwiseRun::error_code_many(&ctx, &[&runs[0], &runs[3]]).unwrap(), 0);
        assert_eq!(RowwiseRun::error_code_many(&ctx, &[&runs[2]]).unwrap(), 3);
        assert_eq!(RowwiseRun::error_code_many(&ctx, &[]).unwrap(), 0);
        for (a, v) in arrays.iter().zip(&inputs) {
            let got: Vec<u32> = a.download(&ctx).unwrap();
            assert_eq!(got, v.iter().map(|x| x + 1).collect::<Vec<_>>());
        }
    }
}
