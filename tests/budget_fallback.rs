//! A table that does not fit the device memory budget stays in host memory (with a
//! warning) and queries still answer; a GPU filter that cannot upload its input
//! within the budget runs on the CPU instead. Its own test binary, so lowering the shared
//! context's budget cannot disturb other tests.
use arrow::array::{ArrayRef, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::Int64Type;
use ridgeline_operators::testing::test_context;
use std::sync::Arc;

#[tokio::test]
async fn resident_table_over_budget_falls_back_to_host() {
    let Some(ctx) = test_context() else { return };
    ctx.pool().trim();
    ctx.pool().set_budget(1 << 20); // 1 MiB
    let rl = ridgeline::Ridgeline::builder().gpu_mode(ridgeline::GpuMode::On).build().unwrap();
    let rows = 1_000_000usize; // 8 MB of i64
    let a: ArrayRef = Arc::new(Int64Array::from_iter_values(0..rows as i64));
    let b = RecordBatch::try_from_iter([("x", a)]).unwrap();
    let on_gpu = rl.register_resident("big", b.schema(), vec![b.clone()]).await.unwrap();
    assert!(!on_gpu, "a table larger than the budget must stay on the host");
    let n = rl.sql("SELECT count(*), sum(x) FROM big").await.unwrap().collect().await.unwrap();
    assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), rows as i64);
    assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), (rows as i64 - 1) * rows as i64 / 2);
    // a small table still fits
    let small = b.slice(0, 1000);
    assert!(rl.register_resident("small", small.schema(), vec![small]).await.unwrap());

    // A GPU filter whose input cannot be uploaded within the budget re-runs on the
    // CPU (with a warning) and answers correctly.
    rl.register_batches("host", b.schema(), vec![b.clone()]).unwrap();
    let df = rl.sql("SELECT count(*), sum(x) FROM host WHERE x % 3 = 1").await.unwrap();
    let plan = df.clone().create_physical_plan().await.unwrap();
    assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuFilterExec"), "the filter is planned on the GPU");
    let n = df.collect().await.unwrap();
    let want: i64 = (0..rows as i64).filter(|x| x % 3 == 1).sum();
    assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), (rows as i64 + 1) / 3);
    assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), want);

    // A semi-join prefilter that cannot allocate on the device (its key set, its
    // selection) passes every probe row on (with a warning): the join drops them.
    ctx.pool().set_budget(4 << 30);
    let fk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..200_000).map(|i| (i * 7919) % 50_000)));
    let fact = RecordBatch::try_from_iter([("fk", fk)]).unwrap();
    let dk: ArrayRef = Arc::new(Int64Array::from_iter_values((0..100).map(|i| i * 3)));
    let dim = RecordBatch::try_from_iter([("dk", dk)]).unwrap();
    assert!(rl.register_resident("fact", fact.schema(), vec![fact.clone()]).await.unwrap());
    assert!(rl.register_resident("dim", dim.schema(), vec![dim]).await.unwrap());
    let q = "SELECT count(*), sum(fk) FROM fact JOIN dim ON fk = dk";
    let want: Vec<i64> = (0..200_000i64).map(|i| (i * 7919) % 50_000).filter(|k| k % 3 == 0 && *k < 300).collect();
    for budget in [4u64 << 30, ctx.pool().stats().live_bytes] {
        ctx.pool().trim();
        ctx.pool().set_budget(budget);
        let df = rl.sql(q).await.unwrap();
        let plan = df.clone().create_physical_plan().await.unwrap();
        assert!(ridgeline::exec::gpu_operator_names(&plan).iter().any(|n| n == "GpuSemiFilterExec"), "the prefilter is planned");
        let n = df.collect().await.unwrap();
        assert_eq!(n[0].column(0).as_primitive::<Int64Type>().value(0), want.len() as i64, "budget {budget}");
        assert_eq!(n[0].column(1).as_primitive::<Int64Type>().value(0), want.iter().sum::<i64>(), "budget {budget}");
    }
    ctx.pool().set_budget(4 << 30);
}
