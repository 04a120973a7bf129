//! Logical plan extensions: the `Skyline` node and its DataFrame API.
pub mod skyline;

pub use skyline::{SkylineDataFrameExt, SkylineDim, SkylineNode};
