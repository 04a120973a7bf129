//! A description of the adapter, for `ridgeline gpu` and EXPLAIN.
use super::{GpuContext, WANTED_FEATURES};

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
    /// Device memory budget of the process.
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

impl GpuContext {
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
}
