//! GPU kernels under criterion: the exclusive scan (u32), the stable compaction of a
//! u32 column by a bitmap selection at 50%, and the whole filter (compiled predicate
//! kernel + compaction of an i64 payload) against DataFusion's CPU filter, at 2^22
//! rows on whatever adapter the process finds (`RIDGELINE_ADAPTER` picks one).
//! Without an adapter it prints why and measures nothing.
//!
//! Run: `cargo bench --bench gpu_filter` (add `-- --quick` for a rougher run). The
//! H100 figures in BENCHMARKS.md come from `ridgeline bench scan|compact|filter`,
//! which sweep sizes; this bench tracks one size across changes.
use std::hint::black_box;
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int32Array, Int64Array, RecordBatch};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use datafusion::logical_expr::Operator;
use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::scalar::ScalarValue;
use ridgeline::gpu_batch::{ColumnData, GpuBatch};
use ridgeline::gpu_expr::{Caps, RowProgram};
use ridgeline_operators::compact::{compact, Column as CCol, CompactAlgo, CompactOptions, Selection};
use ridgeline_operators::scan::{scan, ScanKind, ScanOptions, ScanType};
use ridgeline_operators::DeviceArray;

const N: usize = 1 << 22;

fn gpu(c: &mut Criterion) {
    let ctx = match ridgeline_operators::context::global() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gpu_filter: no GPU adapter ({e}); nothing measured");
            return;
        }
    };
    let mut g = c.benchmark_group(format!("gpu {}", ctx.info().name));
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(20);

    let data: Vec<u32> = (0..N as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 8).collect();
    let input = DeviceArray::upload(&ctx, &data).unwrap();
    g.bench_function("exclusive scan u32 2^22", |b| {
        b.iter(|| {
            let out = scan(&ctx, &input, ScanType::U32, ScanKind::Exclusive, &ScanOptions::default()).unwrap();
            ctx.wait().unwrap();
            black_box(out);
        })
    });

    let words: Vec<u32> = (0..N.div_ceil(32)).map(|i| (i as u32).wrapping_mul(2_654_435_761)).collect();
    let bits = DeviceArray::upload_segmented(&ctx, &words, ctx.segment_rows() / 32).unwrap();
    g.bench_function("stable compaction by bitmap 2^22 ~50%", |b| {
        b.iter(|| {
            let sel = Selection::Bitmap { bits: &bits, rows: N };
            let out = compact(&ctx, sel, &[CCol::new(&input)], &CompactOptions::with_algo(CompactAlgo::Stable)).unwrap();
            ctx.wait().unwrap();
            black_box(out.count);
        })
    });

    let keys: Vec<i32> = (0..N as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 2) as i32 % 1_000_000).collect();
    let batch = RecordBatch::try_from_iter([
        ("k", Arc::new(Int32Array::from(keys)) as ArrayRef),
        ("v", Arc::new(Int64Array::from_iter_values(0..N as i64)) as ArrayRef),
    ])
    .unwrap();
    let pred: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
        Arc::new(Column::new("k", 0)),
        Operator::Lt,
        Arc::new(Literal::new(ScalarValue::Int32(Some(500_000)))),
    ));
    let dev = GpuBatch::upload(&ctx, &batch).unwrap();
    let program = RowProgram::try_new(batch.schema(), Some(pred.clone()), vec![], Caps::of(&ctx)).unwrap();
    let ColumnData::Device { values: payload, .. } = &dev.columns[1].data else { panic!("payload on the device") };
    g.bench_function("filter k < X, gather v, 2^22 50% (GPU, resident)", |b| {
        b.iter(|| {
            let eval = program.evaluate(&ctx, &dev).unwrap();
            let sel = Selection::Bitmap { bits: eval.selection.as_ref().unwrap(), rows: N };
            let out = compact(&ctx, sel, &[CCol::new(payload)], &CompactOptions::with_algo(CompactAlgo::Stable)).unwrap();
            ctx.wait().unwrap();
            black_box(out.count);
        })
    });
    g.bench_function("filter k < X, gather v, 2^22 50% (DataFusion, 1 thread)", |b| {
        b.iter(|| {
            let mask = pred.evaluate(&batch).unwrap().into_array(N).unwrap();
            let out = arrow::compute::filter(batch.column(1), mask.as_boolean()).unwrap();
            black_box(out.len());
        })
    });
    g.finish();
}

criterion_group!(benches, gpu);
criterion_main!(benches);
