//! The process-wide GPU device context: lazy, `Send + Sync`, created on first use
//! with the adapter's own limits and every optional feature Ridgeline can use.
//!
//! The parts, by role: `mod.rs` (the context: adapter choice, device, waits,
//! submission), `options.rs` (how it is created), `pipelines.rs` (compiled pipelines
//! and parameter uniforms, cached), `transfers.rs` (uploads, readbacks and small
//! writes through the staging pool of [`crate::transfer`]), `report.rs` (the adapter
//! report). The memory budget ([`crate::pool::BufferPool`]) is per process: every
//! session of the process shares the global context ([`global`]) and its pool.
#[cfg(all(unix, not(target_os = "macos"), not(target_os = "ios"), not(target_os = "android")))]
mod headless;
mod options;
mod pipelines;
mod report;
mod transfers;

pub use options::{parse_bytes, ContextOptions, WaitMode};
pub use report::AdapterReport;

use crate::error::{wgpu_error, GpuError, GpuResult};
use crate::pool::BufferPool;
use crate::transfer::StagingPool;
use crate::tuning::device::{CPU_ADAPTER_BUDGET, GPU_BUDGET, SPIN_WAIT};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

/// Features Ridgeline asks for when the adapter has them.
pub const WANTED_FEATURES: wgpu::Features = wgpu::Features::SUBGROUP
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::SHADER_INT64)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_MIN_MAX)
    .union(wgpu::Features::SHADER_INT64_ATOMIC_ALL_OPS)
    .union(wgpu::Features::SHADER_F16);

/// One binding may never exceed 2 GiB - 1 in wgpu, whatever the driver allows.
const WGPU_MAX_BINDING: u64 = (1u64 << 31) - 1;

/// The shared device context.
pub struct GpuContext {
    /// The wgpu device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    limits: wgpu::Limits,
    features: wgpu::Features,
    segment_rows: usize,
    pool: BufferPool,
    pub(crate) staging: StagingPool,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    uniforms: Mutex<HashMap<Vec<u8>, wgpu::Buffer>>,
    lost: LostSlot,
    uncaptured: ErrorSlot,
    trusted_shaders: bool,
    spin_wait: Option<std::time::Duration>,
}

static GLOBAL: OnceLock<GpuResult<Arc<GpuContext>>> = OnceLock::new();
static WARNED: AtomicBool = AtomicBool::new(false);

/// The process-wide context, created on first call from the environment. The
/// outcome (including a failure) is kept for the life of the process.
pub fn global() -> GpuResult<Arc<GpuContext>> {
    GLOBAL
        .get_or_init(|| GpuContext::new(&ContextOptions::from_env()).map(Arc::new))
        .clone()
}

/// Logs `msg` as a warning once per process (used for the "no adapter, running on
/// the CPU" message of mode auto).
pub fn warn_once(msg: &str) {
    if !WARNED.swap(true, Ordering::SeqCst) {
        log::warn!("{msg}");
    }
}

/// Vulkan adapters through an instance without window-system extensions
/// ([`headless`]), where the platform has one and Vulkan is wanted; else none.
#[cfg(all(unix, not(target_os = "macos"), not(target_os = "ios"), not(target_os = "android")))]
fn headless_adapters(desc: &wgpu::InstanceDescriptor) -> Vec<wgpu::Adapter> {
    if !desc.backends.contains(wgpu::Backends::VULKAN) {
        return Vec::new();
    }
    match headless::instance(desc.flags) {
        Some(i) => pollster::block_on(i.enumerate_adapters(wgpu::Backends::VULKAN)),
        None => Vec::new(),
    }
}

#[cfg(not(all(unix, not(target_os = "macos"), not(target_os = "ios"), not(target_os = "android"))))]
fn headless_adapters(_desc: &wgpu::InstanceDescriptor) -> Vec<wgpu::Adapter> {
    Vec::new()
}

fn backend_bits() -> wgpu::Backends {
    wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY)
}

fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The adapter to use: the first of the kinds discrete, integrated, virtual, other,
/// CPU, among those whose name contains `opts.adapter` (if given).
fn pick_adapter(opts: &ContextOptions) -> GpuResult<wgpu::Adapter> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backend_bits();
    let mut adapters = headless_adapters(&desc);
    if adapters.is_empty() {
        let instance = wgpu::Instance::new(desc);
        adapters = pollster::block_on(instance.enumerate_adapters(backend_bits()));
    }
    if adapters.is_empty() {
        return Err(GpuError::NoAdapter(
            "no Vulkan/Metal/DX12 adapter found (on a CPU-only Linux machine install a Vulkan driver: apt-get install mesa-vulkan-drivers)".into(),
        ));
    }
    let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
    if let Some(want) = &opts.adapter {
        let w = want.to_lowercase();
        adapters.retain(|a| a.get_info().name.to_lowercase().contains(&w));
        if adapters.is_empty() {
            return Err(GpuError::NoAdapter(format!(
                "no adapter name contains '{want}' (RIDGELINE_ADAPTER); adapters: {}",
                names.join(", ")
            )));
        }
    }
    adapters.sort_by_key(|a| type_rank(a.get_info().device_type));
    Ok(adapters.remove(0))
}

/// Where the device's loss and its uncaptured errors are recorded, for
/// [`GpuContext::check`].
type LostSlot = Arc<Mutex<Option<String>>>;
type ErrorSlot = Arc<Mutex<Option<GpuError>>>;

/// Records device loss and uncaptured errors (the first one) for [`GpuContext::check`].
fn install_error_hooks(device: &wgpu::Device) -> (LostSlot, ErrorSlot) {
    let lost = Arc::new(Mutex::new(None));
    let lost2 = lost.clone();
    device.set_device_lost_callback(move |reason, msg| {
        log::error!("GPU device lost ({reason:?}): {msg}");
        *lost2.lock().unwrap() = Some(format!("{reason:?}: {msg}"));
    });
    let uncaptured = Arc::new(Mutex::new(None));
    let unc2 = uncaptured.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        log::error!("uncaptured GPU error: {e}");
        let mut slot = unc2.lock().unwrap();
        if slot.is_none() {
            *slot = Some(wgpu_error(e));
        }
    }));
    (lost, uncaptured)
}

impl GpuContext {
    /// Creates a context (the global one is usually what you want).
    pub fn new(opts: &ContextOptions) -> GpuResult<GpuContext> {
        let adapter = pick_adapter(opts)?;
        let info = adapter.get_info();
        let features = adapter.features() & WANTED_FEATURES;
        let limits = adapter.limits();
        let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("ridgeline"),
            required_features: features,
            required_limits: limits.clone(),
            experimental_features: wgpu::ExperimentalFeatures::disabled(),
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        }))
        .map_err(|e| GpuError::NoAdapter(format!("{}: request_device failed: {e}", info.name)))?;
        let (lost, uncaptured) = install_error_hooks(&device);

        let max_binding = (limits.max_storage_buffer_binding_size as u64)
            .min(limits.max_buffer_size)
            .min(WGPU_MAX_BINDING);
        let seg_bytes = opts.max_segment_bytes.map_or(max_binding, |c| c.min(max_binding));
        // Rows per segment: every column type (at most 8 bytes a value) fits one
        // binding, and segments start on a multiple of 4096 rows so validity words
        // and vector loads stay aligned.
        let segment_rows = ((seg_bytes / 8) / 4096 * 4096).max(4096) as usize;
        let cpu_adapter = info.device_type == wgpu::DeviceType::Cpu;
        // One budget for the whole process (every session shares this context).
        let budget = opts.memory_budget.unwrap_or(if cpu_adapter { CPU_ADAPTER_BUDGET } else { GPU_BUDGET });
        let pool = BufferPool::new(device.clone(), budget, limits.max_buffer_size, (limits.max_storage_buffer_binding_size as u64).min(WGPU_MAX_BINDING) / 4 * 4);
        let staging = StagingPool::new(cpu_adapter);
        let trusted_shaders = !cfg!(debug_assertions)
            && crate::tuning::get("RIDGELINE_SHADER_CHECKS").is_none_or(|v| v == "0");
        // Waits poll the device in a loop for up to SPIN_WAIT before they block in
        // the driver: a blocking wait woke 0.1-0.8 ms after the work was done on the
        // H100 (docs/benchmarks/history/session-12.md). Not on CPU adapters, whose work
        // runs on the cores a spinning thread would take. RIDGELINE_WAIT=block never
        // spins; RIDGELINE_WAIT=spin[:MS] spins (for up to MS milliseconds) on any adapter.
        let spin_wait = match opts.wait {
            Some(WaitMode::Block) => None,
            Some(WaitMode::Spin(d)) => Some(d),
            None if cpu_adapter => None,
            None => Some(SPIN_WAIT),
        };
        log::info!("GPU adapter {} ({:?}), segment rows {segment_rows}", info.name, info.backend);
        Ok(GpuContext {
            device,
            queue,
            info,
            limits,
            features,
            segment_rows,
            pool,
            staging,
            pipelines: Mutex::new(HashMap::new()),
            uniforms: Mutex::new(HashMap::new()),
            lost,
            uncaptured,
            trusted_shaders,
            spin_wait,
        })
    }

    /// Adapter information.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.info
    }
    /// Limits granted to the device.
    pub fn limits(&self) -> &wgpu::Limits {
        &self.limits
    }
    /// Features granted to the device.
    pub fn features(&self) -> wgpu::Features {
        self.features
    }
    /// Whether subgroup operations may be used.
    pub fn has_subgroups(&self) -> bool {
        self.features.contains(wgpu::Features::SUBGROUP)
    }
    /// Whether subgroup operations and subgroup barriers may be used.
    pub fn has_subgroup_barriers(&self) -> bool {
        self.has_subgroups() && self.features.contains(wgpu::Features::SUBGROUP_BARRIER)
    }
    /// Whether 64-bit integers may be used in shaders.
    pub fn has_int64(&self) -> bool {
        self.features.contains(wgpu::Features::SHADER_INT64)
    }
    /// Whether timestamp queries may be used.
    pub fn has_timestamps(&self) -> bool {
        self.features.contains(wgpu::Features::TIMESTAMP_QUERY)
    }
    /// Whether this is a CPU adapter (lavapipe, WARP, SwiftShader).
    pub fn is_cpu_adapter(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }
    /// Rows in one buffer segment; device arrays are split at this many rows so one
    /// segment of any column fits a storage binding.
    pub fn segment_rows(&self) -> usize {
        self.segment_rows
    }
    /// The buffer pool.
    pub fn pool(&self) -> &BufferPool {
        &self.pool
    }
    /// Fails if the device was lost or an uncaptured error was raised since the last check.
    pub fn check(&self) -> GpuResult<()> {
        if let Some(msg) = self.lost.lock().unwrap().clone() {
            return Err(GpuError::DeviceLost(msg));
        }
        if let Some(e) = self.uncaptured.lock().unwrap().take() {
            return Err(e);
        }
        Ok(())
    }

    /// Blocks until all submitted work is done.
    pub fn wait(&self) -> GpuResult<()> {
        self.wait_device()?;
        self.check()
    }

    /// Returns when the queue is empty: polls the device first for up to the
    /// context's spin time (20 ms on GPUs unless `RIDGELINE_WAIT` says otherwise),
    /// then blocks in the driver.
    pub(crate) fn wait_device(&self) -> GpuResult<()> {
        let lost = |e: wgpu::PollError| GpuError::DeviceLost(format!("poll failed: {e}"));
        if let Some(limit) = self.spin_wait {
            let t = std::time::Instant::now();
            while t.elapsed() < limit {
                if self.device.poll(wgpu::PollType::Poll).map_err(lost)?.is_queue_empty() {
                    return Ok(());
                }
                std::hint::spin_loop();
            }
        }
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(lost)?;
        Ok(())
    }

    /// Runs `f` inside out-of-memory and validation error scopes, turning errors into
    /// typed `GpuError`s.
    pub fn scoped<R>(&self, f: impl FnOnce() -> R) -> GpuResult<R> {
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let r = f();
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o {
            return Err(wgpu_error(e));
        }
        if let Some(e) = v {
            return Err(wgpu_error(e));
        }
        Ok(r)
    }

    /// Submits command buffers and checks for errors raised while encoding.
    pub fn submit(&self, encoder: wgpu::CommandEncoder) -> GpuResult<wgpu::SubmissionIndex> {
        let idx = self.submit_buffers(vec![encoder.finish()])?;
        self.check()?;
        Ok(idx)
    }

    /// A fresh command encoder.
    pub fn encoder(&self, label: &str) -> wgpu::CommandEncoder {
        self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) })
    }
}

/// Workgroup counts for `groups` workgroups within the per-dimension limit: the
/// kernel recovers the linear workgroup index as `wid.x + wid.y * nwg.x`.
pub fn dispatch_dims(groups: u64, max_per_dim: u32) -> (u32, u32, u32) {
    if groups == 0 {
        return (0, 1, 1);
    }
    let max = max_per_dim.max(1) as u64;
    if groups <= max {
        (groups as u32, 1, 1)
    } else {
        let y = groups.div_ceil(max);
        assert!(y <= max, "dispatch of {groups} workgroups exceeds two dimensions");
        (max as u32, y as u32, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn bytes_parse() {
        assert_eq!(parse_bytes("64K"), Some(65536));
        assert_eq!(parse_bytes("1.5G"), Some(3 << 29));
        assert_eq!(parse_bytes("100"), Some(100));
        assert_eq!(parse_bytes("x"), None);
    }
    #[test]
    fn wait_parse() {
        use std::time::Duration;
        assert_eq!(WaitMode::parse("block"), Some(WaitMode::Block));
        assert_eq!(WaitMode::parse(" spin "), Some(WaitMode::Spin(Duration::from_millis(20))));
        assert_eq!(WaitMode::parse("spin:5"), Some(WaitMode::Spin(Duration::from_millis(5))));
        assert_eq!(WaitMode::parse("spin:0.5"), Some(WaitMode::Spin(Duration::from_micros(500))));
        assert_eq!(WaitMode::parse("spin:-1"), None);
        assert_eq!(WaitMode::parse("spin:x"), None);
        assert_eq!(WaitMode::parse("busy"), None);
    }
    #[test]
    fn dims_split() {
        assert_eq!(dispatch_dims(0, 65535), (0, 1, 1));
        assert_eq!(dispatch_dims(10, 65535), (10, 1, 1));
        assert_eq!(dispatch_dims(65535, 65535), (65535, 1, 1));
        let (x, y, _) = dispatch_dims(65536, 65535);
        assert_eq!((x, y), (65535, 2));
        assert!(x as u64 * y as u64 >= 65536);
        let (x, y, _) = dispatch_dims(1_000_000, 1000);
        assert!(x <= 1000 && y <= 1000 && x as u64 * y as u64 >= 1_000_000);
    }
}
