//! Tuned constants of the runtime: the device context's waits and budget, the staging
//! buffers of transfers, the uniform cache and the benchmarks' warm-up
//! ([`crate::context`], [`crate::transfer`], [`crate::timing`]).
//!
//! The runtime's switches (`RIDGELINE_GPU`, `RIDGELINE_ADAPTER`, `RIDGELINE_GPU_MEMORY`,
//! `RIDGELINE_MAX_SEGMENT_BYTES`, `RIDGELINE_WAIT`, `RIDGELINE_SHADER_CHECKS`,
//! `RIDGELINE_TIMESTAMPS`) are declared in [`super::runtime`]; this family declares none
//! of its own. Each constant says what it controls, the value, and the measurement that
//! chose it.
use std::time::Duration;

super::switches! {}

/// How long a wait polls the device before it blocks in the driver, on GPUs (not on
/// CPU adapters, whose work runs on the cores a spinning thread would take): 20 ms.
/// A blocking wait woke 0.1-0.8 ms after the work was done on the H100; polling was
/// faster in 21 of 24 cells of `bench select`
/// (docs/benchmarks/history/session-12.md, "Waits that poll before they block").
/// `RIDGELINE_WAIT` overrides it.
pub const SPIN_WAIT: Duration = Duration::from_millis(20);

/// Device memory budget of the process on a CPU adapter (lavapipe, WARP,
/// SwiftShader), when `RIDGELINE_GPU_MEMORY` does not say: 4 GiB (device memory there
/// is host memory). Not measured: a default, set the switch to the machine's.
pub const CPU_ADAPTER_BUDGET: u64 = 4 << 30;

/// Device memory budget of the process on a GPU, when `RIDGELINE_GPU_MEMORY` does not
/// say: 16 GiB. Not measured: a default, set the switch to the card's memory.
pub const GPU_BUDGET: u64 = 16 << 30;

/// Bytes of one upload or readback staging buffer on a GPU: 64 MiB. Staged uploads
/// filled by several threads reached 27-30 GB/s from 64 MiB up on the H100, where
/// `queue.write_buffer` gave 4-13 GB/s (BENCHMARKS.md, "Transfers").
pub const STAGE_BYTES: u64 = 64 << 20;

/// Bytes of one staging buffer on a CPU adapter: 16 MiB (not measured separately).
pub const CPU_ADAPTER_STAGE_BYTES: u64 = 16 << 20;

/// Upload staging buffers kept at most: 4 (an upload pipelines two so that the bus and
/// the memcpy overlap; not measured separately).
pub const MAX_STAGES: usize = 4;

/// Bytes each thread copies at least when filling or emptying a staging buffer: 1 MiB
/// (smaller pieces are not worth a task; not measured separately).
pub const COPY_PIECE_BYTES: usize = 1 << 20;

/// Bytes of one staging chunk for small writes (kernel parameters, bucket tables,
/// offsets), and the most bytes of small writes that wait for a submission: 1 MiB.
/// Writes above a quarter of it go through the upload path at once.
pub const SMALL_CHUNK_BYTES: u64 = 1 << 20;

/// Chunks for small writes kept (each mapped again after its submission): 16. Small
/// writes replaced `queue.write_buffer`, whose fresh staging buffer per call cost
/// 2-3 ms of host time on the H100's driver (see `transfer::SmallWrites`).
pub const SMALL_CHUNKS: usize = 16;

/// Uniform buffers cached by content before the cache is cleared: 8192. Creating one
/// cost about 2 ms on the H100's Vulkan driver (it dominated every small kernel
/// launch), so repeated launches share theirs.
pub const UNIFORM_CACHE_ENTRIES: usize = 8192;

/// Milliseconds of work a benchmark runs before timing: 1000. A GPU left idle (as by
/// CPU work between measurements) drops its clock: the H100 went from 1980 MHz to
/// 345-555 MHz within a second and stayed there under short bursts, which made the
/// same kernel 4-5x slower (`nvidia-smi` log, 2026-11-24). Repeating the measured call
/// for this long first brings the clock back, as the CUDA figures had it (300 ms was
/// not always enough after seconds of CPU work: the first variant of `bench select`
/// then still measured up to 2x slower than the next).
pub const WARM_UP_MS: f64 = 1000.0;
