//! SKYLINE OF end to end: SQL and the DataFrame API in CPU and GPU mode against an
//! independent reference (sort-filter-skyline over the raw values), on generated
//! independent / correlated / anticorrelated data for d = 2..16 and on the NBA
//! data set; EXPLAIN; error positions.
use crate::common;
use arrow::array::{Array, ArrayRef, Float64Array, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::prelude::col;
use ridgeline::gen::skyline::{skyline_batch, SkylineDist};
use ridgeline::{GpuMode, Ridgeline, SkylineDataFrameExt, SkylineDim};
use std::sync::Arc;

/// Reference skyline (smaller is better in every column of `pts`): sort by the
/// sum, then each point is checked against the skyline so far and against the
/// points with an equal sum (a dominating point never has a larger sum).
fn reference(pts: &[Vec<f64>]) -> Vec<usize> {
    let dominates = |p: &[f64], q: &[f64]| p.iter().zip(q).all(|(a, b)| a <= b) && p.iter().zip(q).any(|(a, b)| a < b);
    let sums: Vec<f64> = pts.iter().map(|p| p.iter().sum()).collect();
    let mut order: Vec<usize> = (0..pts.len()).collect();
    order.sort_by(|&a, &b| sums[a].total_cmp(&sums[b]));
    let mut sky: Vec<usize> = Vec::new();
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j < order.len() && sums[order[j]] == sums[order[i]] {
            j += 1;
        }
        let group = &order[i..j];
        let keep: Vec<usize> = group
            .iter()
            .copied()
            .filter(|&q| {
                !sky.iter().any(|&p| dominates(&pts[p], &pts[q])) && !group.iter().any(|&p| p != q && dominates(&pts[p], &pts[q]))
            })
            .collect();
        sky.extend(keep);
        i = j;
    }
    sky.sort_unstable();
    sky
}

fn with_id(batch: &RecordBatch) -> RecordBatch {
    let n = batch.num_rows();
    let mut fields = vec![Field::new("id", DataType::Int64, false)];
    let mut cols: Vec<ArrayRef> = vec![Arc::new(Int64Array::from_iter_values(0..n as i64))];
    for (f, c) in batch.schema().fields().iter().zip(batch.columns()) {
        fields.push(f.as_ref().clone());
        cols.push(c.clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
}

fn points(batch: &RecordBatch, dims: usize, max: &[bool]) -> Vec<Vec<f64>> {
    let cols: Vec<&Float64Array> =
        (0..dims).map(|j| batch.column_by_name(&format!("d{j}")).unwrap().as_any().downcast_ref().unwrap()).collect();
    (0..batch.num_rows()).map(|i| (0..dims).map(|j| if max[j] { -cols[j].value(i) } else { cols[j].value(i) }).collect()).collect()
}

async fn engine(mode: GpuMode, batch: &RecordBatch) -> Ridgeline {
    let rl = Ridgeline::builder().gpu_mode(mode).build().unwrap();
    // Several partitions, so CPU mode runs partial and final skylines.
    let parts: Vec<RecordBatch> = (0..batch.num_rows()).step_by(700).map(|o| batch.slice(o, 700.min(batch.num_rows() - o))).collect();
    rl.register_batches("pts", batch.schema(), parts).unwrap();
    rl
}

async fn ids(rl: &Ridgeline, sql: &str) -> Vec<usize> {
    let b = rl.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).collect().await.unwrap();
    let mut v: Vec<usize> = b
        .iter()
        .flat_map(|b| {
            let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            (0..a.len()).map(|i| a.value(i) as usize).collect::<Vec<_>>()
        })
        .collect();
    v.sort_unstable();
    v
}

fn modes() -> Vec<GpuMode> {
    vec![GpuMode::Off, common::gpu_mode()]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn generated_data_all_dims_and_directions() {
    for dist in [SkylineDist::Independent, SkylineDist::Correlated, SkylineDist::Anticorrelated] {
        for dims in [2usize, 3, 5, 8, 12, 16] {
            let n = if dist == SkylineDist::Anticorrelated && dims > 8 { 700 } else { 1500 };
            let batch = with_id(&skyline_batch(dist, dims, n, 7 + dims as u64).unwrap());
            // Alternate MIN and MAX so both directions are exercised.
            let max: Vec<bool> = (0..dims).map(|j| j % 3 == 1).collect();
            let want = reference(&points(&batch, dims, &max));
            let clause: Vec<String> =
                (0..dims).map(|j| format!("d{j} {}", if max[j] { "MAX" } else { "MIN" })).collect();
            let sql = format!("SELECT id FROM pts SKYLINE OF {}", clause.join(", "));
            for mode in modes() {
                let rl = engine(mode, &batch).await;
                let got = ids(&rl, &sql).await;
                assert_eq!(got, want, "{dist} d={dims} mode {mode}: {} vs {} rows", got.len(), want.len());
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ties_duplicates_and_diff_groups() {
    // Few distinct values per dimension: many ties and exact duplicates.
    let n = 3000;
    let d0: Vec<f64> = (0..n).map(|i| ((i * 7919) % 11) as f64).collect();
    let d1: Vec<f64> = (0..n).map(|i| ((i * 104729) % 13) as f64).collect();
    let d2: Vec<f64> = (0..n).map(|i| ((i * 31) % 5) as f64).collect();
    let g: Vec<f64> = (0..n).map(|i| (i % 4) as f64).collect();
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("d0", DataType::Float64, false),
        Field::new("d1", DataType::Float64, false),
        Field::new("d2", DataType::Float64, false),
        Field::new("g", DataType::Float64, false),
    ]);
    let batch = RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(0..n as i64)),
            Arc::new(Float64Array::from(d0.clone())),
            Arc::new(Float64Array::from(d1.clone())),
            Arc::new(Float64Array::from(d2.clone())),
            Arc::new(Float64Array::from(g.clone())),
        ],
    )
    .unwrap();
    let pts: Vec<Vec<f64>> = (0..n).map(|i| vec![d0[i], d1[i], d2[i]]).collect();
    let want = reference(&pts);
    // Per group: the reference within each value of g.
    let mut want_diff = Vec::new();
    for gv in 0..4 {
        let members: Vec<usize> = (0..n).filter(|&i| g[i] == gv as f64).collect();
        let sub: Vec<Vec<f64>> = members.iter().map(|&i| pts[i].clone()).collect();
        want_diff.extend(reference(&sub).into_iter().map(|k| members[k]));
    }
    want_diff.sort_unstable();
    // DISTINCT: the first row of each set equal on every dimension.
    let mut seen = std::collections::HashSet::new();
    let want_distinct: Vec<usize> =
        want.iter().copied().filter(|&i| seen.insert((d0[i] as i64, d1[i] as i64, d2[i] as i64))).collect();
    assert!(want.len() > want_distinct.len(), "the data must have duplicate skyline rows");
    for mode in modes() {
        let rl = engine(mode, &batch).await;
        assert_eq!(ids(&rl, "SELECT id FROM pts SKYLINE OF d0 MIN, d1 MIN, d2 MIN").await, want, "mode {mode}");
        assert_eq!(ids(&rl, "SELECT id FROM pts SKYLINE OF d0 MIN, g DIFF, d1 MIN, d2 MIN").await, want_diff, "mode {mode}");
        let got = ids(&rl, "SELECT id FROM pts SKYLINE OF DISTINCT d0 MIN, d1 MIN, d2 MIN").await;
        // Which row of a duplicate set survives may depend on partitioning; the sets must match.
        assert_eq!(got.len(), want_distinct.len(), "mode {mode}");
        let key = |i: usize| (d0[i] as i64, d1[i] as i64, d2[i] as i64);
        let mut a: Vec<_> = got.iter().map(|&i| key(i)).collect();
        let mut b: Vec<_> = want_distinct.iter().map(|&i| key(i)).collect();
        a.sort_unstable();
        b.sort_unstable();
        assert_eq!(a, b, "mode {mode}");
    }
}

fn nba() -> RecordBatch {
    // The project's shared data: RIDGELINE_SHARED_DIR, else ../shared next to the
    // checkout, else /work/shared (where a clone elsewhere finds it).
    let file = "data/nba-8d-17264.csv";
    let candidates: Vec<std::path::PathBuf> = std::env::var_os("RIDGELINE_SHARED_DIR")
        .map(|d| std::path::PathBuf::from(d).join(file))
        .into_iter()
        .chain([std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared").join(file), std::path::Path::new("/work/shared").join(file)])
        .collect();
    let path = candidates.iter().find(|p| p.exists()).unwrap_or(&candidates[0]).clone();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut cols: Vec<Vec<f64>> = vec![Vec::new(); 8];
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let vals: Vec<f64> = line.split(',').filter(|s| !s.trim().is_empty()).map(|s| s.trim().parse().unwrap()).collect();
        assert_eq!(vals.len(), 8, "{line}");
        for (c, v) in cols.iter_mut().zip(vals) {
            c.push(v);
        }
    }
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    for (j, c) in cols.into_iter().enumerate() {
        fields.push(Field::new(format!("d{j}"), DataType::Float64, false));
        arrays.push(Arc::new(Float64Array::from(c)));
    }
    with_id(&RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nba_data_set() {
    let batch = nba();
    assert_eq!(batch.num_rows(), 17264);
    let want = reference(&points(&batch, 8, &[false; 8]));
    assert!(!want.is_empty() && want.len() < batch.num_rows());
    let sql = "SELECT id FROM pts SKYLINE OF d0 MIN, d1 MIN, d2 MIN, d3 MIN, d4 MIN, d5 MIN, d6 MIN, d7 MIN";
    for mode in modes() {
        let rl = engine(mode, &batch).await;
        assert_eq!(ids(&rl, sql).await, want, "mode {mode}");
        // The DataFrame API gives the same rows.
        let df = rl.session().table("pts").await.unwrap();
        let dims = (0..8).map(|j| SkylineDim::min(col(format!("d{j}")))).collect();
        let out = df.skyline(dims, false).unwrap().select(vec![col("id")]).unwrap().collect().await.unwrap();
        let mut got: Vec<usize> = out
            .iter()
            .flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().iter().map(|&v| v as usize).collect::<Vec<_>>())
            .collect();
        got.sort_unstable();
        assert_eq!(got, want, "DataFrame API, mode {mode}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_names_the_algorithm_and_dims() {
    // 20,000 rows: at least two chunks of a registered table (8192 rows at least
    // each), so the scan has partitions and the skyline a partial stage.
    let batch = with_id(&skyline_batch(SkylineDist::Independent, 3, 20_000, 1).unwrap());
    let rl = engine(GpuMode::Off, &batch).await;
    let text = ridgeline::cli::output::explain(&rl, "SELECT id FROM pts SKYLINE OF d0 MIN, d1 MAX, d2 DIFF").await.unwrap();
    assert!(text.contains("SkylineExec: stage=final, algorithm=cpu-hybrid, dims=[d0 MIN, d1 MAX, d2 DIFF]"), "{text}");
    assert!(text.contains("stage=partial"), "{text}");
    let text = ridgeline::cli::output::explain(&rl, "SELECT id FROM pts SKYLINE OF d0 MIN").await.unwrap();
    assert!(text.contains("algorithm=min-filter"), "{text}");
    let df = rl.sql("EXPLAIN SELECT id FROM pts SKYLINE OF DISTINCT d0 MIN, d1 MAX").await.unwrap();
    let s = arrow::util::pretty::pretty_format_batches(&df.collect().await.unwrap()).unwrap().to_string();
    assert!(s.contains("Skyline: DISTINCT dims=[pts.d0 MIN, pts.d1 MAX]"), "{s}");
    let gm = common::gpu_mode();
    if gm == GpuMode::On {
        let rl = engine(gm, &batch).await;
        let text = ridgeline::cli::output::explain(&rl, "SELECT id FROM pts SKYLINE OF d0 MIN, d1 MAX").await.unwrap();
        assert!(text.contains("[gpu]") && text.contains("algorithm=gpu-skyalign"), "{text}");
        assert!(text.contains("GPU operators: SkylineExec"), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_point_into_the_original_text() {
    let batch = with_id(&skyline_batch(SkylineDist::Independent, 2, 10, 1).unwrap());
    let rl = engine(GpuMode::Off, &batch).await;
    // A parser error after the clause: the position is in the user's text.
    let e = rl.sql("SELECT *\nFROM pts\nSKYLINE OF d0 MIN, d1 MIN\nLIMIT 5 garbage").await.unwrap_err().to_string();
    assert!(e.contains("garbage") && e.contains("Line: 4, Column: 9"), "{e}");
    let e = rl.sql("SELECT * FROM pts SKYLINE OF d0 MIN, d1 LOW").await.unwrap_err().to_string();
    assert!(e.contains("needs a direction") && e.contains("Line: 1, Column: 44"), "{e}");
    let e = rl.sql("SELECT * FROM pts\n  SKYLINE OF d0 MIN HAVING d0 > 1").await.unwrap_err().to_string();
    assert!(e.contains("must follow WHERE") && e.contains("Line: 2, Column: 3"), "{e}");
    // Statements without the clause are untouched; a column named skyline still works.
    let b = rl.sql("SELECT 1 AS skyline").await.unwrap().collect().await.unwrap();
    assert_eq!(b[0].num_rows(), 1);
    // The rows keep their input order without ORDER BY (one partition here).
    let rl1 = Ridgeline::builder().gpu_mode(GpuMode::Off).build().unwrap();
    rl1.register_batches("pts", batch.schema(), vec![batch.clone()]).unwrap();
    let b = rl1.sql("SELECT id FROM pts SKYLINE OF d0 MIN, d1 MIN").await.unwrap().collect().await.unwrap();
    let got: Vec<i64> = b.iter().flat_map(|b| b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()).collect();
    let mut sorted = got.clone();
    sorted.sort_unstable();
    assert_eq!(got, sorted);
}
