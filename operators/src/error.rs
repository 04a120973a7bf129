//! Typed GPU errors. Every failure of the device (no adapter, lost device, out of
//! memory, a shader that does not compile, a failed mapping) becomes one of these,
//! never a panic, so the planner can fall back to the CPU path.

/// Errors of the GPU runtime and its kernels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// The GPU is disabled by the mode (`RIDGELINE_GPU=off`).
    #[error("the GPU is disabled (mode off)")]
    Disabled,
    /// No adapter was found (or none matched `RIDGELINE_ADAPTER`).
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The device was lost (driver reset, removal, destroyed).
    #[error("GPU device lost: {0}")]
    DeviceLost(String),
    /// The driver could not allocate device memory.
    #[error("GPU out of memory: {0}")]
    OutOfMemory(String),
    /// An allocation would exceed Ridgeline's device memory budget.
    #[error("GPU memory budget exceeded: {requested} bytes requested, {in_use} of {budget} bytes in use")]
    BudgetExceeded {
        /// Bytes asked for.
        requested: u64,
        /// Bytes held by live buffers when asked.
        in_use: u64,
        /// The budget.
        budget: u64,
    },
    /// A shader failed to compile or a pipeline failed to build.
    #[error("GPU shader error in {shader}: {message}")]
    Shader {
        /// Shader (kernel family) name.
        shader: String,
        /// Compiler or validation message.
        message: String,
    },
    /// A wgpu validation error (a bug in Ridgeline, reported instead of panicking).
    #[error("GPU validation error: {0}")]
    Validation(String),
    /// Mapping a staging buffer failed.
    #[error("GPU buffer mapping failed: {0}")]
    Map(String),
    /// The request cannot be served as asked (bad sizes, mismatched arrays).
    #[error("invalid GPU request: {0}")]
    Invalid(String),
}

impl GpuError {
    /// Whether a caller should retry the same work on the CPU. Everything but a
    /// caller's own mistake qualifies.
    pub fn should_fall_back(&self) -> bool {
        !matches!(self, GpuError::Invalid(_))
    }
}

/// Result alias for GPU operations.
pub type GpuResult<T> = Result<T, GpuError>;

pub(crate) fn wgpu_error(e: wgpu::Error) -> GpuError {
    match e {
        wgpu::Error::OutOfMemory { .. } => GpuError::OutOfMemory(e.to_string()),
        wgpu::Error::Validation { description, .. } => GpuError::Validation(description),
        wgpu::Error::Internal { description, .. } => GpuError::Validation(description),
    }
}
