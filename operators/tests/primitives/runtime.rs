//! The GPU runtime against host data: staged transfers, segmentation at the binding
//! limit, the copy kernel, the buffer pool and its budget, typed errors.
use rand::{Rng, SeedableRng};
use ridgeline_operators::array::copy_elements;
use ridgeline_operators::pool::size_class;
use ridgeline_operators::testing::test_context;
use ridgeline_operators::{DeviceArray, GpuError};

fn rand_u32(n: usize, seed: u64) -> Vec<u32> {
    let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n).map(|_| r.random()).collect()
}

#[test]
fn round_trip_edge_sizes() {
    let Some(ctx) = test_context() else { return };
    for n in [0usize, 1, 2, 3, 255, 256, 257, 1023, 1025, 4095, 4097, 100_003] {
        let v = rand_u32(n, n as u64);
        let d = DeviceArray::upload(&ctx, &v).unwrap();
        assert_eq!(d.len(), n);
        assert!(d.download::<u32>(&ctx).unwrap() == v, "u32 n={n}");
        let w: Vec<u64> = v.iter().map(|&x| (x as u64) << 29 ^ 0xdead_beef_0000_0001).collect();
        let d = DeviceArray::upload(&ctx, &w).unwrap();
        assert!(d.download::<u64>(&ctx).unwrap() == w, "u64 n={n}");
    }
}

#[test]
fn small_segments_split_and_join() {
    let Some(ctx) = test_context() else { return };
    for (n, seg) in [(10_000usize, 4096usize), (4096, 4096), (4097, 4096), (12_345, 1024), (5, 4)] {
        let v = rand_u32(n, 7);
        let d = DeviceArray::upload_segmented(&ctx, &v, seg).unwrap();
        assert_eq!(d.num_segments(), n.div_ceil(seg));
        assert!(d.download::<u32>(&ctx).unwrap() == v);
        let e = d.duplicate(&ctx).unwrap();
        assert!(e.download::<u32>(&ctx).unwrap() == v);
    }
}

#[test]
fn copy_kernel_unaligned_ranges_across_segments() {
    let Some(ctx) = test_context() else { return };
    let src: Vec<u32> = (0..20_000u32).collect();
    let s = DeviceArray::upload_segmented(&ctx, &src, 4096).unwrap();
    let d = DeviceArray::upload_segmented(&ctx, &vec![u32::MAX; 30_000], 1000).unwrap();
    // word-aligned but not vec4-aligned offsets and lengths, crossing segments
    copy_elements(&ctx, &s, 3, &d, 998, 12_347).unwrap();
    let got = d.download::<u32>(&ctx).unwrap();
    for (i, &g) in got.iter().enumerate() {
        let want = if (998..998 + 12_347).contains(&i) { (i - 998 + 3) as u32 } else { u32::MAX };
        assert_eq!(g, want, "index {i}");
    }
    // 8-byte elements
    let s64: Vec<i64> = (0..9_000).map(|i| -(i as i64) * 1_000_000_007).collect();
    let a = DeviceArray::upload_segmented(&ctx, &s64, 4096).unwrap();
    let b = DeviceArray::upload_segmented(&ctx, &vec![0i64; 9_000], 2048).unwrap();
    copy_elements(&ctx, &a, 1, &b, 2, 8_997).unwrap();
    let got = b.download::<i64>(&ctx).unwrap();
    assert!(got[2..8_999] == s64[1..8_998], "i64 copy differs");
    assert_eq!((got[0], got[1], got[8_999]), (0, 0, 0));
    // bad ranges are errors, not panics
    assert!(matches!(copy_elements(&ctx, &a, 9_000, &b, 0, 1), Err(GpuError::Invalid(_))));
    assert!(matches!(copy_elements(&ctx, &s, 0, &a, 0, 1), Err(GpuError::Invalid(_))));
}

#[test]
fn timed_copy_of_several_arrays() {
    let Some(ctx) = test_context() else { return };
    // several segments, a length that is not a multiple of 4 words, 8-byte elements
    let a: Vec<u32> = rand_u32(10_007, 3);
    let b: Vec<u64> = (0..5_001u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    let (sa, sb) = (DeviceArray::upload_segmented(&ctx, &a, 4096).unwrap(), DeviceArray::upload_segmented(&ctx, &b, 1024).unwrap());
    let da = DeviceArray::alloc_segmented(&ctx, a.len(), 4, 4096).unwrap();
    let db = DeviceArray::alloc_segmented(&ctx, b.len(), 8, 1024).unwrap();
    let timer = ridgeline_operators::timing::KernelTimer::new(&ctx, 1);
    ridgeline_operators::array::copy_arrays_timed(&ctx, &[(&sa, &da), (&sb, &db)], timer.as_ref()).unwrap();
    if let Some(t) = &timer {
        assert!(t.read_ms(&ctx).unwrap()[0] >= 0.0);
    }
    assert!(da.download::<u32>(&ctx).unwrap() == a);
    assert!(db.download::<u64>(&ctx).unwrap() == b);
    // a length mismatch is an error
    let short = DeviceArray::alloc_segmented(&ctx, 10, 4, 4096).unwrap();
    assert!(matches!(ridgeline_operators::array::copy_arrays_timed(&ctx, &[(&sa, &short)], None), Err(GpuError::Invalid(_))));
}

#[test]
fn above_the_binding_limit() {
    let Some(ctx) = test_context() else { return };
    let limit = ctx.limits().max_storage_buffer_binding_size as usize;
    if limit > (512 << 20) {
        eprintln!("binding limit {limit} too large to exceed in a test on this adapter; covered with small segments");
        return;
    }
    // One u32 more than a whole binding, and a u64 array twice the binding.
    let n = limit / 4 + 1;
    let v: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let d = DeviceArray::upload(&ctx, &v).unwrap();
    assert!(d.num_segments() >= 2);
    for i in 0..d.num_segments() {
        let (_, _, rows) = d.segment(i);
        assert!((rows * 4) as u64 <= limit as u64);
    }
    let back = d.download::<u32>(&ctx).unwrap();
    assert!(back == v, "round trip above the binding limit differs");
    let dup = d.duplicate(&ctx).unwrap();
    assert!(dup.download::<u32>(&ctx).unwrap() == v);
    drop((d, dup, back));
    let w: Vec<u64> = (0..(limit / 4) as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
    let d = DeviceArray::upload(&ctx, &w).unwrap();
    assert!(d.num_segments() >= 2);
    assert!(d.download::<u64>(&ctx).unwrap() == w);
}

#[test]
fn pool_reuses_by_size_class_and_enforces_budget() {
    let Some(ctx) = test_context() else { return };
    // A private pool view: use the global pool but measure deltas.
    let pool = ctx.pool();
    let a = pool.alloc(1000).unwrap();
    assert_eq!(a.size(), size_class(1000));
    let before = pool.stats();
    drop(a);
    let b = pool.alloc(900).unwrap(); // same class (1024)
    let after = pool.stats();
    assert_eq!(b.size(), 1024);
    assert!(after.reused > before.reused, "{before:?} -> {after:?}");
    drop(b);
    let budget = pool.budget();
    match pool.alloc(budget + 1) {
        Err(GpuError::BudgetExceeded { .. }) | Err(GpuError::Invalid(_)) => {}
        other => panic!("expected a budget error, got {other:?}"),
    }
    assert!(!pool.fits(budget + 1));
}

#[test]
fn invalid_requests_are_errors() {
    let Some(ctx) = test_context() else { return };
    assert!(matches!(DeviceArray::alloc(&ctx, 10, 3), Err(GpuError::Invalid(_))));
    assert!(matches!(DeviceArray::alloc_segmented(&ctx, 10, 4, 0), Err(GpuError::Invalid(_))));
    let d = DeviceArray::upload(&ctx, &[1u32, 2, 3]).unwrap();
    assert!(matches!(d.download::<u64>(&ctx), Err(GpuError::Invalid(_))));
    let bad = ctx.pipeline("broken", "@compute @workgroup_size(1) fn main() { let x: u32 = 1.5; }", "main", &[]);
    assert!(matches!(bad, Err(GpuError::Shader { .. })), "{bad:?}");
    ctx.check().unwrap();
}

#[test]
fn kernel_timer_measures_when_available() {
    let Some(ctx) = test_context() else { return };
    let Some(timer) = ridgeline_operators::timing::KernelTimer::new(&ctx, 1) else {
        eprintln!("adapter has no timestamp queries");
        return;
    };
    let p = ctx
        .pipeline("spin", "@group(0) @binding(0) var<storage, read_write> a: array<u32>;\n@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) g: vec3<u32>) { if (g.x < arrayLength(&a)) { a[g.x] = a[g.x] * 3u + 1u; } }", "main", &[])
        .unwrap();
    let d = DeviceArray::upload(&ctx, &vec![1u32; 1 << 16]).unwrap();
    let (buf, _, _) = d.segment(0);
    let bg = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: None,
        layout: &p.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry { binding: 0, resource: buf.as_entire_binding() }],
    });
    let mut enc = ctx.encoder("t");
    {
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: timer.writes(0) });
        pass.set_pipeline(&p);
        pass.set_bind_group(0, &bg, &[]);
        pass.dispatch_workgroups((1 << 16) / 64, 1, 1);
    }
    timer.resolve(&mut enc);
    ctx.submit(enc).unwrap();
    let ms = timer.read_ms(&ctx).unwrap();
    assert_eq!(ms.len(), 1);
    assert!(ms[0] >= 0.0 && ms[0] < 10_000.0, "{ms:?}");
    // pool size class rounding means the buffer may be larger than the data; only the first 2^16 matter
    let back = d.download::<u32>(&ctx).unwrap();
    assert!(back.iter().all(|&x| x == 4));
}

/// Waits that poll the device (and fall back to blocking) give the results that
/// blocking waits give: transfers and a selection on contexts of each mode.
#[test]
fn spinning_and_blocking_waits_agree() {
    use ridgeline_operators::context::{ContextOptions, WaitMode};
    use ridgeline_operators::select::{select_cpu, select_gpu, Keys, SelectOptions};
    use std::time::Duration;
    if test_context().is_none() {
        return;
    }
    let v = rand_u32(300_007, 9);
    let ranks = [0u64, 150_003, 300_006];
    let want = select_cpu(&v, &ranks);
    for wait in [WaitMode::Block, WaitMode::Spin(Duration::ZERO), WaitMode::Spin(Duration::from_millis(50))] {
        let opts = ContextOptions { wait: Some(wait), ..ContextOptions::from_env() };
        let ctx = ridgeline_operators::GpuContext::new(&opts).unwrap();
        let d = DeviceArray::upload(&ctx, &v).unwrap();
        assert!(d.download::<u32>(&ctx).unwrap() == v, "{wait:?}: round trip");
        let (got, _) = select_gpu::<u32>(&ctx, Keys::Device(&d, v.len()), &ranks, &SelectOptions::default()).unwrap();
        assert_eq!(got, want, "{wait:?}: selection");
        ctx.wait().unwrap();
    }
}
