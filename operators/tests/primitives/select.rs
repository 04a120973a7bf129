//! Selection (SampleSelect on the GPU, parallel CPU paths) against the sort-based
//! references: exact ranks, approximate ranks within the reported bound, and top-k
//! row indices with the row-order tie rule.
use rand::{Rng, SeedableRng};
use ridgeline_operators::scan::Int64Path;
use ridgeline_operators::select::*;
use ridgeline_operators::testing::test_context;
use ridgeline_operators::{DeviceArray, GpuError};

fn rng(seed: u64) -> rand::rngs::SmallRng {
    rand::rngs::SmallRng::seed_from_u64(seed)
}

fn normal(r: &mut impl Rng) -> f64 {
    let u1: f64 = r.random::<f64>().max(1e-300);
    let u2: f64 = r.random();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// Named u32 key sets of length `n`.
fn datasets_u32(n: usize, seed: u64) -> Vec<(String, Vec<u32>)> {
    let mut r = rng(seed);
    let mut v = Vec::new();
    v.push(("uniform".into(), (0..n).map(|_| r.random::<u32>()).collect()));
    v.push(("normal-f32".into(), keys_f32(&(0..n).map(|_| normal(&mut r) as f32).collect::<Vec<_>>())));
    for d in [1u32, 16, 128, 1024] {
        v.push((format!("distinct-{d}"), (0..n).map(|_| r.random_range(0..d) * 7919 + 3).collect()));
    }
    v.push(("sorted".into(), (0..n as u32).collect()));
    v.push(("reverse".into(), (0..n as u32).rev().collect()));
    v.push((
        "extremes-i32".into(),
        keys_i32(&(0..n).map(|i| [i32::MIN, i32::MAX, 0, -1, 1][i % 5] ^ (r.random_range(0..2) * (i as i32 & 1))).collect::<Vec<_>>()),
    ));
    v
}

fn ranks_for(n: usize, seed: u64) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let mut r = rng(seed);
    let n64 = n as u64;
    let mut v = vec![0, n64 - 1, n64 / 2, n64 / 2, (n64 - 1) / 3];
    for _ in 0..4 {
        v.push(r.random_range(0..n64));
    }
    v
}

fn check_exact<K: SelectKey>(got: &[K], keys: &[K], ranks: &[u64], what: &str) {
    let want = select_reference(keys, ranks);
    assert_eq!(got.len(), ranks.len(), "{what}: result length");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g, w, "{what}: n={} rank {} (#{i}) got {g:?}, want {w:?}", keys.len(), ranks[i]);
    }
}

// ---------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------

#[test]
fn keys_preserve_arrow_total_order() {
    let fs = [f32::NEG_INFINITY, -1e30, -1.0, -f32::MIN_POSITIVE, -0.0, 0.0, f32::MIN_POSITIVE, 1.0, 1e30, f32::INFINITY];
    for w in fs.windows(2) {
        assert!(key_f32(w[0]) < key_f32(w[1]), "{} < {}", w[0], w[1]);
    }
    assert!(key_f32(-0.0) < key_f32(0.0));
    assert!(key_f32(f32::INFINITY) < key_f32(f32::NAN));
    assert_eq!(key_f32(f32::NAN), key_f32(-f32::NAN));
    assert_eq!(key_f32(f32::from_bits(0x7f80_0001)), key_f32(f32::NAN));
    let ds = [f64::NEG_INFINITY, -1e300, -1.0, -0.0, 0.0, 5e-324, 1.0, f64::MAX, f64::INFINITY];
    for w in ds.windows(2) {
        assert!(key_f64(w[0]) < key_f64(w[1]), "{} < {}", w[0], w[1]);
    }
    assert!(key_f64(f64::INFINITY) < key_f64(f64::NAN));
    assert_eq!(key_f64(-f64::NAN), key_f64(f64::NAN));
    let is = [i32::MIN, i32::MIN + 1, -1, 0, 1, i32::MAX];
    for w in is.windows(2) {
        assert!(key_i32(w[0]) < key_i32(w[1]));
    }
    let ls = [i64::MIN, -1, 0, 1, i64::MAX];
    for w in ls.windows(2) {
        assert!(key_i64(w[0]) < key_i64(w[1]));
    }
    for x in [i64::MIN, -5, 0, 7, i64::MAX] {
        assert_eq!(unkey_i64(key_i64(x)), x);
    }
    for x in [-2.5f64, -0.0, 0.0, 3.0, f64::INFINITY] {
        assert_eq!(unkey_f64(key_f64(x)).to_bits(), x.to_bits());
    }
    // Bulk versions (parallel above 64Ki values) agree with the scalar ones.
    let mut r = rng(1);
    let xs: Vec<f32> = (0..100_000).map(|_| f32::from_bits(r.random())).collect();
    assert_eq!(keys_f32(&xs), xs.iter().map(|&x| key_f32(x)).collect::<Vec<_>>());
    let ys: Vec<i64> = (0..100_000).map(|_| r.random()).collect();
    assert_eq!(keys_i64(&ys), ys.iter().map(|&x| key_i64(x)).collect::<Vec<_>>());
    // Sorting by key = sorting by total_cmp (NaNs canonicalised to +NaN).
    let mut a: Vec<f64> = (0..5000).map(|i| [f64::NAN, -f64::NAN, -0.0, 0.0, f64::INFINITY, -f64::INFINITY][i % 6]).collect();
    a.extend((0..5000).map(|_| normal(&mut r)));
    // Arrow's order is total_cmp with NaNs canonicalised (all NaNs equal, last).
    let canon = |x: f64| if x.is_nan() { f64::NAN } else { x };
    a.sort_by(|x, y| canon(*x).total_cmp(&canon(*y)));
    for w in a.windows(2) {
        let ord = canon(w[0]).total_cmp(&canon(w[1]));
        assert_eq!(key_f64(w[0]).cmp(&key_f64(w[1])), ord, "{} vs {}", w[0], w[1]);
        assert_eq!(key_f32(w[0] as f32).cmp(&key_f32(w[1] as f32)), canon(w[0] as f32 as f64).total_cmp(&canon(w[1] as f32 as f64)), "f32 {} vs {}", w[0], w[1]);
    }
}

// ---------------------------------------------------------------------------------
// CPU paths
// ---------------------------------------------------------------------------------

#[test]
fn cpu_select_matches_reference() {
    for &n in &[1usize, 2, 1023, 1025, 4097, 300_001] {
        for (name, keys) in datasets_u32(n, n as u64) {
            let ranks = ranks_for(n, 7);
            check_exact(&select_cpu(&keys, &ranks), &keys, &ranks, &format!("cpu {name}"));
            let (a, st) = approx_select_cpu(&keys, &ranks);
            check_exact(&a, &keys, &ranks, &format!("cpu approx {name}"));
            assert_eq!(st.rank_error_bound, 0);
        }
    }
    assert!(select_cpu::<u32>(&[], &[]).is_empty());
    let keys64: Vec<u64> = keys_i64(&(0..300_000i64).map(|i| (i * 7_919_000_011) ^ (i << 40)).collect::<Vec<_>>());
    let ranks = ranks_for(keys64.len(), 3);
    check_exact(&select_cpu(&keys64, &ranks), &keys64, &ranks, "cpu u64");
}

#[test]
fn cpu_topk_matches_reference() {
    for &n in &[1usize, 5, 1000, 70_001] {
        for (name, keys) in datasets_u32(n, 11) {
            for k in [0, 1, n / 3, n.saturating_sub(1), n, n + 7] {
                assert_eq!(topk_cpu(&keys, k), topk_reference(&keys, k), "cpu topk {name} n={n} k={k}");
            }
        }
    }
}

#[test]
fn topk_reference_breaks_ties_by_row_order() {
    let keys = [5u32, 1, 5, 5, 0, 5];
    assert_eq!(topk_reference(&keys, 3), vec![0, 1, 4]);
    assert_eq!(topk_reference(&keys, 4), vec![0, 1, 2, 4]);
    assert_eq!(topk_cpu(&keys, 4), vec![0, 1, 2, 4]);
}

// ---------------------------------------------------------------------------------
// GPU exact selection
// ---------------------------------------------------------------------------------

#[test]
fn gpu_select_u32_distributions_and_sizes() {
    let Some(ctx) = test_context() else { return };
    // 4095/4097: around the sample size (base case vs one level); 8191/8193,
    // 65_537 and 100_003: not multiples of the 4096-key workgroup chunk.
    for &n in &[1usize, 2, 3, 4095, 4097, 8191, 65_537, 100_003] {
        for (name, keys) in datasets_u32(n, 100 + n as u64) {
            let ranks = ranks_for(n, n as u64);
            let (got, st) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &SelectOptions::default()).unwrap();
            check_exact(&got, &keys, &ranks, &format!("gpu {name}"));
            // The filter without the oracle (recomputed buckets), and with it for
            // every task (by default only tasks with at most 4 distinct ranks).
            for (oracle, oracle_max_ranks) in [(false, 0), (true, usize::MAX)] {
                let opts = SelectOptions { oracle, oracle_max_ranks, ..Default::default() };
                let (got2, _) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts).unwrap();
                check_exact(&got2, &keys, &ranks, &format!("gpu oracle={oracle} {name}"));
            }
            assert!(st.levels >= 1, "{name}: levels");
            assert!(st.gpu_ms > 0.0, "{name}: gpu_ms");
            assert_eq!(st.rank_error_bound, 0);
            if n > 4096 && name.starts_with("distinct-1") && name.len() == 10 {
                // All keys equal: the first level's equality bucket answers every rank.
                assert_eq!(st.levels, 1, "all-equal data ends after one level");
            }
        }
    }
}

#[test]
fn gpu_select_empty_and_errors() {
    let Some(ctx) = test_context() else { return };
    let (v, _) = select_gpu::<u32>(&ctx, Keys::Host(&[]), &[], &SelectOptions::default()).unwrap();
    assert!(v.is_empty());
    let (v, _) = select_gpu::<u32>(&ctx, Keys::Host(&[1, 2, 3]), &[], &SelectOptions::default()).unwrap();
    assert!(v.is_empty());
    assert!(matches!(select_gpu::<u32>(&ctx, Keys::Host(&[1, 2, 3]), &[3], &SelectOptions::default()), Err(GpuError::Invalid(_))));
    assert!(matches!(select_gpu::<u32>(&ctx, Keys::Host(&[]), &[0], &SelectOptions::default()), Err(GpuError::Invalid(_))));
    let arr = DeviceArray::upload(&ctx, &[1u64, 2, 3]).unwrap();
    assert!(matches!(select_gpu::<u32>(&ctx, Keys::Device(&arr, 3), &[0], &SelectOptions::default()), Err(GpuError::Invalid(_))));
    assert!(matches!(select_gpu::<u64>(&ctx, Keys::Device(&arr, 4), &[0], &SelectOptions::default()), Err(GpuError::Invalid(_))));
    // A prefix of a device array.
    let (v, _) = select_gpu::<u64>(&ctx, Keys::Device(&arr, 2), &[1, 0], &SelectOptions::default()).unwrap();
    assert_eq!(v, vec![2, 1]);
}

#[test]
fn gpu_select_many_levels_small_samples() {
    let Some(ctx) = test_context() else { return };
    // S = 64 samples, 15 splitters: several levels on 200k keys.
    for (name, keys) in datasets_u32(200_003, 5) {
      for oracle in [true, false] {
        let opts = SelectOptions { max_sample: 64, oracle, oracle_max_ranks: usize::MAX, ..Default::default() };
        let ranks = ranks_for(keys.len(), 9);
        let (got, st) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts).unwrap();
        check_exact(&got, &keys, &ranks, &format!("gpu S=64 oracle={oracle} {name}"));
        if name == "uniform" {
            assert!(st.levels >= 3, "uniform with 16 buckets needs several levels, got {}", st.levels);
        }
        assert!(st.device_bytes > 0 && st.device_bytes <= (keys.len() as u64 * 4) / 4 + (1 << 20), "{name}: {} aux bytes", st.device_bytes);
      }
    }
}

#[test]
fn gpu_select_target_buckets_over_several_buffers() {
    let Some(ctx) = test_context() else { return };
    // 64 ranks spread over 300k keys: 64 target buckets of about 300-450 keys,
    // split over buffers of at most 8 KiB (2048 keys).
    let mut r = rng(12);
    let keys: Vec<u32> = (0..300_000).map(|_| r.random::<u32>()).collect();
    let ranks: Vec<u64> = (0..64).map(|i| i * 4_687 + 17).collect();
    let opts = SelectOptions { max_filter_bytes: 8192, ..Default::default() };
    let (got, _) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts).unwrap();
    check_exact(&got, &keys, &ranks, "split filter buffers");
    // A cap below one bucket is an error, not a panic.
    let opts = SelectOptions { max_filter_bytes: 64, ..Default::default() };
    assert!(matches!(select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts), Err(GpuError::Invalid(_))));
}

#[test]
fn gpu_select_all_ranks_of_a_small_input() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(3);
    let keys: Vec<u32> = (0..5000).map(|_| r.random_range(0..300)).collect();
    let ranks: Vec<u64> = (0..5000).rev().collect();
    let (got, _) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &SelectOptions::default()).unwrap();
    check_exact(&got, &keys, &ranks, "all ranks");
    // 300 distinct ranks (several descents of at most 64) on 100k keys.
    let keys: Vec<u32> = (0..100_000).map(|_| r.random::<u32>()).collect();
    let ranks: Vec<u64> = (0..300u64).map(|i| (i * 7_919) % 100_000).chain([5, 5, 99_999]).collect();
    let (got, st) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &SelectOptions::default()).unwrap();
    check_exact(&got, &keys, &ranks, "300 ranks");
    // A quarter of the input plus the fixed scratch of each level (samples,
    // splitters, counts: tens of KiB).
    assert!(st.device_bytes <= 100_000 + (128 << 10), "aux {} bytes", st.device_bytes);
}

#[test]
fn gpu_select_segmented_input() {
    let Some(ctx) = test_context() else { return };
    for (name, keys) in datasets_u32(50_001, 77) {
        // 13 segments of 4096 keys (and a small input spread over 2 segments).
        let arr = DeviceArray::upload_segmented(&ctx, &keys, 4096).unwrap();
        let ranks = ranks_for(keys.len(), 1);
        for oracle_max_ranks in [0, usize::MAX] {
            let opts = SelectOptions { oracle_max_ranks, ..Default::default() };
            let (got, _) = select_gpu::<u32>(&ctx, Keys::Device(&arr, keys.len()), &ranks, &opts).unwrap();
            check_exact(&got, &keys, &ranks, &format!("segmented {name} oracle_max_ranks={oracle_max_ranks}"));
        }
        let small = &keys[..5000];
        let arr = DeviceArray::upload_segmented(&ctx, small, 4096).unwrap();
        let ranks = ranks_for(small.len(), 2);
        let (got, _) = select_gpu::<u32>(&ctx, Keys::Device(&arr, small.len()), &ranks, &SelectOptions::default()).unwrap();
        check_exact(&got, small, &ranks, &format!("segmented small {name}"));
    }
}

fn u64_sets(n: usize) -> Vec<(&'static str, Vec<u64>)> {
    let mut r = rng(n as u64);
    vec![
        ("uniform-u64", (0..n).map(|_| r.random::<u64>()).collect()),
        // Same high word, different low words (the emulated compare's second word).
        ("high-equal", (0..n).map(|_| (7u64 << 32) | r.random::<u32>() as u64).collect()),
        ("normal-f64", keys_f64(&(0..n).map(|_| normal(&mut r)).collect::<Vec<_>>())),
        (
            "specials-f64",
            keys_f64(&(0..n).map(|i| [f64::NAN, -0.0, 0.0, f64::INFINITY, f64::NEG_INFINITY, 1.5, -1.5][i % 7]).collect::<Vec<_>>()),
        ),
        ("extremes-i64", keys_i64(&(0..n).map(|i| [i64::MIN, i64::MAX, 0, -1, 1, i as i64][i % 6]).collect::<Vec<_>>())),
        ("distinct-16-u64", (0..n).map(|_| r.random_range(0..16u64) << 40).collect()),
    ]
}

#[test]
fn gpu_select_u64_native_and_emulated() {
    let Some(ctx) = test_context() else { return };
    let mut paths = vec![Int64Path::Emulated];
    if ctx.has_int64() {
        paths.push(Int64Path::Native);
    }
    for (int64, oracle) in paths.into_iter().flat_map(|p| [(p, true), (p, false)]) {
        let opts = SelectOptions { int64, oracle, oracle_max_ranks: usize::MAX, ..Default::default() };
        for &n in &[1usize, 4097, 65_537] {
            for (name, keys) in u64_sets(n) {
                let ranks = ranks_for(n, 4);
                let (got, _) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts).unwrap();
                check_exact(&got, &keys, &ranks, &format!("{int64:?} oracle={oracle} {name}"));
                if oracle {
                    for k in [1, n / 2, n] {
                        let (idx, _) = topk_gpu(&ctx, Keys::Host(&keys), k, &opts).unwrap();
                        assert_eq!(idx, topk_reference(&keys, k), "{int64:?} top-{k} {name}");
                    }
                }
            }
        }
    }
}

#[test]
fn gpu_select_f32_specials() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(8);
    let vals: Vec<f32> = (0..30_000)
        .map(|i| match i % 6 {
            0 => f32::NAN,
            1 => -0.0,
            2 => 0.0,
            3 => f32::INFINITY,
            _ => normal(&mut r) as f32,
        })
        .collect();
    let keys = keys_f32(&vals);
    let n = keys.len() as u64;
    let ranks = vec![0, n - 1, n / 6, n / 3, n / 2, 2 * n / 3];
    let (got, _) = select_gpu(&ctx, Keys::Host(&keys), &ranks, &SelectOptions::default()).unwrap();
    check_exact(&got, &keys, &ranks, "f32 specials");
    assert!(unkey_f32(got[1]).is_nan(), "the largest is NaN");
}

// ---------------------------------------------------------------------------------
// GPU approximate selection
// ---------------------------------------------------------------------------------

/// The ranks `[lo, hi]` that key `v` occupies in sorted order (`None` if absent).
fn rank_range<K: SelectKey>(sorted: &[K], v: K) -> Option<(u64, u64)> {
    let lo = sorted.partition_point(|x| *x < v);
    let hi = sorted.partition_point(|x| *x <= v);
    (hi > lo).then_some((lo as u64, hi as u64 - 1))
}

fn check_approx<K: SelectKey>(got: &[K], st: &SelectStats, keys: &[K], ranks: &[u64], what: &str) {
    let mut sorted = keys.to_vec();
    sorted.sort_unstable();
    for (i, (&g, &r)) in got.iter().zip(ranks).enumerate() {
        let (lo, hi) = rank_range(&sorted, g).unwrap_or_else(|| panic!("{what}: returned key {g:?} is not in the input"));
        let err = if r < lo { lo - r } else { r.saturating_sub(hi) };
        assert!(err <= st.rank_error_bound, "{what}: rank {r} (#{i}) got key with ranks {lo}..={hi}, error {err} > bound {}", st.rank_error_bound);
    }
}

#[test]
fn gpu_approx_select_within_bound() {
    let Some(ctx) = test_context() else { return };
    let n = 1 << 20;
    let mut r = rng(21);
    let sets: Vec<(&str, Vec<u32>)> = vec![
        ("uniform", (0..n).map(|_| r.random::<u32>()).collect()),
        ("normal", keys_f32(&(0..n).map(|_| normal(&mut r) as f32).collect::<Vec<_>>())),
        ("sorted", (0..n as u32).collect()),
        ("distinct-1024", (0..n).map(|_| r.random_range(0..1024u32)).collect()),
    ];
    for (name, keys) in sets {
        let ranks: Vec<u64> = vec![0, 1, (n / 100) as u64, (n / 4) as u64, (n / 2) as u64, (n / 2) as u64, (3 * n / 4) as u64, (n - 1) as u64];
        let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys), &ranks, &SelectOptions::default()).unwrap();
        assert!(st.rank_error_bound <= n as u64 / 1000, "{name}: bound {} > 0.1% of {n}", st.rank_error_bound);
        check_approx(&got, &st, &keys, &ranks, name);
        if name == "uniform" {
            assert!(st.rank_error_bound > 0, "uniform data is answered from splitters, not exactly");
            assert!(st.levels <= 2, "{name}: {} levels", st.levels);
        }
    }
    // A looser bound stops after one level.
    let keys: Vec<u32> = (0..n).map(|_| r.random::<u32>()).collect();
    let ranks = vec![(n / 3) as u64, 12345];
    let opts = SelectOptions { max_error_fraction: 0.01, ..Default::default() };
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys), &ranks, &opts).unwrap();
    assert_eq!(st.levels, 1);
    assert!(st.rank_error_bound <= n as u64 / 100);
    check_approx(&got, &st, &keys, &ranks, "1%");
    // Below 1000 keys the allowed error rounds to 0: exact answers, even when
    // bucketing levels run (S = 64).
    let small: Vec<u32> = (0..999).map(|_| r.random::<u32>()).collect();
    let ranks = ranks_for(small.len(), 5);
    let opts = SelectOptions { max_sample: 64, ..Default::default() };
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&small), &ranks, &opts).unwrap();
    assert_eq!(st.rank_error_bound, 0);
    assert!(st.levels >= 2);
    check_exact(&got, &small, &ranks, "approx small");
    // 5000 keys: at most 5 ranks off.
    let small: Vec<u32> = (0..5000).map(|_| r.random::<u32>()).collect();
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&small), &ranks, &opts).unwrap();
    assert!(st.rank_error_bound <= 5);
    check_approx(&got, &st, &small, &ranks, "approx 5000");
    // 64-bit keys.
    let keys64: Vec<u64> = keys_f64(&(0..n).map(|_| normal(&mut r)).collect::<Vec<_>>());
    let ranks = vec![0, (n / 2) as u64, (n - 1) as u64];
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys64), &ranks, &SelectOptions::default()).unwrap();
    assert!(st.rank_error_bound <= n as u64 / 1000);
    check_approx(&got, &st, &keys64, &ranks, "f64");
}

/// The sample sort (every level of every selection sorts its sample with it):
/// the subgroup kernel (where the adapter has subgroups) and the network through
/// workgroup memory, against a CPU sort, for 32-bit keys and 64-bit keys native
/// and emulated; empty, one key, all equal, sizes that are not a multiple of
/// anything, the full sample, sorted and reverse input, extremes.
#[test]
fn gpu_sample_sort_matches_cpu() {
    let Some(ctx) = test_context() else { return };
    let sg = ctx.has_subgroups();
    let mut r = rng(4242);
    for subgroup_sort in [true, false] {
        for max_sample in [4096u32, 1024, 64] {
            let opts = SelectOptions { subgroup_sort, max_sample, ..Default::default() };
            for m in [0usize, 1, 2, 3, 5, 63, 64, 100, 1000, 1023, 1024, 2049, 4095, 4096] {
                if m > max_sample as usize {
                    continue;
                }
                let sets: Vec<(&str, Vec<u32>)> = vec![
                    ("uniform", (0..m).map(|_| r.random::<u32>()).collect()),
                    ("few", (0..m).map(|_| r.random_range(0..4u32)).collect()),
                    ("equal", vec![7; m]),
                    ("sorted", (0..m as u32).collect()),
                    ("reverse", (0..m as u32).rev().collect()),
                    ("extremes", (0..m).map(|i| [0, u32::MAX, 1, u32::MAX - 1][i % 4]).collect()),
                ];
                for (name, keys) in sets {
                    let (got, ran_sg) = sample_sort_gpu(&ctx, &keys, &opts).unwrap();
                    let mut want = keys.clone();
                    want.sort_unstable();
                    assert_eq!(got, want, "u32 {name} m={m} S={max_sample} subgroups={subgroup_sort}");
                    assert_eq!(ran_sg, subgroup_sort && sg, "kernel");
                }
                for int64 in [Int64Path::Auto, Int64Path::Emulated] {
                    let keys: Vec<u64> = (0..m).map(|i| if i % 5 == 0 { u64::MAX - (i as u64 % 3) } else { r.random::<u64>() >> (i % 40) }).collect();
                    let (got, _) = sample_sort_gpu(&ctx, &keys, &SelectOptions { int64, ..opts }).unwrap();
                    let mut want = keys.clone();
                    want.sort_unstable();
                    assert_eq!(got, want, "u64 {int64:?} m={m} S={max_sample} subgroups={subgroup_sort}");
                }
            }
        }
        // More keys than the sample holds: an error, not a wrong sort.
        assert!(sample_sort_gpu(&ctx, &vec![1u32; 4097], &SelectOptions { subgroup_sort, ..Default::default() }).is_err());
    }
}

/// The one-pass approximate selection (a histogram over windows of the sorted
/// sample): every distribution, ranks at the ends, several windows, ties across
/// windows, segmented inputs, 64-bit keys, and its fallbacks (too many windows, a
/// bound it cannot meet).
#[test]
fn gpu_approx_select_one_pass() {
    let Some(ctx) = test_context() else { return };
    let sg = ctx.has_subgroup_barriers();
    // The kernels: cells of key space (32-bit keys; 64-bit ones fall through to
    // the splitters), subgroup staging (where the adapter has subgroups) and the
    // plain one; few workgroups, so that each loops over many chunks, the last one
    // partial.
    for (subgroups, cells, items, groups) in
        [(true, false, 0, 0), (true, true, 0, 0), (true, true, 1, 3), (true, true, 7, 2), (false, true, 0, 0), (false, false, 0, 5)]
    {
        let opts = SelectOptions {
            approx_hist_min: 0,
            approx_hist_subgroups: subgroups,
            approx_key_cells: cells,
            approx_hist_items: items,
            approx_hist_groups: groups,
            ..Default::default()
        };
        // Where cells are too coarse (few distinct values spread over key space),
        // the splitter kernel answers.
        let splitters = if subgroups && sg { "gpu-sampleselect-approx-1pass-subgroup" } else { "gpu-sampleselect-approx-1pass" };
        let want: &[&str] = if cells { &["gpu-sampleselect-approx-1pass-cells", splitters] } else { &[splitters] };
        one_pass_with(&ctx, opts, want);
    }
}

/// The key-cell pass (32-bit keys): which inputs it answers, the bound it reports
/// (checked against the true rank ranges), exact answers from cells of one key,
/// and the splitter pass taking over where keys cluster within a cell.
#[test]
fn gpu_approx_select_key_cells() {
    let Some(ctx) = test_context() else { return };
    let opts = SelectOptions { approx_hist_min: 0, ..Default::default() };
    assert!(opts.approx_key_cells, "cells are the default");
    let cells = "gpu-sampleselect-approx-1pass-cells";
    let mut r = rng(4242);
    let n = 400_003usize;
    let n64 = n as u64;
    let med = vec![n64 / 2];
    let quart = vec![n64 / 4, n64 / 2, 3 * n64 / 4];
    let eight: Vec<u64> = (1..9).map(|i| i * n64 / 9).collect();
    // Three percent of the keys on 16 values around the median, the rest spread
    // over all 32-bit keys: a window's cells are far wider than the cluster, whose
    // cell then holds 3% of n.
    let clustered: Vec<u32> = (0..n)
        .map(|i| match i % 200 {
            0..=96 => r.random_range(0..1u32 << 31),
            97..=102 => (1u32 << 31) + r.random_range(0..16u32) * 3,
            _ => r.random_range((1u32 << 31) + 64..=u32::MAX),
        })
        .collect();
    // Whether the cells answer the median, the quartiles, eight ranks (None: either
    // pass may: eight windows hold 128 cells each, at this n often too coarse for
    // the bound of 400 ranks).
    let (yes, no) = (Some(true), Some(false));
    let sets: Vec<(&str, Vec<u32>, [Option<bool>; 3])> = vec![
        ("uniform", (0..n).map(|_| r.random::<u32>()).collect(), [yes, yes, None]),
        ("normal-f32", keys_f32(&(0..n).map(|_| normal(&mut r) as f32).collect::<Vec<_>>()), [yes, yes, None]),
        ("sorted", (0..n as u32).collect(), [yes, yes, None]),
        // Half the keys near 0, half near the largest: the median's window spans
        // both, so its cells hold whole clusters and the splitters answer.
        ("extremes", (0..n).map(|i| if i % 2 == 0 { r.random_range(0..64u32) } else { u32::MAX - r.random_range(0..64u32) }).collect(), [no, no, None]),
        ("small span", (0..n).map(|_| 1000 + r.random_range(0..500u32)).collect(), [yes, yes, yes]),
        ("clustered", clustered, [no, no, None]),
    ];
    for (name, keys, by_cells) in &sets {
        for (ranks, expect) in [&med, &quart, &eight].into_iter().zip(by_cells) {
            let what = format!("{name} {ranks:?}");
            let (got, st) = approx_select_gpu(&ctx, Keys::Host(keys), ranks, &opts).unwrap();
            assert!(st.rank_error_bound <= n64 / 1000, "{what}: bound {}", st.rank_error_bound);
            check_approx(&got, &st, keys, ranks, &what);
            if let Some(e) = expect {
                assert_eq!(st.algorithm == cells, *e, "{what}: {}", st.algorithm);
            }
            if *name == "small span" {
                // Cells of one key each: exact.
                assert_eq!(st.rank_error_bound, 0, "{what}");
                check_exact(&got, keys, ranks, &what);
            }
            if *name == "uniform" {
                assert!(st.rank_error_bound > 0, "{what}");
            }
        }
    }
    // Off: the splitters answer uniform keys.
    let uniform = &sets[0].1;
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(uniform), &med, &SelectOptions { approx_key_cells: false, ..opts }).unwrap();
    assert!(st.algorithm.contains("1pass") && st.algorithm != cells, "{}", st.algorithm);
    check_approx(&got, &st, uniform, &med, "cells off");
    // 64-bit keys never take the cells.
    let keys64: Vec<u64> = (0..n).map(|_| r.random::<u64>()).collect();
    let (got, st) = approx_select_gpu::<u64>(&ctx, Keys::Host(&keys64), &quart, &opts).unwrap();
    assert!(st.algorithm != cells, "{}", st.algorithm);
    check_approx(&got, &st, &keys64, &quart, "u64");
}

fn one_pass_with(ctx: &ridgeline_operators::GpuContext, hist: SelectOptions, want: &[&str]) {
    // The kernels that may answer (32-bit keys) when the one pass does; the first
    // must answer some.
    let first = std::cell::Cell::new(0);
    let kernel = |alg: &str| {
        first.set(first.get() + (alg == want[0]) as usize);
        want.contains(&alg)
    };
    let (mut one_pass, mut other) = (0, 0);
    for &n in &[70_001usize, 300_007] {
        let n64 = n as u64;
        for (name, keys) in datasets_u32(n, 300 + n as u64) {
            let rank_sets: Vec<Vec<u64>> = vec![
                vec![n64 / 2],
                vec![n64 / 4, n64 / 2, 3 * n64 / 4],
                vec![0, n64 - 1],
                vec![0, 1, n64 / 100, n64 / 4, n64 / 2, n64 / 2, 3 * n64 / 4, n64 - 2, n64 - 1],
                // Nine windows: more than one pass holds.
                (1..10).map(|i| i * n64 / 10).collect(),
            ];
            for ranks in &rank_sets {
                let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys), ranks, &hist).unwrap();
                let what = format!("one pass {name} n={n} {ranks:?}");
                assert!(st.rank_error_bound <= n64 / 1000, "{what}: bound {}", st.rank_error_bound);
                check_approx(&got, &st, &keys, ranks, &what);
                if st.algorithm.contains("1pass") {
                    one_pass += 1;
                    assert_eq!(st.levels, 1, "{what}");
                    assert!(kernel(st.algorithm), "{what}: {}", st.algorithm);
                } else {
                    other += 1;
                }
                if ranks[0] == n64 / 10 {
                    assert!(!st.algorithm.contains("1pass"), "{what}: nine windows need a descent ({})", st.algorithm);
                } else if matches!(name.as_str(), "uniform" | "normal-f32" | "sorted" | "reverse" | "distinct-1") {
                    assert!(st.algorithm.contains("1pass"), "{what}: answered in one pass ({})", st.algorithm);
                }
            }
        }
    }
    assert!(one_pass > 0 && other > 0, "{one_pass} one pass, {other} other");
    assert!(first.get() > 0, "{} never answered", want[0]);
    // A bound of 0 is met only by exact answers: uniform keys fall back to a descent,
    // few distinct values are answered exactly in one pass.
    let mut r = rng(77);
    let n = 100_000usize;
    let exact = SelectOptions { max_error_fraction: 0.0, ..hist };
    let uniform: Vec<u32> = (0..n).map(|_| r.random::<u32>()).collect();
    let ranks = vec![n as u64 / 2, n as u64 / 3];
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&uniform), &ranks, &exact).unwrap();
    check_exact(&got, &uniform, &ranks, "bound 0, uniform");
    assert!(!st.algorithm.contains("1pass") && st.rank_error_bound == 0, "{}", st.algorithm);
    let few: Vec<u32> = (0..n).map(|_| r.random_range(0..16u32)).collect();
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&few), &ranks, &exact).unwrap();
    check_exact(&got, &few, &ranks, "bound 0, 16 distinct");
    assert!(st.algorithm.contains("1pass"), "{}", st.algorithm);
    // Windows that meet on one value (its copies counted once, in the later window).
    let two: Vec<u32> = (0..n).map(|i| (i % 2) as u32 * 5).collect();
    let ranks = vec![10, n as u64 / 2 - 1, n as u64 / 2, n as u64 - 10];
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&two), &ranks, &exact).unwrap();
    check_exact(&got, &two, &ranks, "two values");
    assert!(st.algorithm.contains("1pass"), "{}", st.algorithm);
    // Segmented input (one pass per segment, one histogram); its first len keys,
    // n - 3 leaving three keys after the last whole vec4 of the last segment.
    let arr = DeviceArray::upload_segmented(&ctx, &uniform, 30_004).unwrap();
    for len in [n, n - 3] {
        let ranks = vec![0, len as u64 / 2, len as u64 - 1];
        let (got, st) = approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, len), &ranks, &hist).unwrap();
        check_approx(&got, &st, &uniform[..len], &ranks, "segmented");
        assert!(kernel(st.algorithm) && st.rank_error_bound <= len as u64 / 1000, "{} {}", st.algorithm, st.rank_error_bound);
    }
    // 64-bit keys, native where the adapter has it and emulated.
    let keys64: Vec<u64> = keys_f64(&(0..n).map(|_| normal(&mut r) * 1e6).collect::<Vec<_>>());
    let ranks = vec![n as u64 / 4, n as u64 / 2, n as u64 / 2 + 1];
    for int64 in [Int64Path::Auto, Int64Path::Emulated] {
        let opts = SelectOptions { int64, ..hist };
        let (got, st) = approx_select_gpu::<u64>(&ctx, Keys::Host(&keys64), &ranks, &opts).unwrap();
        check_approx(&got, &st, &keys64, &ranks, &format!("u64 {int64:?}"));
        assert!(st.algorithm.contains("1pass") && st.rank_error_bound <= n as u64 / 1000, "{} {}", st.algorithm, st.rank_error_bound);
    }
}

// ---------------------------------------------------------------------------------
// GPU top-k
// ---------------------------------------------------------------------------------

#[test]
fn gpu_topk_matches_reference() {
    let Some(ctx) = test_context() else { return };
    for &n in &[1usize, 2, 4095, 4097, 30_001] {
        for (name, keys) in datasets_u32(n, 40 + n as u64) {
            for k in [0, 1, 2, n / 2, n.saturating_sub(1), n, n + 3] {
                let (got, _) = topk_gpu(&ctx, Keys::Host(&keys), k, &SelectOptions::default()).unwrap();
                assert_eq!(got.len(), k.min(n), "{name} n={n} k={k}: length");
                assert_eq!(got, topk_reference(&keys, k), "{name} n={n} k={k}");
            }
        }
    }
}

#[test]
fn gpu_topk_ties_at_threshold_take_first_rows() {
    let Some(ctx) = test_context() else { return };
    // 10_000 rows: value 5 everywhere except some 1s; k cuts through the 5s.
    let mut keys = vec![5u32; 10_000];
    for i in (0..10_000).step_by(97) {
        keys[i] = 1;
    }
    let ones = keys.iter().filter(|&&x| x == 1).count();
    let k = ones + 1000;
    let (got, _) = topk_gpu(&ctx, Keys::Host(&keys), k, &SelectOptions::default()).unwrap();
    assert_eq!(got, topk_reference(&keys, k));
    // The 5s taken are exactly the first 1000 rows holding 5.
    let fives: Vec<u32> = got.iter().copied().filter(|&i| keys[i as usize] == 5).collect();
    let first_fives: Vec<u32> = (0..10_000u32).filter(|&i| keys[i as usize] == 5).take(1000).collect();
    assert_eq!(fives, first_fives);
    // 64-bit keys, both paths, segmented input.
    let keys64: Vec<u64> = keys.iter().map(|&x| ((x as u64) << 33) | 1).collect();
    let arr = DeviceArray::upload_segmented(&ctx, &keys64, 4096).unwrap();
    for int64 in [Int64Path::Auto, Int64Path::Emulated] {
        let opts = SelectOptions { int64, ..Default::default() };
        let (got, _) = topk_gpu::<u64>(&ctx, Keys::Device(&arr, keys64.len()), k, &opts).unwrap();
        assert_eq!(got, topk_reference(&keys64, k), "{int64:?}");
    }
}

// ---------------------------------------------------------------------------------
// Above the binding limit
// ---------------------------------------------------------------------------------

/// Checks a top-k answer without a sort: ascending, exactly `k` rows, every row
/// below the threshold taken, and the rows equal to it are the first ones.
fn check_topk_props(keys: &[u32], k: usize, got: &[u32], t: u32) {
    assert_eq!(got.len(), k);
    assert!(got.windows(2).all(|w| w[0] < w[1]), "ascending");
    let lt = keys.iter().filter(|&&x| x < t).count();
    assert!(lt < k && k <= lt + keys.iter().filter(|&&x| x == t).count(), "threshold");
    let mut it = got.iter().peekable();
    let mut eq_taken = 0;
    for (i, &x) in keys.iter().enumerate() {
        let taken = it.peek().is_some_and(|&&g| g as usize == i);
        if taken {
            it.next();
        }
        if x < t {
            assert!(taken, "row {i} below the threshold is missing");
        } else if x == t {
            assert_eq!(taken, eq_taken < k - lt, "row {i} at the threshold");
            eq_taken += usize::from(taken);
        } else {
            assert!(!taken, "row {i} above the threshold was taken");
        }
    }
}

#[test]
fn gpu_select_and_topk_above_binding_limit() {
    let Some(ctx) = test_context() else { return };
    let max_binding = ctx.limits().max_storage_buffer_binding_size.min((1 << 31) - 1);
    // 40M u32 keys = 160 MB (above lavapipe's 128 MiB binding), more if needed.
    let n = (40_000_000u64).max(max_binding / 4 + 1_000_000) as usize;
    if n > 600_000_000 {
        eprintln!("binding limit too large for this test: {max_binding}");
        return;
    }
    // Few distinct values, unevenly spread (cheap to check by counting).
    let keys: Vec<u32> = (0..n as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 20) % 37 + (i % 3 == 0) as u32 * 100).collect();
    let arr = DeviceArray::upload(&ctx, &keys).unwrap();
    assert!(arr.num_segments() > 1, "the input spans several segments");
    let mut hist = vec![0u64; 256];
    for &x in &keys {
        hist[x as usize] += 1;
    }
    let at = |r: u64| {
        let mut acc = 0;
        for (v, &c) in hist.iter().enumerate() {
            acc += c;
            if r < acc {
                return v as u32;
            }
        }
        unreachable!()
    };
    let n64 = n as u64;
    let ranks = vec![0, n64 - 1, n64 / 2, n64 / 3, n64 / 3, 12_345_678];
    let (got, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &SelectOptions::default()).unwrap();
    eprintln!("40M few-distinct: {st:?}");
    let want: Vec<u32> = ranks.iter().map(|&r| at(r)).collect();
    assert_eq!(got, want);
    assert!(st.device_bytes <= n64, "aux {} bytes above a quarter of the input", st.device_bytes);
    let (got, st) = approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &SelectOptions::default()).unwrap();
    assert_eq!(got, want, "few distinct values: equality buckets answer exactly");
    assert_eq!(st.rank_error_bound, 0);
    for k in [1usize, 100_000] {
        let (idx, st) = topk_gpu::<u32>(&ctx, Keys::Device(&arr, n), k, &SelectOptions::default()).unwrap();
        eprintln!("40M top-{k}: {st:?}");
        check_topk_props(&keys, k, &idx, at(k as u64 - 1));
    }
    drop(arr);
    // Distinct keys across segments: a permutation of 0..n (i * a mod n with a
    // coprime to n), so the key of rank r is r.
    let gcd = |mut a: u64, mut b: u64| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let mut a = 2_654_435_761u64 % n64;
    while gcd(a, n64) != 1 {
        a += 1;
    }
    let perm: Vec<u32> = (0..n64).map(|i| ((i * a) % n64) as u32).collect();
    let arr = DeviceArray::upload(&ctx, &perm).unwrap();
    // 4 distinct ranks: the default options use the oracle across the segments.
    let ranks = vec![0, n64 / 2, n64 - 1, 7_777_777, 7_777_777];
    let (got, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &SelectOptions::default()).unwrap();
    eprintln!("40M distinct: {st:?}");
    assert!(st.levels >= 2);
    assert_eq!(got, ranks.iter().map(|&r| r as u32).collect::<Vec<_>>(), "40M distinct");
    let (got, st) = approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &SelectOptions::default()).unwrap();
    assert!(st.rank_error_bound <= n64 / 1000 && st.rank_error_bound > 0);
    for (&g, &r) in got.iter().zip(&ranks) {
        assert!((g as u64).abs_diff(r) <= st.rank_error_bound, "approx rank {r}: got {g}, bound {}", st.rank_error_bound);
    }
}


/// Top-k candidates with ties: every row whose key is at or below the k-th
/// smallest, in row order (the rows later sort keys choose among).
#[test]
fn gpu_topk_ties_takes_every_tied_row() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(77);
    for (n, distinct) in [(1usize, 1u64), (1000, 3), (20_011, 50), (70_000, 1 << 40), (5000, 1)] {
        let keys: Vec<u64> = (0..n).map(|_| r.random_range(0..distinct).wrapping_mul(0x1_0000_0001)).collect();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        let arr = DeviceArray::upload_segmented(&ctx, &keys, 4096).unwrap();
        for k in [1usize, 2, 100, n / 2 + 1, n, n + 5] {
            let (got, _) = topk_ties_gpu::<u64>(&ctx, Keys::Device(&arr, n), k, &SelectOptions::default()).unwrap();
            let want: Vec<u32> = if k >= n {
                (0..n as u32).collect()
            } else {
                let t = sorted[k - 1];
                (0..n as u32).filter(|&i| keys[i as usize] <= t).collect()
            };
            assert_eq!(got, want, "n {n}, {distinct} distinct, k {k}");
            assert!(got.len() >= k.min(n));
        }
    }
}

/// Descending device keys are the complements of the ascending ones.
#[test]
fn device_descending_keys() {
    let Some(ctx) = test_context() else { return };
    let vals: Vec<i64> = vec![i64::MIN, -1, 0, 1, i64::MAX, 42, -42];
    let a = DeviceArray::upload(&ctx, &vals).unwrap();
    to_order_keys_gpu(&ctx, &a, RawKind::I64, true).unwrap();
    let got: Vec<u64> = a.download(&ctx).unwrap();
    assert_eq!(got, vals.iter().map(|&v| !key_i64(v)).collect::<Vec<_>>());
    let f: Vec<f64> = vec![-0.0, 0.0, f64::NAN, -1.5, f64::INFINITY];
    let a = DeviceArray::upload(&ctx, &f).unwrap();
    to_order_keys_gpu(&ctx, &a, RawKind::F64, true).unwrap();
    let got: Vec<u64> = a.download(&ctx).unwrap();
    assert_eq!(got, f.iter().map(|&v| !key_f64(v)).collect::<Vec<_>>());
}

/// Many regions of one array selected together: against sorting each region.
#[test]
fn gpu_select_regions_matches_sorted_regions() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(2024);
    for (n, seg, nregions, distinct) in [(50_000usize, 1024usize, 300usize, 1u64 << 40), (120_000, 16384, 7, 100), (9_000, 4096, 2000, 5)] {
        let keys: Vec<u64> = (0..n).map(|_| r.random_range(0..distinct)).collect();
        let arr = DeviceArray::upload_segmented(&ctx, &keys, seg).unwrap();
        // Random cut points (some regions empty), covering a prefix of the array.
        let mut cuts: Vec<u64> = (0..nregions - 1).map(|_| r.random_range(0..n as u64 - 100)).collect();
        cuts.push(0);
        cuts.push(n as u64 - 100);
        cuts.sort_unstable();
        let regions: Vec<(u64, u64)> = cuts.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
        let ranks: Vec<Vec<u64>> = regions
            .iter()
            .enumerate()
            .map(|(i, &(_, m))| match (m, i % 3) {
                (0, _) => vec![],
                (m, 0) => vec![(m - 1) / 2, m / 2, 0, m - 1],
                (m, 1) => (0..m.min(150)).map(|j| j * (m - 1) / m.min(150).max(1)).collect(), // more than 64 ranks
                (m, _) => vec![m - 1, m - 1],
            })
            .collect();
        let got = select_regions_gpu::<u64>(&ctx, &arr, &regions, &ranks, &SelectOptions::default()).unwrap();
        for (i, (&(a, m), rs)) in regions.iter().zip(&ranks).enumerate() {
            let mut v = keys[a as usize..(a + m) as usize].to_vec();
            v.sort_unstable();
            let want: Vec<u64> = rs.iter().map(|&x| v[x as usize]).collect();
            assert_eq!(got[i], want, "n {n}, seg {seg}, region {i} of {nregions} ({a}, {m})");
        }
    }
    // A rank past its region is an error, not a panic.
    let arr = DeviceArray::upload(&ctx, &[1u64, 2, 3]).unwrap();
    assert!(select_regions_gpu::<u64>(&ctx, &arr, &[(0, 2)], &[vec![2]], &SelectOptions::default()).is_err());
    assert!(select_regions_gpu::<u64>(&ctx, &arr, &[(0, 2)], &[], &SelectOptions::default()).is_err());
    assert_eq!(select_regions_gpu::<u64>(&ctx, &arr, &[], &[], &SelectOptions::default()).unwrap(), Vec::<Vec<u64>>::new());
}

// ---------------------------------------------------------------------------------
// Bracketing level
// ---------------------------------------------------------------------------------

/// The bracketing first level (key windows around the target ranks from the sorted
/// sample, one counting and copying pass) against the sort reference: every
/// distribution, exact, approximate and top-k, 32- and 64-bit keys, inputs over
/// several segments; and with windows so narrow that they miss or overflow (the
/// call must then fall back to the plain descent and still be exact).
#[test]
fn gpu_select_bracketing_level() {
    let Some(ctx) = test_context() else { return };
    let on = SelectOptions { bracket_min: 0, chain_min: usize::MAX, ..Default::default() };
    let narrow = SelectOptions { bracket_min: 0, chain_min: usize::MAX, bracket_sigmas: 0.0, ..Default::default() };
    let mut bracketed = 0;
    let mut fell_back = 0;
    for &n in &[40_000usize, 100_003] {
        for (name, keys) in datasets_u32(n, 700 + n as u64) {
            let n64 = n as u64;
            let rank_sets: Vec<Vec<u64>> = vec![
                vec![n64 / 2],
                vec![n64 / 4, n64 / 2, 3 * n64 / 4],
                vec![0, n64 - 1],
                vec![n64 / 3, n64 / 3 + 1, n64 / 3 + 17],
                ranks_for(n, 3),
            ];
            for ranks in &rank_sets {
                for (label, opts) in [("on", &on), ("narrow", &narrow)] {
                    let (got, st) = select_gpu(&ctx, Keys::Host(&keys), ranks, opts).unwrap();
                    check_exact(&got, &keys, ranks, &format!("bracket {label} {name}"));
                    if st.algorithm.contains("bracket") {
                        bracketed += 1;
                    } else {
                        fell_back += 1;
                    }
                    if label == "on" && ranks.len() == 1 && (name == "uniform" || name == "sorted" || name == "distinct-1") {
                        assert!(st.algorithm.contains("bracket"), "{name}: the median is bracketed ({})", st.algorithm);
                    }
                }
            }
            // Approximate: within the bound.
            let ranks = vec![n64 / 2, n64 / 10];
            let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys), &ranks, &on).unwrap();
            check_approx(&got, &st, &keys, &ranks, &format!("bracket approx {name}"));
            // Top-k through a bracketed threshold.
            for k in [1usize, 10, 1000, n / 100] {
                let (got, _) = topk_gpu(&ctx, Keys::Host(&keys), k, &on).unwrap();
                assert_eq!(got, topk_reference(&keys, k), "bracket top-{k} {name}");
            }
        }
    }
    assert!(bracketed > 0 && fell_back > 0, "both outcomes seen: {bracketed} bracketed, {fell_back} fell back");
    // 64-bit keys (native and emulated), segmented input.
    let mut r = rng(77);
    let n = 150_001usize;
    let keys64: Vec<u64> = keys_f64(&(0..n).map(|_| normal(&mut r) * 1e6).collect::<Vec<_>>());
    let arr = DeviceArray::upload_segmented(&ctx, &keys64, 32_768).unwrap();
    assert!(arr.num_segments() > 1);
    // Five windows (more than one pass takes): the plain descent; three: bracketed.
    let five = vec![0, n as u64 / 2, n as u64 / 4, 3 * n as u64 / 4, n as u64 - 1];
    let (got, st) = select_gpu::<u64>(&ctx, Keys::Device(&arr, n), &five, &on).unwrap();
    check_exact(&got, &keys64, &five, "bracket u64 five ranks");
    assert!(!st.algorithm.contains("bracket"), "{}", st.algorithm);
    let ranks = vec![0, n as u64 / 2, n as u64 - 1];
    for int64 in [Int64Path::Auto, Int64Path::Emulated] {
        for sig in [SelectOptions::default().bracket_sigmas, 0.0] {
            let opts = SelectOptions { int64, bracket_min: 0, chain_min: usize::MAX, bracket_sigmas: sig, ..Default::default() };
            // One window, then three.
            let (got, _) = select_gpu::<u64>(&ctx, Keys::Device(&arr, n), &ranks[1..2], &opts).unwrap();
            check_exact(&got, &keys64, &ranks[1..2], &format!("bracket u64 median {int64:?} sigmas {sig}"));
            let (got, st) = select_gpu::<u64>(&ctx, Keys::Device(&arr, n), &ranks, &opts).unwrap();
            check_exact(&got, &keys64, &ranks, &format!("bracket u64 {int64:?} sigmas {sig}"));
            if sig > 0.0 {
                assert!(st.algorithm.contains("bracket"), "u64 {int64:?}: {}", st.algorithm);
            }
        }
    }
    let keys32: Vec<u32> = (0..n).map(|_| r.random::<u32>()).collect();
    let arr = DeviceArray::upload_segmented(&ctx, &keys32, 10_000).unwrap();
    let (got, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &on).unwrap();
    check_exact(&got, &keys32, &ranks, "bracket u32 segmented");
    assert!(st.algorithm.contains("bracket"), "{}", st.algorithm);
    assert!(st.device_bytes <= (n as u64 * 4) / 4, "aux {} bytes above a quarter of the input", st.device_bytes);
}

/// Regions large enough for the bracketing level (forced from 0 keys): each large
/// region is bracketed on its own, the windows join one descent with the small
/// regions; also with windows so narrow that some regions fall back.
#[test]
fn gpu_select_regions_bracketed() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(4242);
    let n = 300_000usize;
    for distinct in [1u64 << 40, 50, 1] {
        let keys: Vec<u64> = (0..n).map(|_| r.random_range(0..distinct)).collect();
        let arr = DeviceArray::upload_segmented(&ctx, &keys, 65_536).unwrap();
        // Regions of 100k (spanning segments), 60k, 50k, 1k and 0 keys, and a gap.
        let regions: Vec<(u64, u64)> = vec![(0, 100_000), (100_000, 60_000), (170_000, 50_000), (220_000, 1000), (221_000, 0)];
        let ranks: Vec<Vec<u64>> = vec![vec![50_000], vec![0, 15_000, 30_000, 45_000, 59_999], vec![25_000, 12_500, 37_500], vec![500], vec![]];
        for sig in [SelectOptions::default().bracket_sigmas, 0.0] {
            let opts = SelectOptions { bracket_min: 0, bracket_sigmas: sig, ..Default::default() };
            let before = bracketed_total();
            let got = select_regions_gpu::<u64>(&ctx, &arr, &regions, &ranks, &opts).unwrap();
            if sig > 0.0 {
                // Regions 0 and 2 (one and three ranks) are bracketed; 1 has five
                // windows, 3 is too small. With 50 distinct values the quartile
                // windows of region 2, swollen by ties at their bounds, hold more
                // than a fifth of it, so it runs the plain descent; the median's
                // window of region 0 is copied again at its exact size. With one
                // value, region 2's three windows are the same value (they overlap
                // in key space), so it runs the plain descent too. (Other tests
                // running at the same time can only raise the counter.)
                let want = if distinct == 1 << 40 { 2 } else { 1 };
                assert!(bracketed_total() >= before + want, "distinct {distinct}: regions bracketed ({})", bracketed_total() - before);
            }
            for (i, (&(a, m), rs)) in regions.iter().zip(&ranks).enumerate() {
                let mut v = keys[a as usize..(a + m) as usize].to_vec();
                v.sort_unstable();
                let want: Vec<u64> = rs.iter().map(|&x| v[x as usize]).collect();
                assert_eq!(got[i], want, "distinct {distinct}, sigmas {sig}, region {i} ({a}, {m})");
            }
        }
    }
}

/// The chain (bracketing levels decided on the device, one submission) against the
/// sort reference: medians, neighbouring ranks, the extremes and the top-k
/// threshold over every distribution, sizes that are not a multiple of the
/// workgroup, 32- and 64-bit keys (native and emulated), top-k with and without
/// ties; and with windows so narrow that the sample misses or a window overflows
/// (the call must fall back to the host-driven descent and still be exact).
#[test]
fn gpu_select_chain() {
    let Some(ctx) = test_context() else { return };
    let on = SelectOptions { chain_min: 0, ..Default::default() };
    let half = SelectOptions { chain_min: 0, bracket_sigmas: 0.5, ..Default::default() };
    let narrow = SelectOptions { chain_min: 0, bracket_sigmas: 0.0, ..Default::default() };
    let (mut chained, mut fell_back) = (0, 0);
    for &n in &[9_000usize, 70_001, 300_007] {
        for (name, keys) in datasets_u32(n, 900 + n as u64) {
            let n64 = n as u64;
            let rank_sets: Vec<Vec<u64>> =
                vec![vec![n64 / 2], vec![(n64 - 1) / 2, n64 / 2], vec![0], vec![n64 - 1], vec![n64 / 3 + 17, n64 / 3, n64 / 3 + 64]];
            for ranks in &rank_sets {
                for (label, opts) in [("on", &on), ("half", &half), ("narrow", &narrow)] {
                    let (got, st) = select_gpu(&ctx, Keys::Host(&keys), ranks, opts).unwrap();
                    check_exact(&got, &keys, ranks, &format!("chain {label} {name} {ranks:?}"));
                    if st.algorithm.contains("chain") {
                        chained += 1;
                    } else {
                        fell_back += 1;
                    }
                    // (With one value, a window open at an end holds every key: the
                    // extreme ranks overflow and fall back.)
                    let inner = ranks.iter().all(|&r| r > 0 && r < n64 - 1);
                    if label == "on" && (name == "uniform" || name == "sorted" || (name == "distinct-1" && inner)) {
                        assert!(st.algorithm.contains("chain"), "{name} {ranks:?}: the chain answers ({})", st.algorithm);
                    }
                }
            }
            for k in [1usize, 10, 100, 1000, 2000] {
                for (label, opts) in [("on", &on), ("narrow", &narrow)] {
                    let (got, st) = topk_gpu(&ctx, Keys::Host(&keys), k, opts).unwrap();
                    assert_eq!(got, topk_reference(&keys, k), "chain top-{k} {label} {name}");
                    if label == "on" && k <= 1000 && name == "uniform" {
                        assert!(st.algorithm.contains("chain"), "top-{k}: the chain answers ({})", st.algorithm);
                    }
                }
                let emu = SelectOptions { int64: Int64Path::Emulated, ..on };
                let (got, _) = topk_gpu(&ctx, Keys::Host(&keys), k, &emu).unwrap();
                assert_eq!(got, topk_reference(&keys, k), "chain top-{k} emulated {name}");
            }
        }
    }
    assert!(chained > 0 && fell_back > 0, "both outcomes seen: {chained} chained, {fell_back} fell back");
    // Approximate calls of one narrow rank range take the chain (exact answers).
    let keys: Vec<u32> = datasets_u32(70_001, 5).remove(1).1;
    let ranks = vec![35_000u64, 35_001];
    let on_exact = SelectOptions { approx_hist_min: usize::MAX, ..on };
    let (got, st) = approx_select_gpu(&ctx, Keys::Host(&keys), &ranks, &on_exact).unwrap();
    check_exact(&got, &keys, &ranks, "approx through the chain");
    assert!(st.algorithm.contains("chain") && st.rank_error_bound == 0, "{} bound {}", st.algorithm, st.rank_error_bound);
    // Top-k with ties (every key equal to the threshold comes along): through the
    // chain where the last window's bound lies above the threshold's key.
    let mut r = rng(91);
    for distinct in [3u32, 1000, u32::MAX] {
        let n = 100_003usize;
        let keys: Vec<u32> = (0..n).map(|_| r.random_range(0..distinct)).collect();
        let arr = DeviceArray::upload(&ctx, &keys).unwrap();
        for k in [1usize, 77, 1000] {
            let (got, st) = topk_ties_gpu::<u32>(&ctx, Keys::Device(&arr, n), k, &on).unwrap();
            if distinct == u32::MAX {
                assert!(st.algorithm.contains("chain"), "ties top-{k}: {}", st.algorithm);
            }
            let mut sorted = keys.clone();
            sorted.sort_unstable();
            let t = sorted[k - 1];
            let want: Vec<u32> = (0..n as u32).filter(|&i| keys[i as usize] <= t).collect();
            assert_eq!(got, want, "ties top-{k}, {distinct} distinct");
        }
    }
    // 64-bit keys, native (where the adapter has it) and emulated; segmented inputs
    // (the first level runs per segment; top-k rows count across segments).
    let n = 200_001usize;
    let keys64: Vec<u64> = keys_f64(&(0..n).map(|_| normal(&mut r) * 1e6).collect::<Vec<_>>());
    let ranks = vec![n as u64 / 2, n as u64 / 2 + 1];
    for int64 in [Int64Path::Auto, Int64Path::Emulated] {
        let opts = SelectOptions { int64, ..on };
        let (got, st) = select_gpu::<u64>(&ctx, Keys::Host(&keys64), &ranks, &opts).unwrap();
        check_exact(&got, &keys64, &ranks, &format!("chain u64 {int64:?}"));
        assert!(st.algorithm.contains("chain"), "u64 {int64:?}: {}", st.algorithm);
    }
    let arr = DeviceArray::upload_segmented(&ctx, &keys64, 65_536).unwrap();
    let (got, st) = select_gpu::<u64>(&ctx, Keys::Device(&arr, n), &ranks, &on).unwrap();
    check_exact(&got, &keys64, &ranks, "chain u64 segmented");
    assert!(st.algorithm.contains("chain"), "{}", st.algorithm);
    let keys32: Vec<u32> = (0..n).map(|i| r.random_range(0..5000u32) + (i % 7 == 0) as u32 * 9).collect();
    let arr = DeviceArray::upload_segmented(&ctx, &keys32, 30_004).unwrap();
    for k in [1usize, 300, 1500] {
        let (got, st) = topk_gpu::<u32>(&ctx, Keys::Device(&arr, n), k, &on).unwrap();
        assert_eq!(got, topk_reference(&keys32, k), "chain top-{k} segmented");
        assert!(st.algorithm.contains("chain"), "{}", st.algorithm);
    }
    let ranks = vec![n as u64 / 3];
    let (got, _) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &ranks, &on).unwrap();
    check_exact(&got, &keys32, &ranks, "chain u32 segmented");
}
