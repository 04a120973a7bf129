//! [`bench_compact`]: device times of one column's compaction by a pseudo-random
//! selection.
use super::scatter::compact_timed;
use super::{Column, CompactAlgo, CompactOptions, CompactPath, Selection};
use crate::array::DeviceArray;
use crate::context::GpuContext;
use crate::error::GpuResult;
use crate::timing::KernelTimer;

/// A compaction benchmark result (see [`bench_compact`]).
#[derive(Clone, Debug)]
pub struct CompactBench {
    /// Rows of the input.
    pub n: usize,
    /// Rows selected.
    pub count: usize,
    /// The algorithm that ran.
    pub algo: CompactAlgo,
    /// Median GPU time (timestamps where available, else wall clock) of the count +
    /// scan pass plus the scatter pass, in milliseconds; excludes the count's
    /// readback.
    pub ms: f64,
    /// Median wall-clock time of the whole call (readback of the count and output
    /// allocation included), in milliseconds.
    pub wall_ms: f64,
    /// Scratch bytes used.
    pub scratch_bytes: u64,
    /// Input bytes (flags plus the column).
    pub input_bytes: u64,
    /// Median GPU time of the count pass (count kernel plus the scan of the block
    /// counts), in milliseconds (part of `ms`).
    pub count_ms: f64,
    /// Median GPU time of the scatter pass, in milliseconds (part of `ms`).
    pub scatter_ms: f64,
    /// The kernels that ran.
    pub path: CompactPath,
}

/// How [`bench_compact`] hands the selection over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SelectionForm {
    /// 0/1 `u32` flags ([`Selection::Flags`]).
    Flags,
    /// A bitmap ([`Selection::Bitmap`]: what Ridgeline's filter kernels produce).
    Bitmap,
}

/// Times the compaction of one `u32` column of `n` rows under `opts` by a selection
/// (0/1 flags or a bitmap, `form`) of a pseudo-random `selectivity` fraction of the
/// rows (the context's segmentation): one warm-up run, then the median of `reps`
/// (at least 1).
pub fn bench_compact(
    ctx: &GpuContext,
    n: usize,
    selectivity: f64,
    opts: &CompactOptions,
    reps: usize,
    form: SelectionForm,
) -> GpuResult<CompactBench> {
    let bitmap = form == SelectionForm::Bitmap;
    let threshold = (selectivity.clamp(0.0, 1.0) * 4294967296.0).min(4294967295.0) as u64;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let flags: Vec<u32> = (0..n)
        .map(|_| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((state >> 32) < threshold) as u32
        })
        .collect();
    let values: Vec<u32> = (0..n as u32).collect();
    let f = if bitmap {
        let mut words = vec![0u32; n.div_ceil(32)];
        for (i, &x) in flags.iter().enumerate() {
            words[i / 32] |= x << (i % 32);
        }
        DeviceArray::upload_segmented(ctx, &words, ctx.segment_rows() / 32)?
    } else {
        DeviceArray::upload(ctx, &flags)?
    };
    let v = DeviceArray::upload(ctx, &values)?;
    drop((flags, values));
    let cols = [Column::new(&v)];
    let mut gpu = Vec::new();
    let mut wall = Vec::new();
    let mut parts = Vec::new();
    let mut last = None;
    for rep in 0..=reps.max(1) {
        let timer = KernelTimer::new(ctx, 2);
        let t0 = std::time::Instant::now();
        let sel = if bitmap { Selection::Bitmap { bits: &f, rows: n } } else { Selection::Flags(&f) };
        let out = compact_timed(ctx, sel, &cols, opts, timer.as_ref())?;
        ctx.wait()?;
        let w = t0.elapsed().as_secs_f64() * 1e3;
        let (g, p) = match &timer {
            Some(t) => {
                let v = t.read_ms(ctx)?;
                (v.iter().sum(), (v[0], v[1]))
            }
            None => (w, (f64::NAN, f64::NAN)),
        };
        if rep > 0 {
            gpu.push(g);
            wall.push(w);
            parts.push(p);
        }
        last = Some(out);
    }
    let out = last.expect("at least one run");
    gpu.sort_by(|a, b| a.total_cmp(b));
    wall.sort_by(|a, b| a.total_cmp(b));
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let count_ms = median(parts.iter().map(|p| p.0).collect());
    let scatter_ms = median(parts.iter().map(|p| p.1).collect());
    Ok(CompactBench {
        count_ms,
        scatter_ms,
        path: opts.path,
        n,
        count: out.count,
        algo: out.algo,
        ms: gpu[gpu.len() / 2],
        wall_ms: wall[wall.len() / 2],
        scratch_bytes: out.scratch_bytes,
        input_bytes: out.input_bytes,
    })
}
