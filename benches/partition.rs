//! Partitioning under criterion: the hash partition of a u32 key plus one u32
//! payload column into 256 and 4096 partitions at 2^22 rows, on the GPU through
//! the fused rank-and-scatter kernel and through the rank kernel plus per-row
//! moves (`PartitionOptions::fused`), and on the CPU (`partition_cpu`, rayon).
//! The GPU needs an adapter (`RIDGELINE_ADAPTER` picks one); without one only the
//! CPU is measured.
//!
//! Run: `cargo bench --bench partition` (add `-- --quick` for a rougher run). The
//! H100 figures in BENCHMARKS.md come from `ridgeline bench partition`, which sweeps
//! sizes and fan-outs; this bench tracks one size across changes.
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ridgeline_operators::compact::Column;
use ridgeline_operators::partition::{partition_cpu, partition_gpu, HostColumn, PartitionFn, PartitionOptions};
use ridgeline_operators::DeviceArray;

const N: usize = 1 << 22;

fn data() -> (Vec<u32>, Vec<u32>) {
    let keys = (0..N as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32).collect();
    (keys, (0..N as u32).collect())
}

fn cpu(c: &mut Criterion) {
    let (keys, pay) = data();
    let cols = [HostColumn::u32(&keys), HostColumn::u32(&pay)];
    let mut g = c.benchmark_group(format!("partition cpu ({} threads)", rayon::current_num_threads()));
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for fanout in [256u32, 4096] {
        g.bench_function(format!("hash u32 key + u32 payload 2^22, {fanout} partitions"), |b| {
            b.iter(|| black_box(partition_cpu(&cols, &[0], &PartitionFn::Hash { fanout })))
        });
    }
}

fn gpu(c: &mut Criterion) {
    let ctx = match ridgeline_operators::context::global() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("partition: no GPU adapter ({e}); GPU not measured");
            return;
        }
    };
    let (keys, pay) = data();
    let arrays = [DeviceArray::upload(&ctx, &keys).unwrap(), DeviceArray::upload(&ctx, &pay).unwrap()];
    let cols: Vec<Column<'_>> = arrays.iter().map(Column::new).collect();
    let mut g = c.benchmark_group(format!("partition gpu {}", ctx.info().name));
    g.throughput(Throughput::Elements(N as u64));
    g.sample_size(10);
    for fanout in [256u32, 4096] {
        for fused in [true, false] {
            let opts = PartitionOptions { fused: Some(fused), ..Default::default() };
            let what = if fused { "fused rank-and-scatter" } else { "rank + moves" };
            g.bench_function(format!("hash u32 key + u32 payload 2^22, {fanout} partitions, {what} (resident)"), |b| {
                b.iter(|| {
                    let out = partition_gpu(&ctx, &cols, &[0], &PartitionFn::Hash { fanout }, &opts).unwrap();
                    ctx.wait().unwrap();
                    black_box(out.offsets.len())
                })
            });
        }
    }
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
