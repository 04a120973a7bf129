//! Helpers for tests: the context a GPU test runs on.
use crate::context::{global, GpuContext};
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
