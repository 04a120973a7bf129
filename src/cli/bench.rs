//! `ridgeline bench ...`: benchmarks printed as tables.
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::{context, DeviceArray};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
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
