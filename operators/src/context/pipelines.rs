//! Compiled pipelines (cached per process) and kernel-parameter uniforms (cached by
//! content).
use super::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::tuning::device::UNIFORM_CACHE_ENTRIES;
use std::sync::Arc;

impl GpuContext {
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
    /// sizes) find theirs. The cache is cleared when it holds
    /// [`UNIFORM_CACHE_ENTRIES`] buffers.
    pub fn uniform<T: bytemuck::Pod>(&self, data: &T) -> wgpu::Buffer {
        let bytes = bytemuck::bytes_of(data);
        let mut cache = self.uniforms.lock().unwrap();
        if let Some(b) = cache.get(bytes) {
            return b.clone();
        }
        if cache.len() >= UNIFORM_CACHE_ENTRIES {
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
}
