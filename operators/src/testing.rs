//! Helpers for tests: the context a GPU test runs on.
use crate::context::{global, ContextOptions, GpuContext};
use crate::mode::GpuMode;
use std::sync::Arc;

/// The GPU context for a test. With `RIDGELINE_GPU=on` (what CI sets) a missing
/// adapter fails the test; otherwise a machine without an adapter skips GPU tests
/// (returns `None`) with a note on stderr.
pub fn test_context() -> Option<Arc<GpuContext>> {
    let mode = GpuMode::from_env().unwrap_or(GpuMode::Auto);
    match (global(), mode) {
        (Ok(c), GpuMode::Off) => {
            let _ = c;
            eprintln!("RIDGELINE_GPU=off: skipping GPU test");
            None
        }
        (Ok(c), _) => Some(c),
        (Err(e), GpuMode::On) => panic!("RIDGELINE_GPU=on but the GPU is unavailable: {e}"),
        (Err(e), _) => {
            eprintln!("no GPU ({e}): skipping GPU test");
            None
        }
    }
}

/// A context of its own with `opts` (for tests that need, say, tiny segments
/// without changing the process's global context), under the same rules as
/// [`test_context`]: `None` (skip) without an adapter unless `RIDGELINE_GPU=on`.
pub fn test_context_with(opts: &ContextOptions) -> Option<Arc<GpuContext>> {
    test_context()?;
    match GpuContext::new(opts) {
        Ok(c) => Some(Arc::new(c)),
        Err(e) => panic!("the global context came up but one with {opts:?} did not: {e}"),
    }
}

/// Dense ranks per dimension of a row-major `n x d` matrix of non-NaN values
/// (0 = smallest value, equal values equal ranks), row-major like the input: the
/// skyline tests' and example's way from coordinates to a rank matrix.
pub fn dense_ranks_f64(values: &[f64], n: usize, d: usize) -> Vec<u32> {
    let mut ranks = vec![0u32; n * d];
    let mut col: Vec<(f64, usize)> = Vec::with_capacity(n);
    for j in 0..d {
        col.clear();
        col.extend((0..n).map(|i| (values[i * d + j], i)));
        col.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let mut rank = 0u32;
        for k in 0..n {
            if k > 0 && col[k].0 != col[k - 1].0 {
                rank += 1;
            }
            ranks[col[k].1 * d + j] = rank;
        }
    }
    ranks
}
