use super::cache::{count_cpu_list, parse_cache_size};
use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::fmt::Debug;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Number of predecessor sums computed by a waiting worker (stealing), all tests.
pub(super) static STEALS: AtomicUsize = AtomicUsize::new(0);

/// Every kernel level this machine can run.
fn levels() -> Vec<Level> {
    let mut v = vec![Level::Scalar];
    #[cfg(target_arch = "x86_64")]
    {
        v.push(Level::Sse2);
        if std::arch::is_x86_feature_detected!("avx2") {
            v.push(Level::Avx2);
        }
    }
    v
}

/// Configurations for an input of `n` elements of `size` bytes: one single-threaded
/// configuration, then 2, 3 and 8 threads with tiny partitions (forcing many
/// partitions and the parallel path even for small inputs) and the default size.
/// Configurations that would take the single-threaded path anyway, or give more than
/// 2048 partitions (slow in debug builds), are left out.
fn configs(n: usize, size: usize) -> Vec<ScanConfig> {
    let mut out = vec![ScanConfig {
        threads: 1,
        partition_bytes: 64,
        ..ScanConfig::default()
    }];
    for threads in [2, 3, 8] {
        for part_bytes in [size, 3 * size, 64, 200, 4096, default_partition_bytes()] {
            let cfg = ScanConfig {
                threads,
                partition_bytes: part_bytes,
                ..ScanConfig::default()
            };
            let parts = n.div_ceil(cfg.partition_elems(size));
            if (MIN_PARALLEL_PARTITIONS..=2048).contains(&parts) {
                out.push(cfg);
            }
        }
    }
    out
}

/// Checks every fast-path variant against the sequential reference, bit for bit.
fn check_exact<T: ScanElem + PartialEq + Debug>(data: &[T]) {
    let n = data.len();
    let mut incl_ref = vec![T::ZERO; n];
    let mut excl_ref = vec![T::ZERO; n];
    scan(data, &mut incl_ref, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    let total_ref = scan(data, &mut excl_ref, &ScanConfig::sequential(ScanKind::Exclusive)).unwrap();

    // The in-place references agree with the out-of-place ones.
    let mut buf = data.to_vec();
    scan_in_place(&mut buf, &ScanConfig::sequential(ScanKind::Inclusive));
    assert_eq!(buf, incl_ref, "inclusive_scan_seq_in_place n={n}");
    let mut buf = data.to_vec();
    assert_eq!(scan_in_place(&mut buf, &ScanConfig::sequential(ScanKind::Exclusive)), total_ref);
    assert_eq!(buf, excl_ref, "exclusive_scan_seq_in_place n={n}");
    if n > 0 {
        assert_eq!(*incl_ref.last().unwrap(), total_ref);
    }

    let size = std::mem::size_of::<T>();
    for level in levels() {
        for cfg in configs(n, size) {
            let ctx = format!("n={n} level={level:?} cfg={cfg:?}");
            let mut out = vec![T::ZERO; n];
            scan_out_of_place(&cfg, level, ScanKind::Inclusive, data, &mut out);
            assert_eq!(out, incl_ref, "inclusive out-of-place {ctx}");

            let mut out = vec![T::ZERO; n];
            let total = scan_out_of_place(&cfg, level, ScanKind::Exclusive, data, &mut out);
            assert_eq!(out, excl_ref, "exclusive out-of-place {ctx}");
            assert_eq!(total, total_ref, "exclusive total {ctx}");

            let mut buf = data.to_vec();
            scan_in_place_fast(&cfg, level, ScanKind::Inclusive, &mut buf);
            assert_eq!(buf, incl_ref, "inclusive in-place {ctx}");

            let mut buf = data.to_vec();
            let total = scan_in_place_fast(&cfg, level, ScanKind::Exclusive, &mut buf);
            assert_eq!(buf, excl_ref, "exclusive in-place {ctx}");
            assert_eq!(total, total_ref, "exclusive in-place total {ctx}");

            // Streaming stores, and stealing predecessors' pass one whenever it is
            // not published yet.
            let tuning = Tuning {
                stream: true,
                eager_steal: true,
            };
            let mut out = vec![T::ZERO; n];
            scan_out_of_place_tuned(&cfg, level, ScanKind::Inclusive, data, &mut out, tuning);
            assert_eq!(out, incl_ref, "inclusive streaming/stealing {ctx}");
            let mut out = vec![T::ZERO; n];
            let total =
                scan_out_of_place_tuned(&cfg, level, ScanKind::Exclusive, data, &mut out, tuning);
            assert_eq!(out, excl_ref, "exclusive streaming/stealing {ctx}");
            assert_eq!(total, total_ref, "exclusive streaming/stealing total {ctx}");
            let mut buf = data.to_vec();
            let total = scan_in_place_tuned(&cfg, level, ScanKind::Exclusive, &mut buf, tuning);
            assert_eq!(buf, excl_ref, "exclusive in-place stealing {ctx}");
            assert_eq!(total, total_ref, "exclusive in-place stealing total {ctx}");
            let mut buf = data.to_vec();
            scan_in_place_tuned(&cfg, level, ScanKind::Inclusive, &mut buf, tuning);
            assert_eq!(buf, incl_ref, "inclusive in-place stealing {ctx}");
        }
    }

    // The public entry points (default config, detected level).
    let mut out = vec![T::ZERO; n];
    scan(data, &mut out, &ScanConfig::inclusive()).unwrap();
    assert_eq!(out, incl_ref, "inclusive_scan n={n}");
    let mut out = vec![T::ZERO; n];
    assert_eq!(scan(data, &mut out, &ScanConfig::exclusive()).unwrap(), total_ref);
    assert_eq!(out, excl_ref, "exclusive_scan n={n}");
    let mut buf = data.to_vec();
    scan_in_place(&mut buf, &ScanConfig::inclusive());
    assert_eq!(buf, incl_ref, "inclusive_scan_in_place n={n}");
    let mut buf = data.to_vec();
    assert_eq!(scan_in_place(&mut buf, &ScanConfig::exclusive()), total_ref);
    assert_eq!(buf, excl_ref, "exclusive_scan_in_place n={n}");
    let cfg = ScanConfig {
        threads: 2,
        partition_bytes: 32,
        ..ScanConfig::default()
    };
    let mut out = vec![T::ZERO; n];
    scan(data, &mut out, &cfg).unwrap();
    assert_eq!(out, incl_ref, "inclusive_scan_with n={n}");
    let mut out = vec![T::ZERO; n];
    assert_eq!(
        scan(data, &mut out, &ScanConfig { kind: ScanKind::Exclusive, ..cfg }).unwrap(),
        total_ref
    );
    assert_eq!(out, excl_ref, "exclusive_scan_with n={n}");
    let mut buf = data.to_vec();
    scan_in_place(&mut buf, &cfg);
    assert_eq!(buf, incl_ref, "inclusive_scan_in_place_with n={n}");
    let mut buf = data.to_vec();
    assert_eq!(scan_in_place(&mut buf, &ScanConfig { kind: ScanKind::Exclusive, ..cfg }), total_ref);
    assert_eq!(buf, excl_ref, "exclusive_scan_in_place_with n={n}");
}

/// 0, 1, 2, 3, 7, 8, 9, 2^k - 1, 2^k, 2^k + 1 for several k, and sizes that are not
/// multiples of any SIMD width or partition size.
fn sizes() -> Vec<usize> {
    let mut v = vec![0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65];
    for k in [7, 10, 12, 14, 16] {
        v.extend([(1 << k) - 1, 1 << k, (1 << k) + 1]);
    }
    v.extend([100, 999, 1001, 4099, 12_345, 30_011, 100_003]);
    v
}

fn random_vec<T>(n: usize, seed: u64, mut f: impl FnMut(&mut SmallRng) -> T) -> Vec<T> {
    let mut rng = SmallRng::seed_from_u64(seed);
    (0..n).map(|_| f(&mut rng)).collect()
}

/// Random data, zeros and all-equal inputs of every size.
fn check_type<T: ScanElem + PartialEq + Debug>(
    seed: u64,
    mut gen: impl FnMut(&mut SmallRng) -> T,
    equal: T,
) {
    for (i, n) in sizes().into_iter().enumerate() {
        check_exact(&random_vec(n, seed + i as u64, &mut gen));
    }
    for n in [0, 1, 9, 1000, 4099, 65_537] {
        check_exact(&vec![T::ZERO; n]);
        check_exact(&vec![equal; n]);
    }
}

#[test]
fn u32_random_zeros_equal() {
    check_type::<u32>(1, |r| r.random(), 7);
    // Small values too, so that most prefixes do not wrap.
    check_exact(&random_vec(50_000, 99, |r| r.random_range(0..16u32)));
}

#[test]
fn i32_random_zeros_equal() {
    check_type::<i32>(2, |r| r.random(), -3);
}

#[test]
fn u64_random_zeros_equal() {
    check_type::<u64>(3, |r| r.random(), u64::MAX / 3);
}

#[test]
fn i64_random_zeros_equal() {
    check_type::<i64>(4, |r| r.random(), -1);
}

#[test]
fn usize_isize_random() {
    check_type::<usize>(5, |r| r.random_range(0..1000u64) as usize, 1);
    check_type::<isize>(6, |r| r.random_range(-1000..1000i64) as isize, -1);
}

/// Integer-valued floats: every partial sum is exact (|sum| < 2^24 for f32), so the
/// fast path must match the sequential reference bit for bit despite the different
/// order of additions.
#[test]
fn f32_integer_valued_exact() {
    check_type::<f32>(7, |r| r.random_range(-8i32..=8) as f32, 3.0);
}

#[test]
fn f64_integer_valued_exact() {
    check_type::<f64>(8, |r| r.random_range(-1000i32..=1000) as f64, -5.0);
}

#[test]
fn integer_wrap_around() {
    for n in [1, 2, 7, 8, 9, 63, 64, 65, 1023, 1024, 1025, 10_001] {
        check_exact(&vec![u32::MAX; n]);
        check_exact(&vec![u64::MAX; n]);
        check_exact(&vec![i32::MIN; n]);
        check_exact(&vec![i64::MIN; n]);
        check_exact(&vec![i64::MAX; n]);
        let alt: Vec<i64> = (0..n)
            .map(|i| if i % 2 == 0 { i64::MIN } else { i64::MAX })
            .collect();
        check_exact(&alt);
        let alt: Vec<u32> = (0..n as u32).map(|i| u32::MAX - i).collect();
        check_exact(&alt);
    }
    // Spot values: the wrap happens and is wrapping.
    let mut out = [0u32; 3];
    scan(&[u32::MAX, 2, u32::MAX], &mut out, &ScanConfig::inclusive()).unwrap();
    assert_eq!(out, [u32::MAX, 1, 0]);
    let mut out = [0i64; 3];
    let total = scan(&[i64::MIN, i64::MIN, 5], &mut out, &ScanConfig::exclusive()).unwrap();
    assert_eq!(out, [0, i64::MIN, 0]);
    assert_eq!(total, 5);
}

#[test]
fn known_small_values() {
    let input = [1u32, 2, 3, 4, 5];
    let mut out = [0u32; 5];
    scan(&input, &mut out, &ScanConfig::inclusive()).unwrap();
    assert_eq!(out, [1, 3, 6, 10, 15]);
    assert_eq!(scan(&input, &mut out, &ScanConfig::exclusive()).unwrap(), 15);
    assert_eq!(out, [0, 1, 3, 6, 10]);
    let mut empty: [i64; 0] = [];
    assert_eq!(scan_in_place(&mut empty, &ScanConfig::exclusive()), 0);
    scan_in_place(&mut empty, &ScanConfig::inclusive());
    let mut one = [42.5f64];
    assert_eq!(scan_in_place(&mut one, &ScanConfig::exclusive()), 42.5);
    assert_eq!(one, [0.0]);
}

#[test]
fn length_mismatch_is_an_error_and_leaves_out_untouched() {
    let input = [1u32, 2, 3];
    let expected = ScanLenMismatch {
        input_len: 3,
        output_len: 2,
    };
    let mut out = [9u32; 2];
    assert_eq!(scan(&input, &mut out, &ScanConfig::inclusive()), Err(expected));
    assert_eq!(scan(&input, &mut out, &ScanConfig::exclusive()), Err(expected));
    assert_eq!(scan(&input, &mut out, &ScanConfig::sequential(ScanKind::Inclusive)), Err(expected));
    assert_eq!(scan(&input, &mut out, &ScanConfig::sequential(ScanKind::Exclusive)), Err(expected));
    let cfg = ScanConfig::default().with_threads(2);
    assert_eq!(scan(&input, &mut out, &cfg), Err(expected));
    assert_eq!(scan(&input, &mut out, &ScanConfig { kind: ScanKind::Exclusive, ..cfg }), Err(expected));
    assert_eq!(out, [9, 9]);
    let mut long = [9u32; 4];
    let err = scan(&input, &mut long, &ScanConfig::inclusive()).unwrap_err();
    assert_eq!(
        err,
        ScanLenMismatch {
            input_len: 3,
            output_len: 4
        }
    );
    assert_eq!(long, [9; 4]);
    assert!(err.to_string().contains("does not match"));
}

/// Random floats: the fast path may round differently from the sequential loop, but
/// both must stay close to the exact prefix sums (computed in f64 for f32 data, and
/// with an integer-scaled reference for f64 data).
#[test]
fn f32_random_within_tolerance() {
    let n = 200_003;
    let data = random_vec(n, 11, |r| r.random_range(-1.0f32..1.0));
    let mut exact = vec![0f64; n];
    let mut acc = 0f64;
    for (e, &x) in exact.iter_mut().zip(&data) {
        acc += x as f64;
        *e = acc;
    }
    let mut seq = vec![0f32; n];
    scan(&data, &mut seq, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    let max_err = |v: &[f32]| {
        v.iter()
            .zip(&exact)
            .map(|(&a, &e)| (a as f64 - e).abs())
            .fold(0f64, f64::max)
    };
    let seq_err = max_err(&seq);
    // |prefix| stays around sqrt(n) ~ 450 here; f32 spacing there is ~3e-5.
    let tol = 0.05f64.max(4.0 * seq_err);
    for level in levels() {
        for cfg in [
            ScanConfig {
                threads: 1,
                partition_bytes: 1 << 18,
                ..ScanConfig::default()
            },
            ScanConfig {
                threads: 2,
                partition_bytes: 1 << 12,
                ..ScanConfig::default()
            },
            ScanConfig {
                threads: 3,
                partition_bytes: 1000,
                ..ScanConfig::default()
            },
            ScanConfig {
                threads: 8,
                partition_bytes: 1 << 16,
                ..ScanConfig::default()
            },
        ] {
            let mut out = vec![0f32; n];
            scan_out_of_place(&cfg, level, ScanKind::Inclusive, &data, &mut out);
            let err = max_err(&out);
            assert!(
                err <= tol,
                "inclusive {level:?} {cfg:?}: err {err} > tol {tol} (seq err {seq_err})"
            );

            let mut ex = vec![0f32; n];
            let total = scan_out_of_place(&cfg, level, ScanKind::Exclusive, &data, &mut ex);
            assert_eq!(ex[0], 0.0);
            let ex_err = ex[1..]
                .iter()
                .zip(&exact)
                .map(|(&a, &e)| (a as f64 - e).abs())
                .fold(0f64, f64::max);
            assert!(ex_err <= tol, "exclusive {level:?} {cfg:?}: err {ex_err}");
            assert!((total as f64 - exact[n - 1]).abs() <= tol);

            // Deterministic for a fixed configuration, whatever the thread timing.
            let mut again = vec![0f32; n];
            scan_out_of_place(&cfg, level, ScanKind::Inclusive, &data, &mut again);
            assert!(out
                .iter()
                .zip(&again)
                .all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        // ... and whatever the number of threads and whether predecessors' sums were
        // stolen, for a fixed partition size.
        let run = |threads: usize, eager_steal: bool| {
            let cfg = ScanConfig {
                threads,
                partition_bytes: 1 << 12,
                ..ScanConfig::default()
            };
            let mut out = vec![0f32; n];
            let tuning = Tuning {
                stream: false,
                eager_steal,
            };
            scan_out_of_place_tuned(&cfg, level, ScanKind::Inclusive, &data, &mut out, tuning);
            out.iter().map(|x| x.to_bits()).collect::<Vec<u32>>()
        };
        let two = run(2, false);
        assert_eq!(two, run(3, false), "{level:?}");
        assert_eq!(two, run(8, true), "{level:?}");
    }
}

#[test]
fn f64_random_within_tolerance() {
    // General f64 values: prefixes stay around sqrt(n), where f64 rounding is ~1e-14.
    let n = 100_001;
    let data = random_vec(n, 12, |r| r.random_range(-1.0f64..1.0) * (1.0 + 1e-9));
    let mut seq = vec![0f64; n];
    scan(&data, &mut seq, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    for level in levels() {
        let cfg = ScanConfig {
            threads: 2,
            partition_bytes: 2048,
            ..ScanConfig::default()
        };
        let mut out = vec![0f64; n];
        scan_out_of_place(&cfg, level, ScanKind::Inclusive, &data, &mut out);
        let err = out
            .iter()
            .zip(&seq)
            .map(|(a, b)| (a - b).abs())
            .fold(0f64, f64::max);
        assert!(err < 1e-9, "{level:?}: err {err}");
    }
}

#[test]
fn float_special_values_propagate() {
    let data = vec![
        1.0f32,
        f32::INFINITY,
        2.0,
        f32::NAN,
        3.0,
        4.0,
        5.0,
        6.0,
        7.0,
        8.0,
    ];
    for level in levels() {
        for cfg in [
            ScanConfig {
                threads: 1,
                partition_bytes: 64,
                ..ScanConfig::default()
            },
            ScanConfig {
                threads: 2,
                partition_bytes: 4,
                ..ScanConfig::default()
            },
        ] {
            let mut out = vec![0f32; data.len()];
            scan_out_of_place(&cfg, level, ScanKind::Inclusive, &data, &mut out);
            assert_eq!(out[0], 1.0);
            assert_eq!(out[1], f32::INFINITY);
            assert_eq!(out[2], f32::INFINITY);
            assert!(
                out[3..].iter().all(|x| x.is_nan()),
                "{level:?} {cfg:?} {out:?}"
            );
        }
    }
}

#[test]
fn config_and_cache_detection() {
    assert_eq!(parse_cache_size("512K"), Some(512 << 10));
    assert_eq!(parse_cache_size("1M\n"), Some(1 << 20));
    assert_eq!(parse_cache_size("2048K"), Some(2 << 20));
    assert_eq!(parse_cache_size("1 MiB"), Some(1 << 20));
    assert_eq!(parse_cache_size("65536"), Some(65536));
    assert_eq!(parse_cache_size("garbage"), None);
    assert_eq!(parse_cache_size("0K"), None);
    assert_eq!(count_cpu_list("0\n"), Some(1));
    assert_eq!(count_cpu_list("0-1"), Some(2));
    assert_eq!(count_cpu_list("0-3,8,10-11"), Some(7));
    assert_eq!(count_cpu_list("x"), None);

    let l2 = l2_cache_bytes();
    assert!(l2 >= 16 << 10, "l2 {l2}");
    let part = default_partition_bytes();
    assert!((8 << 10..=8 << 20).contains(&part));
    assert_eq!(part, (l2 / 2).clamp(8 << 10, 8 << 20));
    let cfg = ScanConfig::default();
    assert!(cfg.threads >= 1);
    assert_eq!(cfg.partition_bytes, part);
    assert_eq!(ScanConfig::default().with_threads(3).threads, 3);

    // Partition lengths: whole elements, at least one, cache-line multiples.
    let c = |b| ScanConfig {
        threads: 2,
        partition_bytes: b,
        ..ScanConfig::default()
    };
    assert_eq!(c(0).partition_elems(4), 1);
    assert_eq!(c(4).partition_elems(4), 1);
    assert_eq!(c(12).partition_elems(4), 3);
    assert_eq!(c(100).partition_elems(4), 16);
    assert_eq!(c(100).partition_elems(8), 8);
    assert_eq!(c(1 << 18).partition_elems(4), 1 << 16);
    assert!(["avx2", "sse2", "scalar"].contains(&simd_level_name()));
}

/// Streaming stores need a scalar head until the output is vector-aligned: try every
/// misalignment of input and output.
#[test]
fn streaming_misaligned_slices() {
    fn run<T: ScanElem + PartialEq + Debug>(data: &[T]) {
        for level in levels() {
            for in_off in 0..4 {
                for out_off in 0..9 {
                    for n in [0usize, 1, 5, 17, 100, 1000 - in_off] {
                        let input = &data[in_off..in_off + n];
                        let mut incl_ref = vec![T::ZERO; n];
                        let mut excl_ref = vec![T::ZERO; n];
                        scan(input, &mut incl_ref, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
                        let total_ref = scan(input, &mut excl_ref, &ScanConfig::sequential(ScanKind::Exclusive)).unwrap();
                        let mut backing = vec![T::ZERO; n + out_off];
                        for (threads, part_bytes) in [(1, 1 << 16), (2, 40)] {
                            let cfg = ScanConfig {
                                threads,
                                partition_bytes: part_bytes,
                                ..ScanConfig::default()
                            };
                            let tuning = Tuning {
                                stream: true,
                                eager_steal: false,
                            };
                            let out = &mut backing[out_off..];
                            scan_out_of_place_tuned(
                                &cfg,
                                level,
                                ScanKind::Inclusive,
                                input,
                                out,
                                tuning,
                            );
                            assert_eq!(
                                out,
                                &incl_ref[..],
                                "{level:?} {in_off} {out_off} {n} {cfg:?}"
                            );
                            let total = scan_out_of_place_tuned(
                                &cfg,
                                level,
                                ScanKind::Exclusive,
                                input,
                                out,
                                tuning,
                            );
                            assert_eq!(
                                out,
                                &excl_ref[..],
                                "{level:?} {in_off} {out_off} {n} {cfg:?}"
                            );
                            assert_eq!(total, total_ref);
                        }
                    }
                }
            }
        }
    }
    run(&random_vec(1000, 41, |r| r.random::<u32>()));
    run(&random_vec(1000, 42, |r| r.random::<i64>()));
    run(&random_vec(1000, 43, |r| r.random_range(-8i32..=8) as f32));
    run(&random_vec(1000, 44, |r| r.random_range(-8i32..=8) as f64));
}

/// Stealing happens (here forced: `eager_steal`) and keeps results exact, in place
/// too, where the owner of a stolen partition must wait before overwriting it.
#[test]
fn stealing_is_exercised_and_exact() {
    let data = random_vec(300_000, 51, |r| r.random::<u64>());
    let mut incl_ref = vec![0u64; data.len()];
    scan(&data, &mut incl_ref, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    let tuning = Tuning {
        stream: false,
        eager_steal: true,
    };
    let before = STEALS.load(Ordering::Relaxed);
    for round in 0..20 {
        let cfg = ScanConfig {
            threads: 2 + round % 3,
            partition_bytes: 1024 + 64 * round,
            ..ScanConfig::default()
        };
        let mut buf = data.clone();
        scan_in_place_tuned(&cfg, simd_level(), ScanKind::Inclusive, &mut buf, tuning);
        assert_eq!(buf, incl_ref, "round {round}");
        let mut out = vec![0u64; data.len()];
        scan_out_of_place_tuned(&cfg, simd_level(), ScanKind::Inclusive, &data, &mut out, tuning);
        assert_eq!(out, incl_ref, "round {round}");
    }
    let steals = STEALS.load(Ordering::Relaxed) - before;
    println!("steals: {steals}");
    // Two pool threads racing through ~20 000 partitions with zero patience: some
    // predecessor is always caught mid pass one (unless the pool has one thread).
    if rayon::current_num_threads() >= 2 {
        assert!(steals > 0, "no steals observed");
    }
}

/// Many concurrent scans from different threads share rayon's pool safely.
#[test]
fn concurrent_callers() {
    let data = random_vec(200_000, 21, |r| r.random::<u32>());
    let mut expected = vec![0u32; data.len()];
    scan(&data, &mut expected, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    std::thread::scope(|s| {
        for t in 0..4 {
            let (data, expected) = (&data, &expected);
            s.spawn(move || {
                let cfg = ScanConfig {
                    threads: 1 + t,
                    partition_bytes: 4096,
                    ..ScanConfig::default()
                };
                for _ in 0..5 {
                    let mut out = vec![0u32; data.len()];
                    scan(data, &mut out, &cfg).unwrap();
                    assert_eq!(&out, expected);
                }
            });
        }
    });
    // And from inside rayon tasks.
    rayon::scope(|s| {
        for t in 0..4 {
            let (data, expected) = (&data, &expected);
            s.spawn(move |_| {
                let cfg = ScanConfig {
                    threads: 2 + t,
                    partition_bytes: 8192,
                    ..ScanConfig::default()
                };
                let mut out = vec![0u32; data.len()];
                scan(data, &mut out, &cfg).unwrap();
                assert_eq!(&out, expected);
            });
        }
    });
}

/// Times the sequential loop and variants of the fast path on `2^log` elements out
/// of place. The variants run interleaved, one run each per round, so that background
/// load hits them alike. Prints median and minimum times and speedups.
fn timing_report<T: ScanElem + PartialEq + Debug>(
    name: &str,
    log: u32,
    rounds: usize,
    gen: impl FnMut(&mut SmallRng) -> T,
) {
    use std::time::Instant;
    let n = 1usize << log;
    let data = random_vec(n, 31, gen);
    let mut expected = vec![T::ZERO; n];
    scan(&data, &mut expected, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
    let mut out = vec![T::ZERO; n];
    let level = simd_level();
    let streams = use_streaming_stores(std::mem::size_of_val(&out[..]));
    println!(
        "cpu_scan timing: 2^{log} {name} out of place, SIMD {}, L2 {} KiB, LLC {} KiB, \
         default partition {} KiB, streaming stores {streams}, rayon pool {} threads, \
         {rounds} rounds",
        simd_level_name(),
        l2_cache_bytes() >> 10,
        last_level_cache_bytes() >> 10,
        default_partition_bytes() >> 10,
        rayon::current_num_threads()
    );
    let part = default_partition_bytes();
    // (name, threads, partition bytes, streaming stores); threads 0: sequential loop.
    let variants: Vec<(String, usize, usize, bool)> = vec![
        ("sequential loop".into(), 0, 0, false),
        ("fast, 1 thread (one-pass SIMD)".into(), 1, part, streams),
        (
            "fast, 2 threads (default: scan)".into(),
            2,
            part,
            streams,
        ),
        (
            format!("fast, 2 threads, streaming stores {}", !streams),
            2,
            part,
            !streams,
        ),
        (
            format!("fast, 2 threads, {} KiB partitions", part >> 11),
            2,
            part / 2,
            streams,
        ),
        (
            format!("fast, 2 threads, {} KiB partitions", part >> 9),
            2,
            part * 2,
            streams,
        ),
    ];
    let mut times = vec![Vec::new(); variants.len()];
    for _ in 0..rounds {
        for (v, &(_, threads, part_bytes, stream)) in variants.iter().enumerate() {
            out.fill(T::ZERO);
            let cfg = ScanConfig {
                threads,
                partition_bytes: part_bytes,
                ..ScanConfig::default()
            };
            let t = Instant::now();
            if threads == 0 {
                scan(&data, &mut out, &ScanConfig::sequential(ScanKind::Inclusive)).unwrap();
            } else if stream == streams {
                // The public entry point, exactly as callers use it.
                scan(&data, &mut out, &cfg).unwrap();
            } else {
                let tuning = Tuning {
                    stream,
                    eager_steal: false,
                };
                scan_out_of_place_tuned(&cfg, level, ScanKind::Inclusive, &data, &mut out, tuning);
            }
            times[v].push(t.elapsed().as_secs_f64());
            assert_eq!(out, expected, "{}", variants[v].0);
        }
    }
    for t in &mut times {
        t.sort_by(f64::total_cmp);
    }
    let (seq_min, seq_med) = (times[0][0], times[0][rounds / 2]);
    for ((name, ..), t) in variants.iter().zip(&times) {
        let (min, med) = (t[0], t[rounds / 2]);
        println!(
            "  {name:<48} median {:8.3} ms ({:4.2} Gelem/s, {:4.2}x)   min {:8.3} ms ({:4.2}x)",
            med * 1e3,
            n as f64 / med / 1e9,
            seq_med / med,
            min * 1e3,
            seq_min / min
        );
    }
}

/// Release-mode timing, the headline figure: 2^26 u32. Run with
/// `cargo test --release -p ridgeline-operators cpu_scan::tests::timing -- --ignored --nocapture`
/// (`RAYON_NUM_THREADS` sets the pool; the fast path is timed with 1 and 2 threads).
#[test]
#[ignore]
fn timing() {
    timing_report::<u32>("u32", 26, 15, |r| r.random_range(0..1000u32));
}

/// Release-mode timing of the other benchmark shapes (u32 and i64 at 2^20, 2^24,
/// 2^26), run like [`timing`] with `timing_more`.
#[test]
#[ignore]
fn timing_more() {
    for log in [20, 24, 26] {
        let rounds = if log == 26 { 9 } else { 25 };
        timing_report::<u32>("u32", log, rounds, |r| r.random_range(0..1000u32));
        timing_report::<i64>("i64", log, rounds, |r| r.random_range(-1000..1000i64));
    }
}
