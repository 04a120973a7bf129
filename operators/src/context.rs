//! The process-wide GPU device context: lazy, `Send + Sync`, created on first use
//! with the adapter's own limits and every optional feature Ridgeline can use.
use crate::error::{wgpu_error, GpuError, GpuResult};
use crate::pool::BufferPool;
use crate::transfer::StagingPool;
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

/// How long a wait polls the device before it blocks (see `GpuContext::new`).
const SPIN_WAIT: std::time::Duration = std::time::Duration::from_millis(20);

/// One binding may never exceed 2 GiB - 1 in wgpu, whatever the driver allows.
const WGPU_MAX_BINDING: u64 = (1u64 << 31) - 1;

/// Options for creating a context (the global one reads them from the environment).
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// Substring (case-insensitive) of the adapter name to pick (`RIDGELINE_ADAPTER`).
    pub adapter: Option<String>,
    /// Device memory budget in bytes (`RIDGELINE_GPU_MEMORY`, accepts suffixes K/M/G).
    pub memory_budget: Option<u64>,
    /// Cap on the bytes of one buffer segment (`RIDGELINE_MAX_SEGMENT_BYTES`); the
    /// adapter's binding limit applies in any case.
    pub max_segment_bytes: Option<u64>,
    /// How waits for the device behave (`RIDGELINE_WAIT`); `None`: the default.
    pub wait: Option<WaitMode>,
}

/// How a wait for the device behaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WaitMode {
    /// Block in the driver at once.
    Block,
    /// Poll the device in a loop for up to this long, then block.
    Spin(std::time::Duration),
}

impl WaitMode {
    /// Parses `block`, `spin` or `spin:MS` (milliseconds).
    pub fn parse(s: &str) -> Option<WaitMode> {
        match s.trim() {
            "block" => Some(WaitMode::Block),
            "spin" => Some(WaitMode::Spin(SPIN_WAIT)),
            v => {
                let ms: f64 = v.strip_prefix("spin:")?.trim().parse().ok()?;
                (ms.is_finite() && ms >= 0.0).then(|| WaitMode::Spin(std::time::Duration::from_secs_f64(ms / 1e3)))
            }
        }
    }
}

impl ContextOptions {
    /// Options from `RIDGELINE_ADAPTER`, `RIDGELINE_GPU_MEMORY`, `RIDGELINE_MAX_SEGMENT_BYTES`,
    /// `RIDGELINE_WAIT`.
    pub fn from_env() -> Self {
        let nonempty = |k: &str| crate::tuning::get(k).map(str::to_string);
        ContextOptions {
            adapter: nonempty("RIDGELINE_ADAPTER"),
            memory_budget: nonempty("RIDGELINE_GPU_MEMORY").and_then(|v| parse_bytes(&v)),
            max_segment_bytes: nonempty("RIDGELINE_MAX_SEGMENT_BYTES").and_then(|v| parse_bytes(&v)),
            wait: nonempty("RIDGELINE_WAIT").and_then(|v| {
                let m = WaitMode::parse(&v);
                if m.is_none() {
                    log::warn!("RIDGELINE_WAIT={v} not understood (block, spin or spin:MS): the default applies");
                }
                m
            }),
        }
    }
}

/// Parses `123`, `64K`, `512M`, `8G` (binary units) into bytes.
pub fn parse_bytes(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()?.to_ascii_uppercase() {
        'K' => (&s[..s.len() - 1], 1u64 << 10),
        'M' => (&s[..s.len() - 1], 1 << 20),
        'G' => (&s[..s.len() - 1], 1 << 30),
        'T' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    let v: f64 = num.trim().parse().ok()?;
    (v >= 0.0).then(|| (v * mult as f64) as u64)
}

/// A description of the adapter, for `ridgeline gpu` and EXPLAIN.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    /// Adapter name.
    pub name: String,
    /// Backend (Vulkan, Metal, ...).
    pub backend: String,
    /// Device type (discrete, integrated, CPU, ...).
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Limits granted to the device.
    pub limits: wgpu::Limits,
    /// Features granted to the device.
    pub features: wgpu::Features,
    /// Rows in one buffer segment (the binding-limit split).
    pub segment_rows: usize,
    /// Device memory budget.
    pub memory_budget: u64,
    /// Smallest and largest subgroup size.
    pub subgroup_sizes: (u32, u32),
}

impl std::fmt::Display for AdapterReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.limits;
        writeln!(f, "adapter:            {}", self.name)?;
        writeln!(f, "backend:            {}", self.backend)?;
        writeln!(f, "device type:        {}", self.device_type)?;
        writeln!(f, "driver:             {}", self.driver)?;
        writeln!(f, "max buffer size:    {} MiB", l.max_buffer_size >> 20)?;
        writeln!(f, "max storage binding:{} MiB", (l.max_storage_buffer_binding_size as u64) >> 20)?;
        writeln!(f, "workgroup storage:  {} KiB", l.max_compute_workgroup_storage_size >> 10)?;
        writeln!(f, "invocations/group:  {}", l.max_compute_invocations_per_workgroup)?;
        writeln!(f, "workgroups/dim:     {}", l.max_compute_workgroups_per_dimension)?;
        writeln!(f, "subgroup size:      {}..{}", self.subgroup_sizes.0, self.subgroup_sizes.1)?;
        writeln!(f, "segment rows:       {}", self.segment_rows)?;
        writeln!(f, "memory budget:      {} MiB", self.memory_budget >> 20)?;
        let names: Vec<String> = self.features.iter_names().map(|(n, _)| n.to_string()).filter(|n| {
            WANTED_FEATURES.iter_names().any(|(w, _)| w == n)
        }).collect();
        write!(f, "features:           {}", names.join(", "))
    }
}

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
    lost: Arc<Mutex<Option<String>>>,
    uncaptured: Arc<Mutex<Option<GpuError>>>,
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

impl GpuContext {
    /// Creates a context (the global one is usually what you want).
    pub fn new(opts: &ContextOptions) -> GpuResult<GpuContext> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = backend_bits();
        let instance = wgpu::Instance::new(desc);
        let mut adapters = pollster::block_on(instance.enumerate_adapters(backend_bits()));
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
        let adapter = adapters.remove(0);
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

        let max_binding = (limits.max_storage_buffer_binding_size as u64)
            .min(limits.max_buffer_size)
            .min(WGPU_MAX_BINDING);
        let seg_bytes = opts.max_segment_bytes.map_or(max_binding, |c| c.min(max_binding));
        // Rows per segment: every column type (at most 8 bytes a value) fits one
        // binding, and segments start on a multiple of 4096 rows so validity words
        // and vector loads stay aligned.
        let segment_rows = ((seg_bytes / 8) / 4096 * 4096).max(4096) as usize;
        let default_budget = match info.device_type {
            wgpu::DeviceType::Cpu => 4u64 << 30,
            _ => 16u64 << 30,
        };
        let budget = opts.memory_budget.unwrap_or(default_budget);
        let pool = BufferPool::new(device.clone(), budget, limits.max_buffer_size, (limits.max_storage_buffer_binding_size as u64).min(WGPU_MAX_BINDING) / 4 * 4);
        let staging = StagingPool::new(info.device_type == wgpu::DeviceType::Cpu);
        let trusted_shaders = !cfg!(debug_assertions)
            && crate::tuning::get("RIDGELINE_SHADER_CHECKS").is_none_or(|v| v == "0");
        // Waits poll the device in a loop for up to SPIN_WAIT before they block in
        // the driver: a blocking wait woke 0.1-0.8 ms after the work was done on the
        // H100 (BENCHMARKS.md, session 12). Not on CPU adapters, whose work runs on
        // the cores a spinning thread would take. RIDGELINE_WAIT=block never spins;
        // RIDGELINE_WAIT=spin[:MS] spins (for up to MS milliseconds) on any adapter.
        let spin_wait = match opts.wait {
            Some(WaitMode::Block) => None,
            Some(WaitMode::Spin(d)) => Some(d),
            None if info.device_type == wgpu::DeviceType::Cpu => None,
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
    /// A report for `ridgeline gpu`.
    pub fn report(&self) -> AdapterReport {
        AdapterReport {
            name: self.info.name.clone(),
            backend: format!("{:?}", self.info.backend),
            device_type: format!("{:?}", self.info.device_type),
            driver: format!("{} {}", self.info.driver, self.info.driver_info).trim().to_string(),
            limits: self.limits.clone(),
            features: self.features,
            segment_rows: self.segment_rows,
            memory_budget: self.pool.budget(),
            subgroup_sizes: (self.info.subgroup_min_size, self.info.subgroup_max_size),
        }
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

    /// A compute pipeline for `entry` of the WGSL `source`, compiled once per process.
    /// `defs` replace `{{NAME}}` placeholders in the source (workgroup sizes and such).
    pub fn pipeline(
        &self,
        name: &str,
        source: &str,
        entry: &str,
        defs: &[(&str, String)],
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        self.pipeline_lazy(name, entry, defs, || Ok(source.to_string()))
    }

    /// [`GpuContext::pipeline`] with the source built only when the pipeline is not
    /// cached yet (kernels assembled from sections: building the text on every
    /// lookup cost tens of microseconds each).
    pub fn pipeline_lazy(
        &self,
        name: &str,
        entry: &str,
        defs: &[(&str, String)],
        source: impl FnOnce() -> GpuResult<String>,
    ) -> GpuResult<Arc<wgpu::ComputePipeline>> {
        let mut key = format!("{name}:{entry}");
        for (k, v) in defs {
            key.push_str(&format!(":{k}={v}"));
        }
        if let Some(p) = self.pipelines.lock().unwrap().get(&key) {
            return Ok(p.clone());
        }
        let mut src = source()?;
        for (k, v) in defs {
            src = src.replace(&format!("{{{{{k}}}}}"), v);
        }
        let shader_err = |e: GpuError| GpuError::Shader { shader: format!("{name}::{entry}"), message: e.to_string() };
        let module = self
            .scoped(|| {
                let desc = wgpu::ShaderModuleDescriptor {
                    label: Some(name),
                    source: wgpu::ShaderSource::Wgsl(src.as_str().into()),
                };
                if self.trusted_shaders {
                    // SAFETY: Ridgeline's kernels guard every index against their lengths.
                    unsafe {
                        self.device
                            .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
                    }
                } else {
                    self.device.create_shader_module(desc)
                }
            })
            .map_err(shader_err)?;
        let pipeline = self
            .scoped(|| {
                self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                    label: Some(name),
                    layout: None,
                    module: &module,
                    entry_point: Some(entry),
                    compilation_options: Default::default(),
                    cache: None,
                })
            })
            .map_err(shader_err)?;
        let p = Arc::new(pipeline);
        self.pipelines.lock().unwrap().insert(key, p.clone());
        Ok(p)
    }

    /// A small uniform buffer holding `data` (kernel parameters). Creating one costs
    /// about 2 ms on the H100's Vulkan driver (measured: it dominated every small
    /// kernel launch), so buffers are cached by content and shared: they are never
    /// written after creation, and repeated launches (the same chunk, the same
    /// sizes) find theirs. The cache is cleared when it holds 8192 buffers.
    pub fn uniform<T: bytemuck::Pod>(&self, data: &T) -> wgpu::Buffer {
        let bytes = bytemuck::bytes_of(data);
        let mut cache = self.uniforms.lock().unwrap();
        if let Some(b) = cache.get(bytes) {
            return b.clone();
        }
        if cache.len() >= 8192 {
            cache.clear();
        }
        // Not `create_buffer_init`: its staging buffer costs milliseconds on some
        // drivers; the contents go with the next submission (`write_small`).
        let b = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("params"),
            size: (bytes.len() as u64).div_ceil(16).max(1) * 16,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().div_ceil(4) * 4, 0);
        if let Err(e) = self.write_small(&b, 0, &padded) {
            // Only a failed staging map gets here; record it for the next check.
            let mut slot = self.uncaptured.lock().unwrap();
            if slot.is_none() {
                *slot = Some(e);
            }
        }
        cache.insert(bytes.to_vec(), b.clone());
        b
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
