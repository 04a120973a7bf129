//! Runs every `tests/slt/*.slt` file twice: in CPU mode (tables in host memory)
//! and in GPU mode (tables GPU-resident; RIDGELINE_GPU=on in CI). Both runs check
//! the same expected output, so GPU and CPU answers are identical.
//! `RIDGELINE_SLT_COMPLETE=1` rewrites the expected output from CPU mode.
use crate::common;
use crate::slt;
use ridgeline::GpuMode;
use slt::run_all;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_cpu_mode() {
    run_all(GpuMode::Off).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slt_gpu_mode() {
    run_all(common::gpu_mode()).await;
}
