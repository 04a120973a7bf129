//! GPU hash repartitioning (`GpuRepartitionExec`): the device partitions agree row
//! for row with the same hash computed on the CPU (the fallback path), and
//! partitioned hash joins whose inputs move to the GPU answer as in CPU mode,
//! including joins above joins on the same keys (which must keep DataFusion's
//! alignment).
use crate::common;

use arrow::array::*;
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::{collect_partitioned, ExecutionPlan, Partitioning};
use ridgeline::exec::{GpuRepartitionExec, GpuScanExec};
use ridgeline::resident::ResidentData;
use ridgeline::{GpuMode, Ridgeline};
use std::sync::Arc;

fn batch(n: usize) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("k2", DataType::Int32, false),
        Field::new("d", DataType::Date32, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
    ]));
    let mut x = 12345u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut cols: (Vec<Option<i64>>, Vec<i32>, Vec<i32>, Vec<Option<String>>, Vec<Option<f64>>, Vec<Option<bool>>) = Default::default();
    for i in 0..n {
        let r = next();
        cols.0.push((r % 11 != 0).then_some((r % 5000) as i64 - 2500));
        cols.1.push((r >> 20) as i32 % 7);
        cols.2.push(9000 + (i % 400) as i32);
        cols.3.push((r % 13 != 0).then(|| format!("s{}", r % 97)));
        cols.4.push((r % 17 != 0).then_some((r % 1000) as f64 / 8.0));
        cols.5.push((r % 19 != 0).then_some(r % 2 == 0));
    }
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(cols.0)),
            Arc::new(Int32Array::from(cols.1)),
            Arc::new(Date32Array::from(cols.2)),
            Arc::new(StringArray::from(cols.3)),
            Arc::new(Float64Array::from(cols.4)),
            Arc::new(BooleanArray::from(cols.5)),
        ],
    )
    .unwrap()
}

fn sorted_rows(batches: &[RecordBatch]) -> Vec<String> {
    let s = arrow::util::pretty::pretty_format_batches(batches).unwrap().to_string();
    let mut v: Vec<String> = s.lines().filter(|l| l.starts_with("| ")).map(str::to_string).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gpu_partitions_equal_the_cpu_hash() {
    if common::gpu_mode() != GpuMode::On {
        eprintln!("skipped: RIDGELINE_GPU is not on");
        return;
    }
    let ctx = ridgeline_operators::context::global().unwrap();
    let b = batch(70_001);
    let parts: Vec<RecordBatch> = (0..b.num_rows()).step_by(9000).map(|o| b.slice(o, 9000.min(b.num_rows() - o))).collect();
    let data = Arc::new(ResidentData::upload(&ctx, "t", b.schema(), &parts, 1 << 14, 3).unwrap());
    let gpu_in: Arc<dyn ExecutionPlan> = Arc::new(GpuScanExec::try_new(data, None, 3).unwrap());
    let cpu_in = datafusion::datasource::memory::MemorySourceConfig::try_new_exec(&[parts.clone()], b.schema(), None).unwrap();
    let rl = Ridgeline::builder().gpu_mode(GpuMode::On).build().unwrap();
    for (keys, n) in [(vec![0usize], 5usize), (vec![0, 1], 8), (vec![2], 3), (vec![1], 1)] {
        let exprs = keys.iter().map(|&k| Arc::new(Column::new(b.schema().field(k).name(), k)) as _).collect();
        let part = Partitioning::Hash(exprs, n);
        let g: Arc<dyn ExecutionPlan> = Arc::new(GpuRepartitionExec::new(gpu_in.clone(), keys.clone(), part.clone()));
        let c: Arc<dyn ExecutionPlan> = Arc::new(GpuRepartitionExec::new(cpu_in.clone(), keys.clone(), part));
        let gp = collect_partitioned(g, rl.session().task_ctx()).await.unwrap();
        let cp = collect_partitioned(c, rl.session().task_ctx()).await.unwrap();
        assert_eq!(gp.len(), n);
        let mut total = 0;
        for p in 0..n {
            let (gr, cr) = (sorted_rows(&gp[p]), sorted_rows(&cp[p]));
            assert_eq!(gr, cr, "keys {keys:?}, partition {p} of {n}");
            total += gp[p].iter().map(|b| b.num_rows()).sum::<usize>();
        }
        assert_eq!(total, b.num_rows());
        if n > 1 {
            // Not everything in one partition.
            assert!(gp.iter().filter(|p| !p.is_empty()).count() > 1);
        }
    }
}

async fn forced_partitioned(mode: GpuMode) -> Ridgeline {
    let rl = common::engine(mode).await;
    for set in [
        "SET datafusion.execution.target_partitions = 4",
        "SET datafusion.optimizer.hash_join_single_partition_threshold = 0",
        "SET datafusion.optimizer.hash_join_single_partition_threshold_rows = 0",
    ] {
        rl.sql(set).await.unwrap().collect().await.unwrap();
    }
    rl
}

async fn answer(rl: &Ridgeline, q: &str) -> Vec<String> {
    sorted_rows(&rl.sql(q).await.unwrap().collect().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitioned_joins_match_cpu_mode() {
    let cpu = forced_partitioned(GpuMode::Off).await;
    let gpu = forced_partitioned(common::gpu_mode()).await;
    let tpch = |q: usize| std::fs::read_to_string(format!("{}/sql/tpch/q{q}.sql", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let mut queries: Vec<(String, bool)> = vec![(tpch(4), true), (tpch(14), true), (tpch(21), false), (tpch(5), false)];
    queries.extend(
        [
            // semi and anti joins, composite keys, strings carried along
            ("SELECT o_orderkey, o_orderpriority FROM orders WHERE o_orderkey IN (SELECT l_orderkey FROM lineitem WHERE l_quantity > 45)", true),
            ("SELECT count(*) FROM orders WHERE o_orderkey NOT IN (SELECT l_orderkey FROM lineitem WHERE l_quantity > 10)", false),
            ("SELECT l.l_orderkey, l.l_linenumber, l.l_shipmode, ps.ps_availqty FROM lineitem l JOIN partsupp ps ON l.l_partkey = ps.ps_partkey AND l.l_suppkey = ps.ps_suppkey WHERE l.l_quantity > 48", true),
            // a join above a join on the same key: DataFusion's alignment must hold
            ("SELECT count(*), sum(l1.l_quantity) FROM lineitem l1 JOIN orders o ON l1.l_orderkey = o.o_orderkey JOIN lineitem l2 ON o.o_orderkey = l2.l_orderkey WHERE l2.l_linenumber = 1", false),
        ]
        .map(|(q, g)| (q.to_string(), g)),
    );
    for (q, expect_gpu) in &queries {
        assert_eq!(answer(&gpu, q).await, answer(&cpu, q).await, "{q}");
        if common::gpu_mode() == GpuMode::On && *expect_gpu {
            let p = sorted_rows(&gpu.sql(&format!("EXPLAIN {q}")).await.unwrap().collect().await.unwrap()).join("\n");
            assert!(p.contains("GpuRepartitionExec"), "{q}\n{p}");
        }
    }
}
