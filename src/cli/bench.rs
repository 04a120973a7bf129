//! `ridgeline bench ...`: benchmarks printed as tables.
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::{context, DeviceArray};
use std::sync::Arc;
use std::time::Instant;

/// The median of `v` (the upper one of an even count).
pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Upload, readback and device-copy GB/s at 1 MiB .. `max_mib` MiB (x4 steps).
pub fn transfer(max_mib: u64, iterations: usize) -> Result<()> {
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let g = |e: ridgeline_operators::GpuError| DataFusionError::Execution(e.to_string());
    println!("bench transfer on {} ({:?}), median of {iterations}", ctx.info().name, ctx.info().backend);
    println!("{:>9} | {:>12} | {:>14} | {:>13} | {:>18}", "size", "upload GB/s", "write_buffer GB/s", "readback GB/s", "device copy GB/s*");
    let mut mib = 1u64;
    while mib <= max_mib {
        let n = (mib << 20) as usize / 4;
        let data: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
        let bytes = (n * 4) as f64;
        let (mut up, mut wb, mut down, mut copy) = (vec![], vec![], vec![], vec![]);
        for _ in 0..iterations.max(1) {
            let t = Instant::now();
            let d = DeviceArray::upload(&ctx, &data).map_err(g)?;
            ctx.wait().map_err(g)?;
            up.push(bytes / t.elapsed().as_secs_f64() / 1e9);

            let mut back = vec![0u32; n];
            let t = Instant::now();
            d.download_into(&ctx, bytemuck::cast_slice_mut(&mut back)).map_err(g)?;
            down.push(bytes / t.elapsed().as_secs_f64() / 1e9);
            if back != data {
                return Err(DataFusionError::Execution("readback differs from the uploaded data".into()));
            }
            drop(back);

            let t = Instant::now();
            let c = d.duplicate(&ctx).map_err(g)?;
            ctx.wait().map_err(g)?;
            copy.push(2.0 * bytes / t.elapsed().as_secs_f64() / 1e9);
            drop(c);

            // queue.write_buffer, for comparison (only within one buffer's limit).
            if d.num_segments() == 1 {
                let (buf, _, _) = d.segment(0);
                let t = Instant::now();
                ctx.upload_via_queue(bytemuck::cast_slice(&data), buf).map_err(g)?;
                wb.push(bytes / t.elapsed().as_secs_f64() / 1e9);
            }
        }
        let size = if mib >= 1024 { format!("{} GiB", mib / 1024) } else { format!("{mib} MiB") };
        let wbs = if wb.is_empty() { "-".to_string() } else { format!("{:.1}", median(wb)) };
        println!("{size:>9} | {:>12.1} | {wbs:>17} | {:>13.1} | {:>18.1}", median(up), median(down), median(copy));
        mib *= 4;
    }
    println!("* device copy counts bytes read + written, by the copy kernel, including submit and wait");
    ctx.trim_staging();
    ctx.pool().trim();
    Ok(())
}

/// GPU exclusive scan (u32) at 2^lo .. 2^hi elements next to cub::DeviceScan, and
/// the CPU scan against the sequential loop.
pub fn scan(lo: u32, hi: u32, iterations: usize) -> Result<()> {
    use ridgeline_operators::cpu_scan;
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    println!("bench scan on {} ({:?}); GPU: median of {iterations}, CPU: best of {iterations}", ctx.info().name, ctx.info().backend);
    println!("{:>6} | {:>10} | {:>9} | {:>6} | {:>15} | {:>14} | {:>8}", "n", "GPU ms", "GPU GB/s", "timed", "CPU scan ms", "CPU seq ms", "CPU x");
    for k in lo..=hi {
        let n = 1usize << k;
        let b = ridgeline_operators::scan::bench_scan(&ctx, n, iterations.max(1), &ridgeline_operators::scan::ScanOptions::default()).map_err(|e| DataFusionError::Execution(e.to_string()))?;
        let input: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(2_654_435_761) >> 8).collect();
        let mut out = vec![0u32; n];
        let best = |f: &mut dyn FnMut()| {
            (0..iterations.max(1))
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64() * 1e3
                })
                .fold(f64::INFINITY, f64::min)
        };
        let fast = best(&mut || {
            cpu_scan::scan(&input, &mut out, &cpu_scan::ScanConfig::exclusive()).unwrap();
        });
        let seq = best(&mut || {
            cpu_scan::scan(&input, &mut out, &cpu_scan::ScanConfig::sequential(cpu_scan::ScanKind::Exclusive)).unwrap();
        });
        println!(
            "{:>6} | {:>10.3} | {:>9.1} | {:>6} | {:>15.3} | {:>14.3} | {:>8.2}",
            format!("2^{k}"),
            b.ms,
            b.gb_per_s,
            if b.gpu_timed { "gpu" } else { "wall" },
            fast,
            seq,
            seq / fast
        );
    }
    println!("anchor: cub::DeviceScan::ExclusiveSum 2^28 u32 on the H100: 0.88 ms; CPU threads: {}", rayon::current_num_threads());
    Ok(())
}

/// GPU compaction, stable vs Jumping Jack, over selectivity.
pub fn compact(lo: u32, hi: u32, iterations: usize, only: Option<f64>) -> Result<()> {
    use ridgeline_operators::compact::{bench_compact, CompactAlgo, CompactOptions, SelectionForm};
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    println!(
        "bench compact on {} ({:?}), one u32 column selected by u32 flags (stable, JJ) or by a bitmap (stable), median of {iterations}",
        ctx.info().name,
        ctx.info().backend
    );
    println!(
        "{:>6} | {:>5} | {:>10} | {:>10} | {:>13} | {:>9} | {:>13}",
        "n", "sel", "stable ms", "JJ ms", "bitmap sel ms", "GB/s*", "scratch/input"
    );
    let sels: Vec<f64> = match only {
        Some(s) => vec![s],
        None => vec![0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0],
    };
    for k in lo..=hi {
        let n = 1usize << k;
        for &sel in &sels {
            let g = |e: ridgeline_operators::GpuError| DataFusionError::Execution(e.to_string());
            // The bitmap case first: on the H100, kernels slow down once a process has
            // freed large buffers (see BENCHMARKS.md), so the first case is the clean one.
            let b = bench_compact(&ctx, n, sel, &CompactOptions::with_algo(CompactAlgo::Stable), iterations.max(1), SelectionForm::Bitmap).map_err(g)?;
            let s = bench_compact(&ctx, n, sel, &CompactOptions::with_algo(CompactAlgo::Stable), iterations.max(1), SelectionForm::Flags).map_err(g)?;
            let j = bench_compact(&ctx, n, sel, &CompactOptions::with_algo(CompactAlgo::JumpingJack), iterations.max(1), SelectionForm::Flags).map_err(g)?;
            if b.count != s.count {
                return Err(DataFusionError::Execution(format!("bitmap selection kept {} rows, flags {}", b.count, s.count)));
            }
            let best = s.ms.min(j.ms);
            let gbs = (s.input_bytes as f64 + (s.count * 4) as f64) / (best / 1e3) / 1e9;
            println!(
                "{:>6} | {:>4.0}% | {:>10.3} | {:>10.3} | {:>13.3} | {:>9.1} | {:>13.4}",
                format!("2^{k}"),
                sel * 100.0,
                s.ms,
                j.ms,
                b.ms,
                gbs,
                s.scratch_bytes.max(j.scratch_bytes) as f64 / s.input_bytes.max(1) as f64
            );
        }
    }
    println!("* bytes read (flags + column) + bytes written, at the faster flag algorithm; anchor: cub::DeviceSelect::Flagged 2^28 at 50%: 0.87 ms");
    Ok(())
}

/// The GPU filter on resident data (predicate kernel + compaction of a payload
/// column) against DataFusion's CPU filter on all cores, over sizes and selectivity.
pub fn filter(lo: u32, hi: u32, iterations: usize) -> Result<()> {
    use crate::gpu_batch::GpuBatch;
    use crate::gpu_expr::{Caps, RowProgram};
    use arrow::array::{Int32Array, Int64Array, RecordBatch};
    use datafusion::logical_expr::Operator;
    use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::scalar::ScalarValue;
    use rayon::prelude::*;
    use ridgeline_operators::compact::{compact, Column as CCol, CompactAlgo, CompactOptions, Selection};
    use std::sync::Arc;
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let g = |e: ridgeline_operators::GpuError| DataFusionError::Execution(e.to_string());
    let threads = rayon::current_num_threads();
    println!(
        "bench filter on {} ({:?}): SELECT v FROM t WHERE k < X over resident (k i32, v i64); GPU: median of {iterations} (kernel + compaction, synchronized); CPU: DataFusion's predicate + arrow filter on {threads} threads, median",
        ctx.info().name,
        ctx.info().backend
    );
    println!("{:>6} | {:>5} | {:>10} | {:>10} | {:>9} | {:>10} | {:>7}", "n", "sel", "stable ms", "JJ ms", "GB/s*", "CPU ms", "CPU/GPU");
    for k in lo..=hi {
        let n = 1usize << k;
        let keys: Vec<i32> = (0..n as u32).into_par_iter().map(|i| (i.wrapping_mul(2_654_435_761) >> 2) as i32 % 1_000_000).collect();
        let batch = RecordBatch::try_from_iter([
            ("k", Arc::new(Int32Array::from(keys)) as arrow::array::ArrayRef),
            ("v", Arc::new(Int64Array::from_iter_values(0..n as i64))),
        ])?;
        let dev_batch = GpuBatch::upload(&ctx, &batch)?;
        ctx.wait().map_err(g)?;
        let chunks: Vec<RecordBatch> = (0..n).step_by(n.div_ceil(threads * 4).max(1)).map(|o| batch.slice(o, n.div_ceil(threads * 4).min(n - o))).collect();
        for sel in [0.01, 0.1, 0.5, 0.9, 1.0] {
            let thr = (sel * 1_000_000.0) as i32;
            let pred: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
                Arc::new(Column::new("k", 0)),
                Operator::Lt,
                Arc::new(Literal::new(ScalarValue::Int32(Some(thr)))),
            ));
            let program = RowProgram::try_new(batch.schema(), Some(pred.clone()), vec![], Caps::of(&ctx)).map_err(DataFusionError::Execution)?;
            let crate::gpu_batch::ColumnData::Device { values: vcol, .. } = &dev_batch.columns[1].data else {
                return Err(DataFusionError::Internal("payload not on the device".into()));
            };
            let run = |algo: CompactAlgo| -> Result<(f64, usize)> {
                // One filter: evaluate, compact, check the error word; the row count.
                let once = || -> Result<usize> {
                    let eval = program.evaluate(&ctx, &dev_batch)?;
                    let sel = Selection::Bitmap { bits: eval.selection.as_ref().expect("predicate"), rows: n };
                    let c = compact(&ctx, sel, &[CCol::new(vcol)], &CompactOptions::with_algo(algo)).map_err(g)?;
                    eval.check_errors(&ctx)?;
                    ctx.wait().map_err(g)?;
                    Ok(c.count)
                };
                ridgeline_operators::timing::warm_up(ridgeline_operators::timing::WARM_UP_MS, || once().map(|_| ()))?;
                let mut times = Vec::new();
                let mut count = 0;
                for _ in 0..iterations.max(1) {
                    let t = Instant::now();
                    count = once()?;
                    times.push(t.elapsed().as_secs_f64() * 1e3);
                }
                Ok((median(times), count))
            };
            if sel == 0.5 && log::log_enabled!(target: "ridgeline::profile::bench", log::Level::Debug) {
                // Where the time goes (RUST_LOG=ridgeline::profile=debug): each phase
                // synchronized on its own.
                let mut ph = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
                for _ in 0..iterations.max(1) {
                    let t = Instant::now();
                    ctx.wait().map_err(g)?;
                    ph[0].push(t.elapsed().as_secs_f64() * 1e3);
                    let t = Instant::now();
                    let eval = program.evaluate(&ctx, &dev_batch)?;
                    ctx.wait().map_err(g)?;
                    ph[1].push(t.elapsed().as_secs_f64() * 1e3);
                    let t = Instant::now();
                    let s = Selection::Bitmap { bits: eval.selection.as_ref().expect("predicate"), rows: n };
                    let _c = compact(&ctx, s, &[CCol::new(vcol)], &CompactOptions::with_algo(CompactAlgo::Stable)).map_err(g)?;
                    ctx.wait().map_err(g)?;
                    ph[2].push(t.elapsed().as_secs_f64() * 1e3);
                    let t = Instant::now();
                    let _w: Vec<u32> = DeviceArray::upload(&ctx, &[1u32, 2, 3, 4]).and_then(|a| a.download(&ctx)).map_err(g)?;
                    ph[3].push(t.elapsed().as_secs_f64() * 1e3);
                }
                let [a, b, c, d] = ph;
                log::debug!(target: "ridgeline::profile::bench", "bench filter phases (ms): idle wait {:.3}, predicate kernel {:.3}, compaction {:.3}, 16-byte round trip {:.3}", median(a), median(b), median(c), median(d));
            }
            let (stable, count) = run(CompactAlgo::Stable)?;
            let (jj, count_jj) = run(CompactAlgo::JumpingJack)?;
            let mut cpu_times = Vec::new();
            let mut cpu_count = 0;
            for _ in 0..iterations.max(1) {
                let t = Instant::now();
                let counts: Vec<usize> = chunks
                    .par_iter()
                    .map(|c| -> Result<usize> {
                        let mask = pred.evaluate(c)?.into_array(c.num_rows())?;
                        let out = arrow::compute::filter(c.column(1), arrow::array::AsArray::as_boolean(&mask))?;
                        Ok(out.len())
                    })
                    .collect::<Result<_>>()?;
                cpu_times.push(t.elapsed().as_secs_f64() * 1e3);
                cpu_count = counts.iter().sum();
            }
            if count != cpu_count || count_jj != cpu_count {
                return Err(DataFusionError::Execution(format!("GPU kept {count} / {count_jj} rows, the CPU {cpu_count}")));
            }
            let cpu = median(cpu_times);
            let best = stable.min(jj);
            let bytes = (n * 12 + count * 8) as f64;
            println!(
                "{:>6} | {:>4.0}% | {:>10.3} | {:>10.3} | {:>9.1} | {:>10.3} | {:>7.2}",
                format!("2^{k}"),
                sel * 100.0,
                stable,
                jj,
                bytes / (best / 1e3) / 1e9,
                cpu,
                cpu / best
            );
        }
        drop(dev_batch);
        ctx.pool().trim();
    }
    println!("* bytes read (k, v) + written (selected v) per second at the faster compaction");
    Ok(())
}

/// SampleSelect on resident f32 keys (exact median, three quartiles at once,
/// top-k for k = 10, 100, 1000, n/100, approximate median with its measured rank
/// error) against the CPU path and DataFusion's `median` over the same column.
pub fn select(lo: u32, hi: u32, iterations: usize, probe: bool, approx_variants: bool, duckdb: Option<&std::path::Path>) -> Result<()> {
    use ridgeline_operators::select::{approx_select_gpu, key_f32, select_cpu, select_gpu, topk_cpu, topk_gpu, Keys, SelectOptions};
    // The host-driven descent (no chain), measured beside the default.
    let nochain = SelectOptions { chain_min: usize::MAX, ..Default::default() };
    // Approximate answers by the one histogram pass from any size (the default
    // takes it from 2^20 keys, and the chain below).
    let hist = SelectOptions { approx_hist_min: 0, ..Default::default() };
    // The approximate median by the chain (exact), the design before the one pass (docs/benchmarks/history/session-12.md).
    let by_chain = SelectOptions { approx_hist_min: usize::MAX, ..Default::default() };
    // The one pass with the sample's keys as splitters (32-bit keys otherwise
    // take cells of key space first).
    let hist_spl = SelectOptions { approx_key_cells: false, ..hist };
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let g = |e: ridgeline_operators::GpuError| DataFusionError::Execution(e.to_string());
    let threads = rayon::current_num_threads();
    println!(
        "bench select on {} ({:?}): resident f32 keys (uniform), GPU wall ms incl. readback (median of {iterations}); CPU: Ridgeline's select_cpu on {threads} threads and DataFusion's median, best of {iterations}",
        ctx.info().name,
        ctx.info().backend
    );
    println!(
        "| n | median ms | median no chain ms | 3 quartiles ms | top-10 ms | top-100 ms | top-100 no chain ms | top-1000 ms | top-n/100 ms | approx median ms | approx rank err (bound, how) | approx by chain ms | approx 1-pass splitters ms (rank err) | aux MiB (/input) | CPU median ms | DataFusion median ms | DuckDB quantile_cont ms |"
    );
    println!("|{}", " --- |".repeat(17));
    let time = |f: &mut dyn FnMut() -> Result<()>| -> Result<f64> {
        ridgeline_operators::timing::warm_up(ridgeline_operators::timing::WARM_UP_MS, &mut *f)?;
        let mut v = Vec::new();
        for _ in 0..iterations.max(1) {
            let t = Instant::now();
            f()?;
            v.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(median(v))
    };
    for k in lo..=hi {
        let n = 1usize << k;
        let vals: Vec<f32> = (0..n as u64)
            .map(|i| {
                let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (i >> 7).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                (x >> 40) as f32 / (1u64 << 24) as f32 * 1000.0 - 500.0
            })
            .collect();
        let keys: Vec<u32> = vals.iter().map(|&x| key_f32(x)).collect();
        let arr = DeviceArray::upload(&ctx, &keys).map_err(g)?;
        ctx.wait().map_err(g)?;
        let half = (n / 2) as u64;
        if probe && k == hi {
            let mut sample: Vec<u32> = (0..4096).map(|i| keys[i * (n / 4096)]).collect();
            sample.sort_unstable();
            for (what, ms) in ridgeline_operators::select::probe_kernels(&ctx, &arr, n, &sample, iterations.max(5)).map_err(g)? {
                let gbs = (n * 4) as f64 / ms / 1e6;
                println!("probe 2^{k} {what}: {ms:.3} ms ({gbs:.0} GB/s of keys read)");
            }
        }
        let want = select_cpu(&keys, &[half, (n / 4) as u64, (3 * n / 4) as u64]);
        let mut aux = 0u64;
        let med = time(&mut || {
            let (v, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[half], &SelectOptions::default()).map_err(g)?;
            aux = aux.max(st.device_bytes);
            if v[0] != want[0] {
                return Err(DataFusionError::Execution(format!("GPU median {} != CPU {}", v[0], want[0])));
            }
            Ok(())
        })?;
        let med_ch = time(&mut || {
            let (v, _) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[half], &nochain).map_err(g)?;
            if v[0] != want[0] {
                return Err(DataFusionError::Execution(format!("GPU median (no chain) {} != CPU {}", v[0], want[0])));
            }
            Ok(())
        })?;
        let q3 = time(&mut || {
            let (v, st) = select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[(n / 4) as u64, half, (3 * n / 4) as u64], &SelectOptions::default()).map_err(g)?;
            aux = aux.max(st.device_bytes);
            if v != [want[1], want[0], want[2]] {
                return Err(DataFusionError::Execution("GPU quartiles differ from the CPU's".into()));
            }
            Ok(())
        })?;
        let mut tk = Vec::new();
        for kk in [10usize, 100, 1000, n / 100] {
            let want_ids = topk_cpu(&keys, kk);
            tk.push(time(&mut || {
                let (ids, st) = topk_gpu::<u32>(&ctx, Keys::Device(&arr, n), kk, &SelectOptions::default()).map_err(g)?;
                aux = aux.max(st.device_bytes);
                if ids != want_ids {
                    return Err(DataFusionError::Execution(format!("GPU top-{kk} differs from the CPU's")));
                }
                Ok(())
            })?);
        }
        let want100 = topk_cpu(&keys, 100);
        let tk_ch = time(&mut || {
            let (ids, _) = topk_gpu::<u32>(&ctx, Keys::Device(&arr, n), 100, &nochain).map_err(g)?;
            if ids != want100 {
                return Err(DataFusionError::Execution("GPU top-100 (no chain) differs from the CPU's".into()));
            }
            Ok(())
        })?;
        // The true rank error of an answer (outside the timing).
        let rank_err = |v: u32| {
            let below = keys.iter().filter(|&&x| x < v).count() as u64;
            let upto = keys.iter().filter(|&&x| x <= v).count() as u64;
            if half < below {
                below - half
            } else if half >= upto {
                half + 1 - upto
            } else {
                0
            }
        };
        // An approximate median: its wall time, its true rank error (which must be
        // within the bound it reports), the bound and how it was answered.
        let approx_median = |opts: &SelectOptions| -> Result<(f64, u64, u64, &'static str)> {
            let mut last = (0u32, 0u64, "");
            let ms = time(&mut || {
                let (v, st) = approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[half], opts).map_err(g)?;
                last = (v[0], st.rank_error_bound, st.algorithm);
                Ok(())
            })?;
            let e = within_bound(rank_err(last.0), last.1, &format!("approximate median ({})", last.2))?;
            let how = if last.2.ends_with("-cells") {
                "1-pass cells"
            } else if last.2.ends_with("-subgroup") {
                "1-pass sg"
            } else if last.2.contains("1pass") {
                "1-pass"
            } else {
                "chain"
            };
            Ok((ms, e, last.1, how))
        };
        let (am, am_err, am_bound, am_how) = approx_median(&SelectOptions::default())?;
        let (am_chain, ..) = approx_median(&by_chain)?;
        let (am_spl, err_spl, _, spl_how) = approx_median(&hist_spl)?;
        let dflt = SelectOptions::default();
        if dflt.timestamps {
            // Where the time goes: kernel time (timestamp queries) against wall time.
            // The per-call timers leave the GPU idle long enough to drop its clock,
            // so these kernel times run up to 4x the normal (BENCHMARKS.md, session
            // 12): compare variants by the table's wall times, not by these.
            for (what, approx, opts) in
                [("median", false, &dflt), ("approx median", true, &dflt), ("approx 1-pass", true, &hist), ("approx 1-pass splitters", true, &hist_spl)]
            {
                let t = Instant::now();
                let st = if approx {
                    approx_select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[half], opts).map_err(g)?.1
                } else {
                    select_gpu::<u32>(&ctx, Keys::Device(&arr, n), &[half], &dflt).map_err(g)?.1
                };
                let wall = t.elapsed().as_secs_f64() * 1e3;
                eprintln!("diag 2^{k} {what}: levels {}, kernels {:.3} ms, wall {wall:.3} ms, {}", st.levels, st.gpu_ms, st.algorithm);
            }
        }
        if approx_variants && k == hi {
            approx_variant_table(&ctx, &arr, n, half, iterations, &rank_err)?;
        }
        let mut cpu = Vec::new();
        for _ in 0..iterations.max(1) {
            let t = Instant::now();
            std::hint::black_box(select_cpu(&keys, &[half]));
            cpu.push(t.elapsed().as_secs_f64() * 1e3);
        }
        let cpu_ms = cpu.iter().copied().fold(f64::INFINITY, f64::min);
        let df_ms = datafusion_median_ms(&vals, iterations)?;
        // DuckDB's quantile_cont over the same values (best of `iterations`), its
        // answer checked against the interpolated median of the CPU path.
        let duck = match duckdb {
            Some(py) => {
                use arrow::array::{Float32Array, RecordBatch};
                let b = RecordBatch::try_from_iter([("x", Arc::new(Float32Array::from(vals.clone())) as arrow::array::ArrayRef)])?;
                let (ms, _, _, first) = crate::cli::bench_aggregate::duckdb_run(py, &[b], "SELECT quantile_cont(x, 0.5) FROM t", iterations)?;
                let lohi = select_cpu(&keys, &[(n / 2 - 1) as u64, half]);
                let want = (ridgeline_operators::select::unkey_f32(lohi[0]) as f64 + ridgeline_operators::select::unkey_f32(lohi[1]) as f64) / 2.0;
                let got: f64 = first.as_deref().and_then(|v| v.parse().ok()).unwrap_or(f64::NAN);
                if !((got - want).abs() <= 1e-5 * want.abs().max(1.0)) {
                    return Err(DataFusionError::Execution(format!("DuckDB's quantile_cont {got} != the CPU path's {want}")));
                }
                format!("{ms:.2}")
            }
            None => "-".into(),
        };
        println!(
            "| 2^{k} | {med:.3} | {med_ch:.3} | {q3:.3} | {:.3} | {:.3} | {tk_ch:.3} | {:.3} | {:.3} | {am:.3} | {am_err} ({am_bound}, {:.4}% of n, {am_how}) | {am_chain:.3} | {am_spl:.3} ({err_spl}, {spl_how}) | {:.1} ({:.3}) | {cpu_ms:.2} | {df_ms:.2} | {duck} |",
            tk[0],
            tk[1],
            tk[2],
            tk[3],
            am_bound as f64 * 100.0 / n as f64,
            aux as f64 / (1 << 20) as f64,
            aux as f64 / (n * 4) as f64
        );
    }
    Ok(())
}

/// An approximate answer's true rank error `e`, or an error where it exceeds the
/// `bound` the selection reported.
fn within_bound(e: u64, bound: u64, what: &str) -> Result<u64> {
    if e > bound {
        return Err(DataFusionError::Execution(format!("{what}: rank error {e} over its bound {bound}")));
    }
    Ok(e)
}

/// Variants of the approximate median's one pass over the same resident keys,
/// timed call by call in rounds (every variant once per round, after a warm-up),
/// so that a change of the GPU's clock or state affects them all alike.
fn approx_variant_table(
    ctx: &ridgeline_operators::GpuContext,
    arr: &DeviceArray,
    n: usize,
    half: u64,
    iterations: usize,
    rank_err: &dyn Fn(u32) -> u64,
) -> Result<()> {
    use ridgeline_operators::select::{approx_select_gpu, Keys, SelectOptions, APPROX_CELL_SIGMAS, APPROX_ITEMS, APPROX_SIGMAS};
    let g = |e: ridgeline_operators::GpuError| DataFusionError::Execution(e.to_string());
    let base = SelectOptions { approx_hist_min: 0, ..Default::default() };
    let mut variants: Vec<(String, SelectOptions)> = Vec::new();
    for (items, groups) in [(4u32, 0u32), (8, 0), (8, 4096), (16, 4096)] {
        let most = if groups == 0 { String::new() } else { format!(", at most {groups} workgroups") };
        variants.push((
            format!("cells of key space, {items} keys an invocation{most}"),
            SelectOptions { approx_hist_items: items, approx_hist_groups: groups, ..base },
        ));
    }
    for sd in [3.0, 6.0] {
        variants.push((format!("cells of key space, windows of {sd} sd"), SelectOptions { approx_cell_sigmas: sd, ..base }));
    }
    let spl = SelectOptions { approx_key_cells: false, ..base };
    for (items, sd) in [(4u32, 3.0), (8, 3.0), (4, 2.5)] {
        variants.push((format!("splitters, {items} keys an invocation, windows of {sd} sd"), SelectOptions { approx_hist_items: items, approx_sigmas: sd, ..spl }));
    }
    variants.push(("sample sorted through workgroup memory only".into(), SelectOptions { subgroup_sort: false, ..base }));
    variants.push(("splitters, ap_hist (no subgroups)".into(), SelectOptions { approx_hist_subgroups: false, ..spl }));
    variants.push(("the chain (exact)".into(), SelectOptions { approx_hist_min: usize::MAX, ..Default::default() }));
    let rounds = (iterations * 6).max(20);
    let mut ms = vec![Vec::with_capacity(rounds); variants.len()];
    let mut last = vec![(0u32, 0u64, ""); variants.len()];
    ridgeline_operators::timing::warm_up(ridgeline_operators::timing::WARM_UP_MS, || {
        variants.iter().try_for_each(|(_, o)| approx_select_gpu::<u32>(ctx, Keys::Device(arr, n), &[half], o).map(|_| ()))
    })
    .map_err(g)?;
    for _ in 0..rounds {
        for (i, (_, o)) in variants.iter().enumerate() {
            let t = Instant::now();
            let (v, st) = approx_select_gpu::<u32>(ctx, Keys::Device(arr, n), &[half], o).map_err(g)?;
            ms[i].push(t.elapsed().as_secs_f64() * 1e3);
            last[i] = (v[0], st.rank_error_bound, st.algorithm);
        }
    }
    println!("approximate median variants at n = {n}, wall ms over {rounds} interleaved rounds (default: cells of key space, {APPROX_ITEMS} keys, sample 4096, windows of {APPROX_CELL_SIGMAS} sd; splitters: {APPROX_ITEMS} keys, windows of {APPROX_SIGMAS} sd):");
    println!("| variant | min ms | median ms | rank err (bound) | algorithm |");
    println!("| --- | --- | --- | --- | --- |");
    for (i, (what, _)) in variants.iter().enumerate() {
        let mut v = ms[i].clone();
        v.sort_by(f64::total_cmp);
        let e = within_bound(rank_err(last[i].0), last[i].1, what)?;
        println!("| {what} | {:.3} | {:.3} | {e} ({}) | {} |", v[0], v[v.len() / 2], last[i].1, last[i].2);
    }
    Ok(())
}

fn datafusion_median_ms(vals: &[f32], iterations: usize) -> Result<f64> {
    use arrow::array::{Float32Array, RecordBatch};
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;
    let batch = RecordBatch::try_from_iter([("x", Arc::new(Float32Array::from(vals.to_vec())) as arrow::array::ArrayRef)])?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    rt.block_on(async {
        let ctx = SessionContext::new();
        let parts = ctx.state().config().target_partitions();
        let per = batch.num_rows().div_ceil(parts).max(1);
        let chunks: Vec<Vec<RecordBatch>> =
            (0..batch.num_rows()).step_by(per).map(|o| vec![batch.slice(o, per.min(batch.num_rows() - o))]).collect();
        ctx.register_table("t", Arc::new(datafusion::datasource::MemTable::try_new(batch.schema(), chunks)?))?;
        let mut best = f64::INFINITY;
        for _ in 0..iterations.max(1) {
            let t = Instant::now();
            ctx.sql("SELECT median(x) FROM t").await?.collect().await?;
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok(best)
    })
}

/// `bench partition`: GPU hash partition of a u32 key plus one u32 payload column
/// (resident) at fan-outs 2..4096, next to the CPU partition (same rows, same
/// partitions), cub::DeviceRadixSort's one-pass rate (SortKeys: 5.5 ms per 2^28
/// keys over 4 passes, ../shared/h100.md; keys only, so half the bytes moved) and
/// the streaming floor measured in the same run (the copy kernel's rate over the
/// partition's least traffic: every column read and written once plus the
/// histogram's read of the key).
pub fn partition(lo: u32, hi: u32, iterations: usize) -> Result<()> {
    use ridgeline_operators::partition::{bench_partition, partition_cpu, HostColumn, PartitionFn};
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let threads = rayon::current_num_threads();
    println!(
        "bench partition on {} ({:?}): u32 key + 1 u32 payload, hash partition, GPU device ms (median of {iterations}); CPU partition on {threads} threads (best of {iterations})",
        ctx.info().name,
        ctx.info().backend
    );
    println!("| n | fan-out | GPU ms | GPU wall ms | GB/s | rank + moves ms | copy floor ms | GPU/floor | cub SortKeys one pass ms (keys only) | scratch % of input | CPU ms | CPU/GPU |");
    println!("|{}", " --- |".repeat(12));
    for k in lo..=hi {
        let n = 1usize << k;
        let keys: Vec<u32> = (0..n as u64).map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as u32).collect();
        let pay: Vec<u32> = (0..n as u32).collect();
        for fanout in [2u32, 16, 256, 4096] {
            let b = bench_partition(&ctx, n, fanout, 1, iterations, true).map_err(|e| DataFusionError::Execution(e.to_string()))?;
            // the same partition through the rank kernel and per-column moves
            let unfused = bench_partition(&ctx, n, fanout, 1, iterations, false).map_err(|e| DataFusionError::Execution(e.to_string()))?;
            let cols = [HostColumn::u32(&keys), HostColumn::u32(&pay)];
            let mut best = f64::INFINITY;
            for _ in 0..iterations.max(1) {
                let t = Instant::now();
                std::hint::black_box(partition_cpu(&cols, &[0], &PartitionFn::Hash { fanout }));
                best = best.min(t.elapsed().as_secs_f64() * 1e3);
            }
            // cub: 5.5 ms for 4 one-pass (8-bit) passes over 2^28 keys (SortKeys).
            let cub = 5.5 / 4.0 * n as f64 / (1u64 << 28) as f64;
            let s = &b.stats;
            println!(
                "| 2^{k} | {fanout} | {:.3} | {:.3} | {:.1} | {:.3} | {:.3} | {:.2} | {cub:.4} | {:.2} | {best:.2} | {:.1} |",
                b.ms,
                b.wall_ms,
                b.gb_per_s,
                unfused.ms,
                b.floor_ms,
                if b.floor_ms > 0.0 { b.ms / b.floor_ms } else { 0.0 },
                s.histogram_bytes as f64 * 100.0 / s.input_bytes.max(1) as f64,
                best / b.ms
            );
            for (what, pb) in [("fused", &b), ("rank + moves", &unfused)] {
                if !pb.profile.is_empty() {
                    let steps: Vec<String> = pb.profile.iter().map(|(l, ms)| format!("{l} {ms:.3}")).collect();
                    println!("|  | profile {what} (ms per step, each dispatch its own timed pass) | {} |", steps.join(", "));
                }
            }
        }
    }
    Ok(())
}

/// `bench aggregate`: GROUP BY with COUNT, SUM, MIN, MAX of an i64 column over
/// resident rows (4, 1k and 1M groups): the GPU region aggregation (strategy
/// auto) against the CPU one (same answers) and DataFusion's hash aggregation.
pub fn aggregate(lo: u32, hi: u32, iterations: usize) -> Result<()> {
    use ridgeline_operators::group_agg::{bench_group_agg, group_agg_cpu, GroupAggStrategy, HostAggColumn, HostAggValues};
    let ctx = context::global().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    let threads = rayon::current_num_threads();
    println!(
        "bench aggregate on {} ({:?}): COUNT/SUM/MIN/MAX of i64 by u32 group id, GPU wall ms (resident input, median of {iterations}); CPU region aggregation and DataFusion's GROUP BY on {threads} threads (best of {iterations})",
        ctx.info().name,
        ctx.info().backend
    );
    println!("| n | groups | GPU strategy | GPU ms | CPU ms | DataFusion ms | DataFusion/GPU |");
    println!("|{}", " --- |".repeat(7));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| DataFusionError::Execution(e.to_string()))?;
    for k in lo..=hi {
        let n = 1usize << k;
        for g in [4u32, 1000, 1_000_000] {
            if g as usize > n {
                continue;
            }
            let b = bench_group_agg(&ctx, n, g, GroupAggStrategy::Auto, iterations).map_err(|e| DataFusionError::Execution(e.to_string()))?;
            // The same data as bench_group_agg generates.
            let mut state = 0x2545_F491_4F6C_DD1Du64;
            let mut next = || {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                state
            };
            let gids: Vec<u32> = (0..n).map(|_| ((next() >> 32) % g as u64) as u32).collect();
            let vals: Vec<i64> = (0..n).map(|_| (next() >> 24) as i64 - (1 << 39)).collect();
            let cols = [HostAggColumn { values: HostAggValues::I64(&vals), validity: None }];
            let mut cpu = f64::INFINITY;
            for _ in 0..iterations.max(1) {
                let t = Instant::now();
                std::hint::black_box(group_agg_cpu(&gids, g, &cols).map_err(|e| DataFusionError::Execution(e.to_string()))?);
                cpu = cpu.min(t.elapsed().as_secs_f64() * 1e3);
            }
            let df = rt.block_on(datafusion_group_by_ms(&gids, &vals, iterations))?;
            println!("| 2^{k} | {g} | {:?} | {:.3} | {cpu:.2} | {df:.2} | {:.1} |", b.strategy, b.ms, df / b.ms);
        }
    }
    Ok(())
}

async fn datafusion_group_by_ms(gids: &[u32], vals: &[i64], iterations: usize) -> Result<f64> {
    use arrow::array::{Int64Array, UInt32Array};
    use arrow::datatypes::{DataType, Field, Schema};
    let ctx = datafusion::prelude::SessionContext::new();
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::UInt32, false), Field::new("v", DataType::Int64, false)]));
    let parts = ctx.state().config().target_partitions().max(1);
    let chunk = gids.len().div_ceil(parts).max(1);
    let mut partitions = Vec::new();
    for (g, v) in gids.chunks(chunk).zip(vals.chunks(chunk)) {
        let b = arrow::array::RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt32Array::from(g.to_vec())), Arc::new(Int64Array::from(v.to_vec()))],
        )?;
        partitions.push(vec![b]);
    }
    ctx.register_table("t", Arc::new(datafusion::datasource::MemTable::try_new(schema, partitions)?))?;
    let q = "SELECT k, count(*), sum(v), min(v), max(v) FROM t GROUP BY k";
    let mut best = f64::INFINITY;
    for i in 0..=iterations.max(1) {
        let t = Instant::now();
        let r = ctx.sql(q).await?.collect().await?;
        std::hint::black_box(r);
        if i > 0 {
            best = best.min(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    Ok(best)
}
