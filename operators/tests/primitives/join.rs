//! The hash join's primitives (`build_table_gpu`, `probe_gpu`,
//! `probe_matched_gpu`, `HostJoinTable`) against the reference: random,
//! adversarial and edge inputs (empty sides, one row, all NULL keys, one key
//! repeated, many-to-many, keys at the type extremes, sizes off the workgroup,
//! probe columns split into segments and above the binding limit, a probe range
//! split because its pairs exceed the output limit).
use rand::Rng;
use ridgeline_operators::join::{
    build_table_gpu, join_reference, matched_reference, probe_gpu, probe_matched_gpu, HostJoinTable, JoinOptions, KeyColumn, KeyWidth, Keys,
};
use ridgeline_operators::testing::test_context;
use ridgeline_operators::{DeviceArray, GpuContext};

use crate::common::{bits_of, rng};

/// A key column in host memory: values as `width` and NULLs.
struct Side {
    keys: Vec<i64>,
    valid: Option<Vec<bool>>,
}

impl Side {
    fn new(keys: Vec<i64>, valid: Option<Vec<bool>>) -> Side {
        Side { keys, valid }
    }
    fn opts(&self) -> Vec<Option<i64>> {
        self.keys.iter().enumerate().map(|(i, &k)| self.valid.as_ref().is_none_or(|v| v[i]).then_some(k)).collect()
    }
    fn upload(&self, ctx: &GpuContext, width: KeyWidth, seg: usize) -> (DeviceArray, Option<DeviceArray>) {
        let k = &self.keys;
        let d = match width {
            KeyWidth::I64 => DeviceArray::upload_segmented(ctx, k, seg),
            KeyWidth::I32 => DeviceArray::upload_segmented(ctx, &k.iter().map(|&v| v as i32).collect::<Vec<_>>(), seg),
            KeyWidth::U32 => DeviceArray::upload_segmented(ctx, &k.iter().map(|&v| v as u32).collect::<Vec<_>>(), seg),
        }
        .unwrap();
        let v = self.valid.as_ref().map(|v| DeviceArray::upload_segmented(ctx, &bits_of(v), (seg / 32).max(4)).unwrap());
        (d, v)
    }
    /// The keys narrowed to `width`, for the host table.
    fn narrowed(&self, width: KeyWidth) -> (Vec<i64>, Vec<i32>, Vec<u32>) {
        match width {
            KeyWidth::I64 => (self.keys.clone(), vec![], vec![]),
            KeyWidth::I32 => (vec![], self.keys.iter().map(|&v| v as i32).collect(), vec![]),
            KeyWidth::U32 => (vec![], vec![], self.keys.iter().map(|&v| v as u32).collect()),
        }
    }
}

fn host_keys<'a>(width: KeyWidth, n: &'a (Vec<i64>, Vec<i32>, Vec<u32>)) -> Keys<'a> {
    match width {
        KeyWidth::I64 => Keys::I64(&n.0),
        KeyWidth::I32 => Keys::I32(&n.1),
        KeyWidth::U32 => Keys::U32(&n.2),
    }
}

/// The keys as the reference sees them after narrowing to `width`.
fn as_width(s: &Side, width: KeyWidth) -> Vec<Option<i64>> {
    s.opts()
        .into_iter()
        .map(|k| {
            k.map(|v| match width {
                KeyWidth::I64 => v,
                KeyWidth::I32 => v as i32 as i64,
                KeyWidth::U32 => v as u32 as i64,
            })
        })
        .collect()
}

/// Joins `build` and `probe` on the CPU fast path and (with a context) the GPU,
/// probe segments of `seg` rows, and checks both against the reference.
fn check(ctx: Option<&GpuContext>, build: &Side, probe: &Side, width: KeyWidth, seg: usize, opts: &JoinOptions, what: &str) {
    let want = join_reference(&as_width(build, width), &as_width(probe, width));
    let want_bits = matched_reference(&as_width(build, width), &as_width(probe, width));
    // CPU fast path
    let (bn, pn) = (build.narrowed(width), probe.narrowed(width));
    let bv = build.valid.as_deref().map(bits_of);
    let pv = probe.valid.as_deref().map(bits_of);
    let table = HostJoinTable::build(host_keys(width, &bn), bv.as_deref());
    let (p, b) = table.probe(host_keys(width, &pn), pv.as_deref());
    let got: Vec<(u32, u32)> = p.into_iter().zip(b).collect();
    assert!(got == want, "{what}: CPU pairs differ ({} vs {} pairs)", got.len(), want.len());
    let m = table.matched(host_keys(width, &pn), pv.as_deref());
    assert!((0..want_bits.len()).all(|i| ((m[i / 32] >> (i % 32)) & 1 == 1) == want_bits[i]), "{what}: CPU matched bits differ");
    let Some(ctx) = ctx else { return };
    // GPU: the build side in one segment, the probe side in segments of `seg`
    let (bk, bvd) = build.upload(ctx, width, ctx.segment_rows());
    let (pk, pvd) = probe.upload(ctx, width, seg);
    let bcol = KeyColumn { keys: &bk, width, validity: bvd.as_ref(), rows: build.keys.len() };
    let pcol = KeyColumn { keys: &pk, width, validity: pvd.as_ref(), rows: probe.keys.len() };
    let t = build_table_gpu(ctx, &bcol, opts).unwrap();
    assert!(t.buckets().is_power_of_two(), "{what}: buckets");
    let parts = probe_gpu(ctx, &t, &pcol, opts).unwrap();
    let mut got = Vec::with_capacity(want.len());
    for part in &parts {
        let (p, b) = part.download(ctx).unwrap();
        got.extend(p.into_iter().zip(b));
    }
    assert!(got.len() == want.len(), "{what}: GPU gives {} pairs, reference {}", got.len(), want.len());
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}: GPU pair {i} is {:?}, reference {:?}", got[i], want[i]);
    }
    let bits: Vec<u32> = probe_matched_gpu(ctx, &t, &pcol, opts).unwrap().download(ctx).unwrap();
    for (i, &w) in want_bits.iter().enumerate() {
        assert_eq!((bits[i / 32] >> (i % 32)) & 1 == 1, w, "{what}: GPU matched bit {i}");
    }
    let n = probe.keys.len();
    if n % 32 != 0 && n > 0 {
        assert_eq!(bits[n / 32] >> (n % 32), 0, "{what}: matched bits past the end");
    }
}

fn all_widths(ctx: Option<&GpuContext>, build: &Side, probe: &Side, seg: usize, what: &str) {
    for width in [KeyWidth::I64, KeyWidth::I32, KeyWidth::U32] {
        check(ctx, build, probe, width, seg, &JoinOptions::default(), &format!("{what} {width:?}"));
    }
}

#[test]
fn join_random_sizes_and_nulls() {
    let ctx = test_context();
    let ctx = ctx.as_deref();
    let seg = ctx.map_or(1 << 20, |c| c.segment_rows());
    let mut r = rng(5);
    for &(nb, np) in &[(1usize, 1usize), (1, 1000), (1000, 1), (255, 257), (256, 256), (3000, 8193), (20_000, 50_001), (70_000, 10_000)] {
        let build = Side::new((0..nb).map(|_| r.random_range(-2000..6000)).collect(), None);
        let probe = Side::new((0..np).map(|_| r.random_range(-3000..7000)).collect(), None);
        all_widths(ctx, &build, &probe, seg, &format!("random {nb}x{np}"));
        let bnull = Side::new(build.keys.clone(), Some((0..nb).map(|_| r.random_bool(0.8)).collect()));
        let pnull = Side::new(probe.keys.clone(), Some((0..np).map(|_| r.random_bool(0.7)).collect()));
        all_widths(ctx, &bnull, &pnull, seg, &format!("nullable {nb}x{np}"));
    }
}

#[test]
fn join_edges() {
    let ctx = test_context();
    let ctx = ctx.as_deref();
    let seg = ctx.map_or(1 << 20, |c| c.segment_rows());
    let some = Side::new((0..100).collect(), None);
    let empty = Side::new(vec![], None);
    all_widths(ctx, &empty, &some, seg, "empty build");
    all_widths(ctx, &some, &empty, seg, "empty probe");
    all_widths(ctx, &empty, &empty, seg, "both empty");
    // all NULL on either side: no pairs, even where the key values are equal
    let nulls = Side::new(vec![7; 500], Some(vec![false; 500]));
    let sevens = Side::new(vec![7; 300], None);
    all_widths(ctx, &nulls, &sevens, seg, "all-NULL build");
    all_widths(ctx, &sevens, &nulls, seg, "all-NULL probe");
    all_widths(ctx, &nulls, &nulls, seg, "all-NULL both");
    // all equal keys: every probe row matches every build row (many-to-many)
    all_widths(ctx, &Side::new(vec![3; 300], None), &Side::new(vec![3; 257], None), seg, "all equal");
    // keys at the type extremes and values that alias under truncation
    let ext = vec![i64::MIN, i64::MAX, -1, 0, 1, i32::MIN as i64, i32::MAX as i64, u32::MAX as i64, 1 << 32, -(1 << 32), (1 << 32) + 1];
    let probe: Vec<i64> = ext.iter().chain(ext.iter()).copied().chain([2, -2, (1 << 33) - 1]).collect();
    all_widths(ctx, &Side::new(ext.clone(), None), &Side::new(probe, None), seg, "extremes");
    // unique dense build keys (a dimension's primary key) and a fact-table probe
    let mut r = rng(9);
    let dim = Side::new((1..=10_000).collect(), None);
    let fact = Side::new((0..100_003).map(|_| r.random_range(-5..10_010)).collect(), None);
    all_widths(ctx, &dim, &fact, seg, "primary key");
}

#[test]
fn join_one_key_repeated() {
    let ctx = test_context();
    let ctx = ctx.as_deref();
    let seg = ctx.map_or(1 << 20, |c| c.segment_rows());
    // one build key 10^6 times; probe rows with it, beside it and NULL
    let build = Side::new(vec![42; 1_000_000], None);
    let probe = Side::new(vec![41, 42, 43, 42, 0], Some(vec![true, true, true, true, false]));
    check(ctx, &build, &probe, KeyWidth::I64, seg, &JoinOptions::default(), "one key 10^6 times");
}

#[test]
fn join_split_segments_and_ranges() {
    let Some(ctx) = test_context() else { return };
    let mut r = rng(13);
    let build = Side::new((0..2000).map(|_| r.random_range(0..1500)).collect(), Some((0..2000).map(|i| i % 9 != 0).collect()));
    for &(n, seg) in &[(1000usize, 128usize), (4097, 256), (12_345, 1024), (129, 128)] {
        let probe = Side::new((0..n).map(|_| r.random_range(-10..1510)).collect(), Some((0..n).map(|i| i % 7 != 3).collect()));
        for width in [KeyWidth::I64, KeyWidth::I32] {
            check(Some(&ctx), &build, &probe, width, seg, &JoinOptions::default(), &format!("n={n} seg={seg} {width:?}"));
        }
    }
    // the pairs of one range exceed the output limit: the range is halved until they fit
    let probe = Side::new((0..5000).map(|_| r.random_range(0..1500)).collect(), None);
    let small = JoinOptions { max_pairs: Some(777), ..Default::default() };
    check(Some(&ctx), &build, &probe, KeyWidth::I64, ctx.segment_rows(), &small, "split by output limit");
    // a guess of one pair a row, short for a many-to-many probe: the write pass runs again
    let dup = Side::new((0..4000).map(|i| i % 10).collect(), None);
    check(Some(&ctx), &dup, &probe, KeyWidth::I32, ctx.segment_rows(), &JoinOptions::default(), "guess too small");
    // one probe row with more matches than the limit: a clear error, not a wrong answer
    let (bk, _) = Side::new(vec![1; 100], None).upload(&ctx, KeyWidth::I64, ctx.segment_rows());
    let (pk, _) = Side::new(vec![1], None).upload(&ctx, KeyWidth::I64, ctx.segment_rows());
    let t = build_table_gpu(&ctx, &KeyColumn { keys: &bk, width: KeyWidth::I64, validity: None, rows: 100 }, &JoinOptions::default()).unwrap();
    let tiny = JoinOptions { max_pairs: Some(10), ..Default::default() };
    let e = probe_gpu(&ctx, &t, &KeyColumn { keys: &pk, width: KeyWidth::I64, validity: None, rows: 1 }, &tiny).unwrap_err();
    assert!(e.to_string().contains("matches 100 build rows"), "{e}");
}

#[test]
fn join_probe_above_the_binding_limit() {
    let Some(ctx) = test_context() else { return };
    // more 8-byte probe keys than one segment (one binding) holds
    let Some(n) = crate::common::rows_past_one_segment(&ctx) else { return };
    let probe: Vec<i64> = (0..n as u64).map(|i| (i.wrapping_mul(2_654_435_761) % 3_000_000) as i64).collect();
    let build: Vec<i64> = (0..200_000).map(|i| i * 7 + 11).collect();
    let pk = DeviceArray::upload(&ctx, &probe).unwrap();
    assert!(pk.num_segments() >= 2);
    let bk = DeviceArray::upload(&ctx, &build).unwrap();
    let opts = JoinOptions::default();
    let t = build_table_gpu(&ctx, &KeyColumn { keys: &bk, width: KeyWidth::I64, validity: None, rows: build.len() }, &opts).unwrap();
    let pcol = KeyColumn { keys: &pk, width: KeyWidth::I64, validity: None, rows: n };
    let mut got_p = Vec::new();
    for part in probe_gpu(&ctx, &t, &pcol, &opts).unwrap() {
        got_p.extend(part.download(&ctx).unwrap().0);
    }
    let host = HostJoinTable::build(Keys::I64(&build), None);
    let (want_p, _) = host.probe(Keys::I64(&probe), None);
    assert!(got_p == want_p, "probe rows above the binding limit differ ({} vs {})", got_p.len(), want_p.len());
    assert!(!want_p.is_empty() && want_p.len() < n);
}

#[test]
fn join_build_above_one_binding_is_refused() {
    let Some(ctx) = test_context() else { return };
    let keys: Vec<i64> = (0..1000).collect();
    let d = DeviceArray::upload_segmented(&ctx, &keys, 256).unwrap();
    let e = build_table_gpu(&ctx, &KeyColumn { keys: &d, width: KeyWidth::I64, validity: None, rows: 1000 }, &JoinOptions::default()).unwrap_err();
    assert!(e.to_string().contains("exceeds one binding"), "{e}");
}
