//! CPU prefix sums: the sequential loop, a plain rayon-style two-pass scan (no SIMD, no
//! cache partitioning; the baseline) and Ridgeline's fast path
//! (`ridgeline_operators::cpu_scan`, the partitioned SIMD scan of Zhang, Wang & Ross,
//! ADMS 2020), out of place, for u32 and i64 at 2^20, 2^24 and 2^26 elements.
//!
//! Run: `cargo bench --bench cpu_scan` (add `-- --quick` for a faster, rougher run).
//! Throughput is reported in elements per second. The parallel variants use all
//! threads of rayon's global pool (set `RAYON_NUM_THREADS` to change that).

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rayon::prelude::*;
use ridgeline_operators::cpu_scan::{self, ScanConfig, ScanElem, ScanKind};

/// The baseline: the textbook multithreaded scan a standard library would use. The input
/// is cut into one equal chunk per thread; pass one scans each chunk locally (scalar)
/// and keeps its total; a sequential scan over the totals gives each chunk's offset;
/// pass two adds the offsets (an easily auto-vectorised loop). Both passes stream the
/// whole array through memory.
fn rayon_two_pass<T: ScanElem>(input: &[T], out: &mut [T], threads: usize) {
    assert_eq!(input.len(), out.len());
    if input.is_empty() {
        return;
    }
    let chunk = input.len().div_ceil(threads.max(1));
    let totals: Vec<T> = input
        .par_chunks(chunk)
        .zip(out.par_chunks_mut(chunk))
        .map(|(src, dst)| {
            let mut acc = T::ZERO;
            for (d, &x) in dst.iter_mut().zip(src) {
                acc = acc.scan_add(x);
                *d = acc;
            }
            acc
        })
        .collect();
    let mut offsets = Vec::with_capacity(totals.len());
    let mut acc = T::ZERO;
    for t in totals {
        offsets.push(acc);
        acc = acc.scan_add(t);
    }
    out.par_chunks_mut(chunk)
        .zip(offsets)
        .skip(1)
        .for_each(|(dst, offset)| {
            for d in dst {
                *d = offset.scan_add(*d);
            }
        });
}

fn bench_type<T: ScanElem + PartialEq + std::fmt::Debug>(
    c: &mut Criterion,
    name: &str,
    gen: impl Fn(&mut SmallRng) -> T,
) {
    let cfg = ScanConfig::inclusive();
    let seq = ScanConfig::sequential(ScanKind::Inclusive);
    let threads = cfg.threads;
    let mut group = c.benchmark_group(format!("cpu_scan_{name}"));
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sampling_mode(SamplingMode::Flat);
    for log in [20u32, 24, 26] {
        let n = 1usize << log;
        let mut rng = SmallRng::seed_from_u64(0x5ca9 + log as u64);
        let input: Vec<T> = (0..n).map(|_| gen(&mut rng)).collect();
        let mut out = vec![T::ZERO; n];

        // The three variants agree (integers are exact).
        let mut expected = vec![T::ZERO; n];
        cpu_scan::scan(&input, &mut expected, &seq).unwrap();
        rayon_two_pass(&input, &mut out, threads);
        assert_eq!(out, expected, "rayon baseline");
        cpu_scan::scan(&input, &mut out, &cfg).unwrap();
        assert_eq!(out, expected, "fast path");
        drop(expected);

        group.throughput(Throughput::Elements(n as u64));
        let size = format!("2^{log}");
        group.bench_with_input(BenchmarkId::new("sequential", &size), &input, |b, input| {
            b.iter(|| cpu_scan::scan(black_box(input), &mut out, &seq).unwrap())
        });
        group.bench_with_input(
            BenchmarkId::new("rayon_two_pass", &size),
            &input,
            |b, input| b.iter(|| rayon_two_pass(black_box(input), &mut out, threads)),
        );
        group.bench_with_input(BenchmarkId::new("fast", &size), &input, |b, input| {
            b.iter(|| cpu_scan::scan(black_box(input), &mut out, &cfg).unwrap())
        });
        black_box(&out);
    }
    group.finish();
}

fn cpu_scan_benches(c: &mut Criterion) {
    let cfg = ScanConfig::default();
    eprintln!(
        "cpu_scan: {} threads, partitions of {} KiB (L2 {} KiB), last-level cache {} KiB, SIMD {}",
        cfg.threads,
        cfg.partition_bytes >> 10,
        cpu_scan::l2_cache_bytes() >> 10,
        cpu_scan::last_level_cache_bytes() >> 10,
        cpu_scan::simd_level_name(),
    );
    bench_type::<u32>(c, "u32", |r| r.random_range(0..1_000_000u32));
    bench_type::<i64>(c, "i64", |r| {
        r.random_range(-1_000_000_000i64..1_000_000_000)
    });
}

criterion_group!(benches, cpu_scan_benches);
criterion_main!(benches);
