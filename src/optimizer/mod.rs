//! Physical optimizer rules that place operators on the GPU.
pub mod boundaries;
pub use boundaries::GpuBoundaries;
