//! Ridgeline: an embedded analytic SQL engine on Apache DataFusion whose heavy
//! operators run on the GPU through wgpu.
pub mod gen;
