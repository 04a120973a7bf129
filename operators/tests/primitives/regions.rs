//! Grouped selection over regions (`RegionSelect`: partition by tag, one
//! SampleSelect per region) against the sort-based reference, exactly: group
//! sizes and the keys at every rank, for i64 and f64 values, random and
//! adversarial data, several chunks, small segments (the binding-limit split),
//! regions on the GPU and on the CPU.
use crate::common;

use common::rng;
use rand::Rng;
use ridgeline_operators::select::regions::{raw_key, region_select_reference, RegionSelect};
use ridgeline_operators::select::{to_order_keys_gpu, RawKind};
use ridgeline_operators::testing::test_context;
use ridgeline_operators::{DeviceArray, GpuContext};

/// Minimum, lower and upper median, 1%, 99% and maximum.
fn ranks_of(n: usize) -> Vec<u64> {
    let n = n as u64;
    vec![0, (n - 1) / 2, n / 2, (n - 1) / 100, (n - 1) * 99 / 100, n - 1]
}

/// Runs the GPU path over `chunks` (tags, raw values) with segments of `seg`
/// rows and compares with the reference.
fn check(ctx: &GpuContext, chunks: &[(Vec<u32>, Vec<u64>)], groups: u32, kind: RawKind, seg: usize, gpu_min_rows: usize, what: &str) {
    let total: usize = chunks.iter().map(|c| c.0.len()).sum();
    let mut rs = RegionSelect::new_segmented(ctx, groups, kind, total, seg).unwrap();
    for (t, v) in chunks {
        let ta = DeviceArray::upload_segmented(ctx, t, seg).unwrap();
        let va = DeviceArray::upload_segmented(ctx, v, seg).unwrap();
        rs.add(ctx, &ta, &va).unwrap();
    }
    let (got, stats) = rs.finish(ctx, &ranks_of, gpu_min_rows).unwrap();
    let tags: Vec<u32> = chunks.iter().flat_map(|c| c.0.iter().copied()).collect();
    let vals: Vec<u64> = chunks.iter().flat_map(|c| c.1.iter().copied()).collect();
    let want = region_select_reference(&tags, &vals, groups, kind, &ranks_of);
    assert_eq!(got.len(), groups as usize, "{what}");
    for g in 0..groups as usize {
        assert_eq!(got[g], want[g], "{what}: group {g} of {groups} ({stats:?})");
    }
    assert_eq!(stats.rows, want.iter().map(|w| w.0 as u64).sum::<u64>(), "{what}");
    let nonempty = want.iter().filter(|w| w.0 > 0).count();
    assert_eq!(stats.gpu_regions + stats.cpu_regions, nonempty, "{what}");
}

/// `n` rows in chunks of at most `chunk` rows.
fn chunked(tags: Vec<u32>, vals: Vec<u64>, chunk: usize) -> Vec<(Vec<u32>, Vec<u64>)> {
    tags.chunks(chunk.max(1)).zip(vals.chunks(chunk.max(1))).map(|(t, v)| (t.to_vec(), v.to_vec())).collect()
}

#[test]
fn random_and_adversarial_i64() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(41);
    let n = 20_011; // not a multiple of any workgroup
    let uniform: Vec<i64> = (0..n).map(|_| r.random()).collect();
    let normalish: Vec<i64> = (0..n).map(|_| (0..4).map(|_| r.random_range(-1000i64..1000)).sum()).collect();
    let few: Vec<i64> = (0..n).map(|_| r.random_range(0i64..16) * 1_000_003 - 7).collect();
    let mut sorted = uniform.clone();
    sorted.sort_unstable();
    let reverse: Vec<i64> = sorted.iter().rev().copied().collect();
    let equal = vec![-5i64; n];
    let extremes: Vec<i64> = (0..n).map(|i| [i64::MIN, i64::MAX, 0, -1, 1][i % 5]).collect();
    for (name, vals) in [
        ("uniform", uniform),
        ("normal", normalish),
        ("16 distinct", few),
        ("sorted", sorted),
        ("reverse", reverse),
        ("all equal", equal),
        ("extremes", extremes),
    ] {
        let raw: Vec<u64> = vals.iter().map(|&v| v as u64).collect();
        for groups in [1u32, 3, 37] {
            // Tags: skewed (group 0 takes half), plus dropped rows (tag >= groups).
            let tags: Vec<u32> = (0..n)
                .map(|_| if r.random_bool(0.5) { 0 } else { r.random_range(0..groups + 2) })
                .collect();
            let what = format!("{name}, {groups} groups");
            // All regions on the GPU, small segments, several chunks.
            check(&ctx, &chunked(tags.clone(), raw.clone(), 7_000), groups, RawKind::I64, 1024, 2, &format!("{what}, gpu"));
            // Mixed: small regions on the CPU.
            check(&ctx, &chunked(tags.clone(), raw.clone(), n), groups, RawKind::I64, 4096, 1500, &format!("{what}, mixed"));
            // All on the CPU.
            check(&ctx, &chunked(tags, raw.clone(), 5_003), groups, RawKind::I64, 256, usize::MAX, &format!("{what}, cpu"));
        }
    }
}

#[test]
fn floats_nan_zero_and_infinities() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(7);
    let n = 9_999;
    let specials = [f64::NAN, -f64::NAN, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::MIN_POSITIVE, -1.5, 2.5];
    let vals: Vec<u64> = (0..n)
        .map(|_| if r.random_bool(0.3) { specials[r.random_range(0..specials.len())] } else { r.random_range(-1e6..1e6) })
        .map(f64::to_bits)
        .collect();
    let tags: Vec<u32> = (0..n).map(|_| r.random_range(0..5)).collect();
    check(&ctx, &chunked(tags.clone(), vals.clone(), 4_000), 4, RawKind::F64, 512, 2, "floats, gpu");
    check(&ctx, &chunked(tags, vals, 4_000), 4, RawKind::F64, 512, usize::MAX, "floats, cpu");
}

#[test]
fn edges_empty_one_row_all_dropped_empty_groups() {
    let Some(ctx) = test_context() else { return };
    // No chunk at all, and an empty chunk: every group empty.
    check(&ctx, &[], 3, RawKind::I64, 256, 2, "no chunks");
    check(&ctx, &[(vec![], vec![])], 3, RawKind::I64, 256, 2, "empty chunk");
    // One row.
    check(&ctx, &[(vec![1], vec![42])], 3, RawKind::I64, 256, 2, "one row");
    check(&ctx, &[(vec![0], vec![(-3.0f64).to_bits()])], 1, RawKind::F64, 256, 2, "one float row");
    // Every row dropped.
    check(&ctx, &[(vec![3; 1000], (0..1000).collect())], 3, RawKind::I64, 256, 2, "all dropped");
    // Groups without rows between full ones; one-row groups.
    let tags: Vec<u32> = (0..3000u32).map(|i| if i % 1000 == 999 { 7 } else { (i % 2) * 4 }).collect();
    let vals: Vec<u64> = (0..3000u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    check(&ctx, &chunked(tags, vals, 1100), 8, RawKind::I64, 256, 2, "empty groups, one-row group");
    // Many groups: more than one partition digit pass (257 or more).
    let mut r = rng(5);
    let tags: Vec<u32> = (0..40_000).map(|_| r.random_range(0..3000)).collect();
    let vals: Vec<u64> = (0..40_000).map(|_| r.random_range(0..1000u64)).collect();
    check(&ctx, &chunked(tags, vals, 15_000), 2900, RawKind::I64, 4096, 2, "2900 groups");
    // Errors are typed, not panics.
    assert!(RegionSelect::new(&ctx, 0, RawKind::I64, 4).is_err());
    let mut rs = RegionSelect::new(&ctx, 2, RawKind::I64, 2).unwrap();
    let t = DeviceArray::upload(&ctx, &[0u32, 1]).unwrap();
    let v32 = DeviceArray::upload(&ctx, &[0u32, 1]).unwrap();
    assert!(rs.add(&ctx, &t, &v32).is_err());
    let v = DeviceArray::upload(&ctx, &[5u64]).unwrap();
    assert!(rs.add(&ctx, &t, &v).is_err());
    let v = DeviceArray::upload(&ctx, &[5u64, 6]).unwrap();
    rs.add(&ctx, &t, &v).unwrap();
    assert!(rs.add(&ctx, &t, &v).is_err(), "more rows than announced");
    assert!(rs.finish(&ctx, &|n| vec![n as u64], 2).is_err(), "a rank past the group");
    let rs = RegionSelect::new(&ctx, 2, RawKind::I64, 3).unwrap();
    assert!(rs.finish(&ctx, &|_| vec![0], 2).is_err(), "fewer rows than announced");
}

#[test]
fn device_keys_match_host_keys() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(3);
    let ints: Vec<u64> = (0..5000).map(|i| if i < 5 { [0, 1, u64::MAX, 1 << 63, (1 << 63) - 1][i] } else { r.random() }).collect();
    let floats: Vec<u64> = [f64::NAN, -f64::NAN, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::MAX, f64::MIN, 1e-310, -1e-310]
        .iter()
        .map(|x| x.to_bits())
        .chain((0..4990).map(|_| r.random::<f64>().to_bits() ^ ((r.random::<u64>() & 1) << 63)))
        .chain([0x7ff0_0000_0000_0001u64, 0xfff0_0000_0000_0001, 0x7fff_ffff_ffff_ffff])
        .collect();
    for (kind, vals) in [(RawKind::I64, ints), (RawKind::F64, floats)] {
        let a = DeviceArray::upload_segmented(&ctx, &vals, 1024).unwrap();
        to_order_keys_gpu(&ctx, &a, kind, false).unwrap();
        let got: Vec<u64> = a.download(&ctx).unwrap();
        let want: Vec<u64> = vals.iter().map(|&b| raw_key(kind, b)).collect();
        assert_eq!(got, want, "{kind:?}");
    }
    let a = DeviceArray::upload(&ctx, &[1u32, 2]).unwrap();
    assert!(to_order_keys_gpu(&ctx, &a, RawKind::I64, false).is_err());
}
