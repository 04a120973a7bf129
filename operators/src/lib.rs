//! Ridgeline's GPU primitives on plain slices and wgpu buffers, each with a CPU
//! reference and a CPU fast path. No DataFusion dependency, so it builds and tests
//! in seconds.
//!
//! The runtime: one shared [`GpuContext`] per process ([`context::global`]), a
//! [`pool::BufferPool`] with a memory budget, staged transfers
//! ([`transfer`]) and segmented [`DeviceArray`]s that never exceed the binding limit.
pub mod array;
pub mod compact;
pub mod context;
pub mod cpu_scan;
pub mod error;
pub mod group_agg;
pub mod group_table;
pub mod join;
pub mod member;
pub mod mode;
pub mod partition;
pub mod pool;
pub mod rowwise;
pub mod scan;
pub mod select;
pub mod skyline;
pub mod testing;
pub mod timing;
pub mod transfer;
pub mod tuning;

pub use array::DeviceArray;
pub use context::{global, GpuContext};
pub use error::{GpuError, GpuResult};
pub use mode::GpuMode;
pub use wgpu;
