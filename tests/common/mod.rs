//! Shared test fixtures: engines in CPU and GPU mode with the same tables.
#![allow(dead_code)]
use arrow::array::*;

use ridgeline::{GpuMode, Ridgeline};
use std::sync::{Arc, OnceLock};

/// The GPU mode tests use for "GPU mode": RIDGELINE_GPU (CI sets on), else auto.
pub fn gpu_mode() -> GpuMode {
    match GpuMode::from_env().unwrap_or(GpuMode::Auto) {
        GpuMode::Off => GpuMode::Auto,
        m => m,
    }
}

/// TPC-H at SF 0.01, generated once per test process.
pub fn tpch() -> &'static Vec<(String, Vec<RecordBatch>)> {
    static T: OnceLock<Vec<(String, Vec<RecordBatch>)>> = OnceLock::new();
    T.get_or_init(|| ridgeline::gen::tpch::generate_all(0.01).unwrap())
}

/// A table with a column of every type the GPU stores, NULLs included.
pub fn types_batch() -> RecordBatch {
    let n = 7;
    let nulls = |i: usize| i == 3 || i == 6;
    macro_rules! prim {
        ($arr:ty, $f:expr) => {
            Arc::new((0..n).map(|i| if nulls(i) { None } else { Some($f(i)) }).collect::<$arr>()) as ArrayRef
        };
    }
    let cols: Vec<(&str, ArrayRef)> = vec![
        ("id", Arc::new(Int32Array::from_iter_values(0..n as i32))),
        ("i8", prim!(Int8Array, |i: usize| [-128i8, -1, 0, 1, 127, 5, 9][i])),
        ("i16", prim!(Int16Array, |i: usize| [-32768i16, -2, 0, 2, 32767, 300, 7][i])),
        ("i32", prim!(Int32Array, |i: usize| [i32::MIN, -3, 0, 3, i32::MAX, 70000, 11][i])),
        ("i64", prim!(Int64Array, |i: usize| [i64::MIN, -4, 0, 4, i64::MAX, 1 << 40, 13][i])),
        ("u8", prim!(UInt8Array, |i: usize| [0u8, 1, 2, 3, 255, 128, 8][i])),
        ("u16", prim!(UInt16Array, |i: usize| [0u16, 1, 2, 3, 65535, 40000, 16][i])),
        ("u32", prim!(UInt32Array, |i: usize| [0u32, 1, 2, 3, u32::MAX, 1 << 31, 32][i])),
        ("u64", prim!(UInt64Array, |i: usize| [0u64, 1, 2, 3, u64::MAX, 1 << 63, 64][i])),
        ("f32", prim!(Float32Array, |i: usize| [-1.5f32, -0.0, 0.0, 2.25, f32::MAX, 1e-30, 3.5][i])),
        ("f64", prim!(Float64Array, |i: usize| [-1.5f64, -0.0, 0.0, 2.25, f64::MAX, 1e-300, 3.5][i])),
        ("d32", prim!(Date32Array, |i: usize| [-719162, 0, 1, 10957, 20000, 9000, 19000][i])),
        ("d64", prim!(Date64Array, |i: usize| [0i64, 86_400_000, -86_400_000, 946_684_800_000, 1_700_000_000_000, 5, 6][i])),
        ("ts", prim!(TimestampMicrosecondArray, |i: usize| [0i64, 1, -1, 1_700_000_000_000_000, 42, 7, 8][i])),
        (
            "dec",
            Arc::new(
                (0..n)
                    .map(|i| if nulls(i) { None } else { Some([-999_999_999_999_999_999i128, -1, 0, 1, 999_999_999_999_999_999, 12345, 100][i]) })
                    .collect::<Decimal128Array>()
                    .with_precision_and_scale(18, 2)
                    .unwrap(),
            ),
        ),
        ("b", prim!(BooleanArray, |i: usize| i % 2 == 0)),
        ("s", prim!(StringArray, |i: usize| ["a", "", "ccc", "d", "ee", "f", "g"][i])),
    ];
    RecordBatch::try_from_iter(cols).unwrap()
}

/// An engine in `mode` with the TPC-H SF 0.01 tables and `types` registered
/// (resident on the GPU in a GPU mode, in host memory in mode off).
pub async fn engine(mode: GpuMode) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    for (name, batches) in tpch() {
        let schema = batches[0].schema();
        rl.register_resident(name, schema, batches.clone()).await.unwrap();
    }
    let t = types_batch();
    rl.register_resident("types", t.schema(), vec![t]).await.unwrap();
    rl
}

/// A Python that imports duckdb, without installing anything: RIDGELINE_PYTHON,
/// the project's virtual environment (RIDGELINE_DUCKDB_VENV, default
/// .venv-duckdb) or python3.
pub fn duckdb_python() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("RIDGELINE_PYTHON") {
        candidates.push(p.into());
    }
    let venv = std::env::var_os("RIDGELINE_DUCKDB_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-duckdb"));
    candidates.push(venv.join("bin").join("python"));
    candidates.push("python3".into());
    candidates
        .into_iter()
        .find(|p| std::process::Command::new(p).args(["-c", "import duckdb"]).output().is_ok_and(|o| o.status.success()))
}
