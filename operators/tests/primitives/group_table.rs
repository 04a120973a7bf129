//! Group tables in device memory (dense tags with global atomics, compacted
//! readback) against the sequential reference: ids, row counts, non-NULL counts and
//! exact sums of every live group, for random, adversarial and edge inputs, in one
//! call and accumulated over several.
use crate::common;

use common::{bitmap, rng};
use rand::Rng;
use ridgeline_operators::compact::Column;
use ridgeline_operators::group_agg::{HostAggColumn, HostAggValues};
use ridgeline_operators::group_table::*;
use ridgeline_operators::testing::test_context;
use ridgeline_operators::{DeviceArray, GpuContext, GpuError};

struct Case {
    gids: Vec<u32>,
    g: u32,
    /// Values with carries in every word: near the i64 bounds, around 2^32, negative.
    wide: Vec<i64>,
    wide_valid: Vec<u32>,
    small: Vec<i64>,
}

impl Case {
    fn new(gids: Vec<u32>, g: u32, seed: u64, p_null: f64) -> Case {
        let n = gids.len();
        let mut r = rng(seed);
        Case {
            wide: (0..n)
                .map(|i| match i % 6 {
                    0 => i64::MAX - r.random_range(0..1000),
                    1 => i64::MIN + r.random_range(0..1000),
                    2 => (1i64 << 32) - r.random_range(0..3),
                    3 => -r.random_range(1..5),
                    _ => r.random_range(-1_000_000_000_000i64..1_000_000_000_000),
                })
                .collect(),
            wide_valid: bitmap(n, &mut r, p_null),
            small: (0..n).map(|_| r.random_range(0..100)).collect(),
            gids,
            g,
        }
    }
    fn host(&self) -> Vec<HostAggColumn<'_>> {
        vec![
            HostAggColumn { values: HostAggValues::I64(&self.wide), validity: Some(&self.wide_valid) },
            HostAggColumn { values: HostAggValues::I64(&self.small), validity: None },
        ]
    }
}

/// Feeds rows `parts` of the case in separate calls, each uploaded with `seg` rows
/// per segment.
fn run(ctx: &GpuContext, c: &Case, parts: &[std::ops::Range<usize>], seg: usize) -> LiveGroups {
    run_where(ctx, c, parts, seg, &[])
}

fn run_where(ctx: &GpuContext, c: &Case, parts: &[std::ops::Range<usize>], seg: usize, conds: &[TableCond]) -> LiveGroups {
    // MIN/MAX on the first column (where the adapter has 64-bit atomics), not the second.
    let mut t = GroupTable::new(ctx, c.g, &mm(ctx)).unwrap();
    for p in parts {
        let s = p.start;
        let e = p.end;
        let ga = DeviceArray::upload_segmented(ctx, &c.gids[s..e], seg).unwrap();
        let wa = DeviceArray::upload_segmented(ctx, &c.wide[s..e], seg).unwrap();
        let sa = DeviceArray::upload_segmented(ctx, &c.small[s..e], seg).unwrap();
        // the validity of rows s..e (s is a multiple of 32 in every test)
        assert_eq!(s % 32, 0);
        let bits: Vec<u32> = c.wide_valid[s / 32..e.div_ceil(32)].to_vec();
        let va = DeviceArray::upload_segmented(ctx, &bits, seg / 32).unwrap();
        t.add(ctx, &ga, &[Column::with_validity(&wa, &va), Column::new(&sa)], None).unwrap();
    }
    t.finish(ctx, conds).unwrap()
}

fn mm(ctx: &GpuContext) -> [bool; 2] {
    [supports_min_max(ctx), false]
}

fn check(ctx: &GpuContext, c: &Case, what: &str) {
    let want = group_table_reference(&c.gids, c.g, &c.host(), &mm(ctx), &[]);
    let n = c.gids.len();
    let mid = (n / 2) / 32 * 32;
    for (parts, seg) in [(vec![0..n], ctx.segment_rows()), (vec![0..mid, mid..n], 4096 + 128)] {
        let got = run(ctx, c, &parts, seg);
        assert_eq!(got.ids, want.ids, "{what}: ids n={n} g={} parts={}", c.g, parts.len());
        assert_eq!(got.rows, want.rows, "{what}: rows n={n} g={}", c.g);
        assert!(got.columns == want.columns, "{what}: columns n={n} g={} parts={}", c.g, parts.len());
    }
    // HAVING on the device: conditions on rows, counts and sums (a sum's median, so
    // about half the groups pass; constants at and beyond the 96-bit range).
    let mut sums: Vec<i128> = want.columns[0].sum.clone();
    sums.sort();
    let mid = sums.get(sums.len() / 2).copied().unwrap_or(0);
    let big = 1i128 << 100;
    let sets: Vec<Vec<TableCond>> = vec![
        vec![TableCond { word: TableWord::Sum(0), op: CmpOp::Gt, value: mid }],
        vec![TableCond { word: TableWord::Sum(0), op: CmpOp::Le, value: mid }, TableCond { word: TableWord::Rows, op: CmpOp::Ge, value: 2 }],
        vec![TableCond { word: TableWord::Count(0), op: CmpOp::Eq, value: 1 }, TableCond { word: TableWord::Sum(1), op: CmpOp::Ne, value: 0 }],
        vec![TableCond { word: TableWord::Sum(1), op: CmpOp::Lt, value: 150 }, TableCond { word: TableWord::Count(1), op: CmpOp::Gt, value: 1 }],
        vec![TableCond { word: TableWord::Sum(0), op: CmpOp::Lt, value: big }, TableCond { word: TableWord::Sum(0), op: CmpOp::Ge, value: -big }],
        vec![TableCond { word: TableWord::Sum(0), op: CmpOp::Ge, value: big }],
        vec![TableCond { word: TableWord::Sum(0), op: CmpOp::Eq, value: mid }],
    ];
    for conds in &sets {
        let want = group_table_reference(&c.gids, c.g, &c.host(), &mm(ctx), conds);
        let got = run_where(ctx, c, &[0..n], ctx.segment_rows(), conds);
        assert!(got == want, "{what}: HAVING {conds:?} n={n} g={}: {} groups, want {}", c.g, got.ids.len(), want.ids.len());
    }
}

#[test]
fn group_table_random_and_edges() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(1);
    // many small groups, some ids rejected (>= G)
    let g = 50_000;
    let gids: Vec<u32> = (0..70_001).map(|_| if r.random_bool(0.1) { g + r.random_range(0..3) } else { r.random_range(0..g) }).collect();
    check(&ctx, &Case::new(gids, g, 2, 0.2), "random");
    // sorted keys, runs of 1..7 rows per group (TPC-H lineitem by order key)
    let mut gids = Vec::new();
    let mut k = 0u32;
    while gids.len() < 40_000 {
        for _ in 0..r.random_range(1..8) {
            gids.push(k);
        }
        k += r.random_range(1..5);
    }
    check(&ctx, &Case::new(gids, k + 1, 3, 0.1), "sorted runs");
    // one group, all rows (atomics on one address; carries every row)
    check(&ctx, &Case::new(vec![0; 10_007], 1, 4, 0.0), "all equal");
    // all NULL values
    check(&ctx, &Case::new((0..5_000).map(|i| i % 37).collect(), 37, 5, 1.0), "all NULL");
    // one row; sizes around the workgroup
    for n in [1usize, 255, 256, 257, 1000] {
        check(&ctx, &Case::new((0..n as u32).map(|i| i % 3).collect(), 5, 6 + n as u64, 0.3), "small");
    }
    // every row rejected; no rows at all
    check(&ctx, &Case::new(vec![9; 777], 9, 7, 0.3), "all rejected");
    check(&ctx, &Case::new(vec![], 9, 8, 0.3), "empty");
    // distinct groups, every group one row
    check(&ctx, &Case::new((0..30_000).rev().collect(), 30_000, 9, 0.5), "distinct");
}

#[test]
fn group_table_errors() {
    let Some(ctx) = test_context() else { return };
    // CI's lavapipe and the H100 both have 64-bit atomics: MIN/MAX are tested there.
    if std::env::var("RIDGELINE_GPU").is_ok_and(|v| v == "on") {
        assert!(supports_min_max(&ctx), "no 64-bit atomic min/max on {:?}", ctx.info().name);
    }
    let too_many = max_groups(&ctx) as u64 + 1;
    if too_many <= u32::MAX as u64 {
        assert!(matches!(GroupTable::new(&ctx, too_many as u32, &[false]), Err(GpuError::Invalid(_))));
    }
    let mut t = GroupTable::new(&ctx, 10, &[false]).unwrap();
    let g = DeviceArray::upload(&ctx, &[1u32, 2, 3]).unwrap();
    let v = DeviceArray::upload(&ctx, &[1i64, 2, 3]).unwrap();
    let bits = DeviceArray::upload_segmented(&ctx, &[3u32], ctx.segment_rows() / 32).unwrap();
    // wrong column count, wrong shapes
    assert!(matches!(t.add(&ctx, &g, &[], None), Err(GpuError::Invalid(_))));
    assert!(matches!(t.add(&ctx, &g, &[Column::new(&g)], None), Err(GpuError::Invalid(_))));
    // a column without NULLs first, then with a bitmap (rows 0 and 1 valid), then without
    t.add(&ctx, &g, &[Column::new(&v)], None).unwrap();
    t.add(&ctx, &g, &[Column::with_validity(&v, &bits)], None).unwrap();
    t.add(&ctx, &g, &[Column::new(&v)], None).unwrap();
    let got = t.finish(&ctx, &[]).unwrap();
    assert_eq!(got.ids, vec![1, 2, 3]);
    assert_eq!(got.rows, vec![3, 3, 3]);
    assert_eq!(got.columns[0].count, vec![3, 3, 2]);
    assert_eq!(got.columns[0].sum, vec![3, 6, 6]);
    let bits2 = DeviceArray::upload_segmented(&ctx, &[5u32], ctx.segment_rows() / 32).unwrap();
    let mut t = GroupTable::new(&ctx, 10, &[false]).unwrap();
    t.add(&ctx, &g, &[Column::new(&v)], None).unwrap();
    t.add(&ctx, &g, &[Column::with_validity(&v, &bits2)], None).unwrap();
    let got = t.finish(&ctx, &[]).unwrap();
    assert_eq!(got.rows, vec![2, 2, 2]);
    assert_eq!(got.columns[0].count, vec![2, 1, 2]);
    assert_eq!(got.columns[0].sum, vec![2, 2, 6]);
}

#[test]
fn group_table_above_the_binding_limit() {
    let Some(ctx) = test_context() else { return };
    // more rows than one binding of 8-byte values holds: the input comes in two segments
    let Some(n) = common::rows_past_one_segment(&ctx) else { return };
    let seg = ctx.segment_rows();
    let mut r = rng(10);
    let g = 1_000_000;
    let gids: Vec<u32> = (0..n).map(|i| if r.random_bool(0.3) { 3 } else { (i as u32 / 4) % g }).collect();
    let c = Case::new(gids, g, 11, 0.2);
    let want = group_table_reference(&c.gids, g, &c.host(), &mm(&ctx), &[]);
    let got = run(&ctx, &c, &[0..n], seg);
    assert!(got == want, "above the binding limit: {} groups, want {}", got.ids.len(), want.ids.len());
}
