//! [`partition_gpu`]: the steps of the module documentation ([`super`]) as named
//! functions of one recording ([`Job`]): validation, the ids, the digit passes
//! (histogram and scan, then the fused rank-and-scatter or the rank kernel and the
//! moves), the offsets, the column moves of the unfused path, then one submission
//! and the offsets' readback.
use super::fused::{record_fused, FusedPass, FusedShape, IdSource};
use super::kernels::{alloc_like, clear_validity, entry, id_entries, scratch, Kernels, Params, F_DIRECT, F_FIRST, F_HASH, F_LAST, F_PREV, F_VALID};
use super::options::{PartitionOptions, PartitionStats, Partitioned};
use super::unfused::{record_move, record_move_validity};
use super::PartitionFn;
use crate::array::DeviceArray;
use crate::compact::{Column, CompactedColumn};
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::pool::GpuBuffer;
use crate::scan::{Pass, ScanKernel, ScanKind, ScanOptions, ScanType};
use crate::timing::KernelTimer;
use std::sync::Arc;

/// Partitions `columns` by the key columns `keys` (indices into `columns`); callers
/// wanting the defaults pass `&PartitionOptions::default()`. All columns must have
/// the same length and `seg_rows`.
pub fn partition_gpu(
    ctx: &GpuContext,
    columns: &[Column<'_>],
    keys: &[usize],
    func: &PartitionFn,
    opts: &PartitionOptions,
) -> GpuResult<Partitioned> {
    partition_timed(ctx, columns, keys, func, opts, Timing::None)
}

/// How [`partition_timed`] times its work.
pub(super) enum Timing<'a> {
    None,
    /// The whole compute pass, as pass 0 of the timer.
    Pass(&'a KernelTimer),
    /// Every dispatch in its own timed pass; milliseconds summed per step label.
    Each(&'a mut Vec<(&'static str, f64)>),
}

/// [`partition_gpu`], timed as `timing` asks.
pub(super) fn partition_timed(
    ctx: &GpuContext,
    columns: &[Column<'_>],
    keys: &[usize],
    func: &PartitionFn,
    opts: &PartitionOptions,
    timing: Timing<'_>,
) -> GpuResult<Partitioned> {
    let k = validate(columns, keys, func, opts)?;
    let n = columns[0].values.len();
    let seg = columns[0].values.seg_rows();
    let input_bytes = columns
        .iter()
        .map(|c| (c.values.len() * c.values.elem_size() + c.validity.map_or(0, |v| v.len() * 4)) as u64)
        .sum::<u64>();
    let outputs = alloc_like(ctx, columns, n, seg)?;
    let mut stats = PartitionStats { passes: func.passes(), input_bytes, ..Default::default() };
    if n == 0 {
        let fanout = func.fanout() as usize;
        if opts.device_offsets {
            let d = DeviceArray::upload_segmented(ctx, &vec![0u32; fanout + 1], (fanout + 1).div_ceil(4) * 4)?;
            return Ok(Partitioned { offsets: Vec::new(), device_offsets: Some(d), columns: outputs, stats });
        }
        return Ok(Partitioned { offsets: vec![0; fanout + 1], device_offsets: None, columns: outputs, stats });
    }
    let mut job = Job::new(ctx, columns, keys, func, opts, k);
    clear_validity(&mut job.enc, &outputs);
    // 1. partition ids
    job.record_ids()?;
    // 2. digit passes
    stats.tiles = job.total_tiles as u64;
    let temps = job.fused_temps()?;
    job.record_digit_passes(&outputs, &temps)?;
    // 3. offsets
    job.record_offsets()?;
    // 4. the columns, unless the fused passes moved them already
    job.record_column_moves(&outputs)?;
    stats.histogram_bytes = job.hist_bytes;
    stats.row_scratch_bytes = job.row_bytes;
    let (offsets, device_offsets) = job.finish(timing, opts.device_offsets)?;
    drop(temps);
    Ok(Partitioned { offsets, device_offsets, columns: outputs, stats })
}

/// Checks the columns, keys, partition function and options; the digit kernels'
/// shape.
fn validate(columns: &[Column<'_>], keys: &[usize], func: &PartitionFn, opts: &PartitionOptions) -> GpuResult<Kernels> {
    let inv = |m: String| GpuError::Invalid(m);
    if columns.is_empty() {
        return Err(inv("partition of no columns".into()));
    }
    let n = columns[0].values.len();
    let seg = columns[0].values.seg_rows();
    for c in columns {
        if c.values.len() != n || c.values.seg_rows() != seg {
            return Err(inv("partition columns of different lengths or segmentations".into()));
        }
        if let Some(v) = c.validity {
            if v.len() != n.div_ceil(32) || v.seg_rows() * 32 != seg {
                return Err(inv("validity bitmap does not match its column".into()));
            }
        }
    }
    if keys.iter().any(|&k| k >= columns.len()) {
        return Err(inv("key column index out of range".into()));
    }
    let widths: Vec<usize> = keys.iter().map(|&k| columns[k].values.elem_size()).collect();
    func.check(&widths).map_err(inv)?;
    if n as u64 >= u32::MAX as u64 {
        return Err(inv(format!("partition of {n} rows (at most 2^32 - 2)")));
    }
    let wg = opts.workgroup_size;
    if ![32, 64, 128, 256].contains(&wg) || opts.tile_rows == 0 || opts.tile_rows % wg != 0 {
        return Err(inv(format!("workgroup size {wg} / tile of {} rows", opts.tile_rows)));
    }
    Ok(Kernels { wg, chunks: opts.tile_rows / wg })
}

/// One digit pass's histogram matrix and its exclusive scan.
struct DigitPass {
    /// Digits of this pass.
    nb: u32,
    /// Shift of this pass's digit.
    dshift: u32,
    counts: GpuBuffer,
    offs: GpuBuffer,
    total: GpuBuffer,
}

/// The recording of one GPU partition: its shapes, the compute pass and encoder,
/// and the scratch that must live until the submission is done.
struct Job<'a> {
    ctx: &'a GpuContext,
    columns: &'a [Column<'a>],
    keys: &'a [usize],
    func: PartitionFn,
    k: Kernels,
    n: usize,
    seg: usize,
    fanout: u32,
    passes: u32,
    /// How the key gives a partition id (radix shift and mask, flags).
    key_pid: Params,
    /// One key column and one digit pass: the digit kernels compute the ids from
    /// the key as they read it (no ids array).
    inline: bool,
    /// The fused kernel's shape, when the fused path runs.
    fused: Option<FusedShape>,
    /// Tiles of each input segment, and all of them.
    seg_tiles: Vec<usize>,
    total_tiles: usize,
    pass: Pass,
    enc: wgpu::CommandEncoder,
    row_bytes: u64,
    hist_bytes: u64,
    /// The ids the next digit pass reads (none when computed inline).
    cur_ids: Option<DeviceArray>,
    /// Unfused, several passes: position -> input row, after the passes so far.
    src: Option<DeviceArray>,
    /// Unfused: every row's destination, once known.
    dest: Option<DeviceArray>,
    /// One pass: the scanned matrix the offsets come from.
    last_offs: Option<GpuBuffer>,
    /// The `fanout + 1` offsets on the device.
    poffs: Option<GpuBuffer>,
    keep_arrays: Vec<DeviceArray>,
    keep_bufs: Vec<GpuBuffer>,
}

impl<'a> Job<'a> {
    fn new(ctx: &'a GpuContext, columns: &'a [Column<'a>], keys: &'a [usize], func: &PartitionFn, opts: &PartitionOptions, k: Kernels) -> Job<'a> {
        let kc0 = &columns[keys[0]];
        let (shift, mask, fflags) = match *func {
            PartitionFn::Radix { shift, bits } => (shift, ((1u64 << bits) - 1) as u32, 0),
            PartitionFn::Direct { .. } => (0, 0, F_DIRECT),
            PartitionFn::Hash { .. } => (0, 0, F_HASH),
        };
        let fanout = func.fanout();
        let passes = func.passes();
        let key_pid = Params { shift, mask, fanout, flags: fflags | if kc0.validity.is_some() { F_VALID } else { 0 }, ..Default::default() };
        let fused = if opts.fused.unwrap_or(!ctx.is_cpu_adapter()) { FusedShape::new(ctx, opts) } else { None };
        let tile = opts.tile_rows as usize;
        let seg_tiles: Vec<usize> = (0..kc0.values.num_segments()).map(|s| kc0.values.segment(s).2.div_ceil(tile)).collect();
        let total_tiles = seg_tiles.iter().sum();
        Job {
            ctx,
            columns,
            keys,
            func: *func,
            k,
            n: kc0.values.len(),
            seg: kc0.values.seg_rows(),
            fanout,
            passes,
            key_pid,
            inline: passes == 1 && keys.len() == 1,
            fused,
            seg_tiles,
            total_tiles,
            pass: Pass::default(),
            enc: ctx.encoder("partition"),
            row_bytes: 0,
            hist_bytes: 0,
            cur_ids: None,
            src: None,
            dest: None,
            last_offs: None,
            poffs: None,
            keep_arrays: Vec::new(),
            keep_bufs: Vec::new(),
        }
    }

    fn key0(&self) -> &'a Column<'a> {
        &self.columns[self.keys[0]]
    }

    fn groups(&self, rows: usize) -> u64 {
        (rows as u64).div_ceil(self.k.wg as u64)
    }

    /// Step 1: unless the digit kernels compute the ids from the key, every row's
    /// partition id into a `u32` scratch array (hash: one dispatch per key column,
    /// folding into the running hash).
    fn record_ids(&mut self) -> GpuResult<()> {
        if self.inline {
            return Ok(());
        }
        let (ctx, kc0) = (self.ctx, self.key0());
        let ids = scratch(ctx, self.n, self.seg, &mut self.row_bytes)?;
        self.pass.label = "ids";
        match self.func {
            PartitionFn::Radix { .. } | PartitionFn::Direct { .. } => {
                let pipe = self.k.pipe(ctx, kc0.values.elem_size() == 8, "pid_radix")?;
                for s in 0..ids.num_segments() {
                    let (ib, _, rows) = ids.segment(s);
                    let kb = kc0.values.segment(s).0;
                    let ub = ctx.uniform(&Params { n: rows as u32, ..self.key_pid });
                    let vb = kc0.validity.map_or(kb, |v| v.segment(s).0);
                    let groups = self.groups(rows);
                    self.pass.dispatch(ctx, &pipe, &[entry(0, kb), entry(1, vb), entry(2, ib), entry(15, &ub)], groups)?;
                }
            }
            PartitionFn::Hash { .. } => {
                for (j, &kcol) in self.keys.iter().enumerate() {
                    let kc = &self.columns[kcol];
                    let pipe = self.k.pipe(ctx, kc.values.elem_size() == 8, "pid_hash")?;
                    let mut flags = if kc.validity.is_some() { F_VALID } else { 0 };
                    if j == 0 {
                        flags |= F_FIRST;
                    }
                    if j + 1 == self.keys.len() {
                        flags |= F_LAST;
                    }
                    for s in 0..ids.num_segments() {
                        let (ib, _, rows) = ids.segment(s);
                        let kb = kc.values.segment(s).0;
                        let vb = kc.validity.map_or(kb, |v| v.segment(s).0);
                        let ub = ctx.uniform(&Params { n: rows as u32, fanout: self.fanout, flags, ..Default::default() });
                        let groups = self.groups(rows);
                        self.pass.dispatch(ctx, &pipe, &[entry(0, kb), entry(1, vb), entry(2, ib), entry(15, &ub)], groups)?;
                    }
                }
            }
        }
        self.cur_ids = Some(ids);
        Ok(())
    }

    /// The temporary copies of the columns between fused passes (each written
    /// once: validity zeroed): one for two passes, two for three.
    fn fused_temps(&mut self) -> GpuResult<Vec<Vec<CompactedColumn>>> {
        let mut temps = Vec::new();
        if self.fused.is_some() {
            for _ in 0..(self.passes as usize - 1).min(2) {
                let t = alloc_like(self.ctx, self.columns, self.n, self.seg)?;
                clear_validity(&mut self.enc, &t);
                self.row_bytes += t.iter().map(|c| c.values.device_bytes() + c.validity.as_ref().map_or(0, |v| v.device_bytes())).sum::<u64>();
                temps.push(t);
            }
        }
        Ok(temps)
    }

    /// Step 2: per 8-bit digit of the id (LSD order), the histogram and its scan,
    /// then the fused rank-and-scatter of every column or the rank kernel (and,
    /// for several passes, the moves of the ids and row numbers).
    fn record_digit_passes(&mut self, outputs: &[CompactedColumn], temps: &[Vec<CompactedColumn>]) -> GpuResult<()> {
        let sk = ScanKernel::new(self.ctx, ScanType::U32, &ScanOptions::default())?;
        let wide = self.key0().values.elem_size() == 8;
        let hist_pipe = if self.inline { self.k.pipe_inline(self.ctx, wide, "histogram")? } else { self.k.pipe(self.ctx, false, "histogram")? };
        for ps in 0..self.passes {
            let dp = self.record_histogram(ps, &sk, &hist_pipe)?;
            match self.fused {
                Some(shape) => self.record_fused_pass(shape, ps, dp, outputs, temps)?,
                None => self.record_rank_pass(dp)?,
            }
        }
        Ok(())
    }

    /// The tile parameters of input segment `s` (first tile `tb`, `rows` rows) in
    /// a pass over `nb` digits at `dshift`.
    fn tile_params(&self, s: usize, tb: usize, rows: usize, nb: u32, dshift: u32) -> Params {
        Params {
            n: rows as u32,
            tiles: self.seg_tiles[s] as u32,
            tile_base: tb as u32,
            total_tiles: self.total_tiles as u32,
            nb,
            dshift,
            ..self.key_pid
        }
    }

    /// Pass `ps`'s digit histogram per tile (partition-major: `counts[b * W + w]`)
    /// and its exclusive scan: every (digit, tile)'s first output row.
    fn record_histogram(&mut self, ps: u32, sk: &ScanKernel, hist_pipe: &Arc<wgpu::ComputePipeline>) -> GpuResult<DigitPass> {
        let ctx = self.ctx;
        let kc0 = self.key0();
        let dshift = 8 * ps;
        let fanout = self.fanout;
        let nb = if fanout <= 1 { 1 } else { (((fanout - 1) >> dshift) + 1).min(256) };
        let m = nb as u64 * self.total_tiles as u64;
        let counts = ctx.pool().alloc(m.div_ceil(4) * 16)?;
        let offs = ctx.pool().alloc(m.div_ceil(4) * 16)?;
        let total = ctx.pool().alloc(16)?;
        self.hist_bytes += counts.size() + offs.size() + total.size();
        let mut tb = 0usize;
        self.pass.label = "histogram";
        for s in 0..self.seg_tiles.len() {
            let rows = kc0.values.segment(s).2;
            let ub = ctx.uniform(&self.tile_params(s, tb, rows, nb, dshift));
            let mut e = id_entries(self.cur_ids.as_ref(), kc0, s);
            e.extend([entry(4, counts.raw()), entry(15, &ub)]);
            self.pass.dispatch(ctx, hist_pipe, &e, self.seg_tiles[s] as u64)?;
            tb += self.seg_tiles[s];
        }
        let before = self.pass.keep.len();
        self.pass.label = "scan";
        sk.record(ctx, &mut self.pass, &[(counts.raw(), offs.raw(), m)], ScanKind::Exclusive, total.raw())?;
        self.hist_bytes += self.pass.keep[before..].iter().map(|b| b.size()).sum::<u64>();
        Ok(DigitPass { nb, dshift, counts, offs, total })
    }

    /// The fused rank-and-scatter of pass `ps`: every column (and, with several
    /// passes, the ids) moved by its digit, from the input or the previous pass's
    /// copy into the next copy or the outputs.
    fn record_fused_pass(&mut self, shape: FusedShape, ps: u32, dp: DigitPass, outputs: &[CompactedColumn], temps: &[Vec<CompactedColumn>]) -> GpuResult<()> {
        // ids from the key (one pass, one key column) or the ids array, moved
        // along for the next pass and the offsets when there are several
        let ids_now = self.cur_ids.take();
        let next_ids = match (&ids_now, self.passes) {
            (Some(_), 2..) => Some(scratch(self.ctx, self.n, self.seg, &mut self.row_bytes)?),
            _ => None,
        };
        let last = ps + 1 == self.passes;
        let mut ins: Vec<Column<'_>> = if ps == 0 {
            self.columns.to_vec()
        } else {
            temps[(ps as usize - 1) % 2].iter().map(|c| Column { values: &c.values, validity: c.validity.as_ref() }).collect()
        };
        let dst_cols = if last { outputs } else { &temps[ps as usize % 2] };
        let mut outs: Vec<(&DeviceArray, Option<&DeviceArray>)> = dst_cols.iter().map(|o| (&o.values, o.validity.as_ref())).collect();
        if let (Some(a), Some(nx)) = (&ids_now, &next_ids) {
            ins.push(Column::new(a));
            outs.push((nx, None));
        }
        let src = match &ids_now {
            Some(a) => IdSource::Ids(a),
            None => IdSource::Key(self.key0()),
        };
        let fp = FusedPass {
            base: Params { total_tiles: self.total_tiles as u32, nb: dp.nb, dshift: dp.dshift, ..self.key_pid },
            counts: &dp.counts,
            offs: &dp.offs,
            seg_tiles: &self.seg_tiles,
        };
        self.pass.label = "rank+scatter";
        record_fused(self.ctx, &self.k, shape, &mut self.pass, &ins, &outs, src, &fp)?;
        drop((ins, outs));
        self.keep_arrays.extend(ids_now);
        self.cur_ids = next_ids;
        self.keep_bufs.extend([dp.counts, dp.total]);
        if self.passes == 1 {
            // offsets straight from the scanned matrix
            self.last_offs = Some(dp.offs);
        } else {
            self.keep_bufs.push(dp.offs);
        }
        Ok(())
    }

    /// The unfused pass: the rank kernel's destination of every row; with several
    /// passes, the ids and row numbers moved by it (for the next pass, and sorted
    /// for the offsets at the end).
    fn record_rank_pass(&mut self, dp: DigitPass) -> GpuResult<()> {
        let ctx = self.ctx;
        let kc0 = self.key0();
        let rank_pipe = if self.inline { self.k.pipe_inline(ctx, kc0.values.elem_size() == 8, "rank")? } else { self.k.pipe(ctx, false, "rank")? };
        let dst = scratch(ctx, self.n, self.seg, &mut self.row_bytes)?;
        let mut tb = 0usize;
        self.pass.label = "rank";
        for s in 0..self.seg_tiles.len() {
            let rows = kc0.values.segment(s).2;
            let ub = ctx.uniform(&self.tile_params(s, tb, rows, dp.nb, dp.dshift));
            let mut e = id_entries(self.cur_ids.as_ref(), kc0, s);
            e.extend([entry(5, dp.offs.raw()), entry(6, dst.segment(s).0), entry(15, &ub)]);
            self.pass.dispatch(ctx, &rank_pipe, &e, self.seg_tiles[s] as u64)?;
            tb += self.seg_tiles[s];
        }
        if self.passes == 1 {
            self.dest = Some(dst);
            self.keep_bufs.push(dp.counts);
            self.last_offs = Some(dp.offs);
            self.keep_bufs.push(dp.total);
            return Ok(());
        }
        let ids_now = self.cur_ids.take().expect("several passes keep an ids array");
        let next_ids = scratch(ctx, self.n, self.seg, &mut self.row_bytes)?;
        self.pass.label = "move ids";
        record_move(ctx, &self.k, &mut self.pass, &dst, Some(&ids_now), &next_ids)?;
        let next_src = scratch(ctx, self.n, self.seg, &mut self.row_bytes)?;
        record_move(ctx, &self.k, &mut self.pass, &dst, self.src.as_ref(), &next_src)?;
        self.keep_arrays.push(ids_now);
        self.cur_ids = Some(next_ids);
        if let Some(old) = self.src.replace(next_src) {
            self.keep_arrays.push(old);
        }
        self.keep_arrays.push(dst);
        self.keep_bufs.extend([dp.counts, dp.offs, dp.total]);
        Ok(())
    }

    /// Step 3: the `fanout + 1` offsets, from the scanned matrix (one pass) or
    /// from the sorted ids (several passes; unfused, the composed permutation is
    /// then inverted into every row's destination).
    fn record_offsets(&mut self) -> GpuResult<()> {
        let ctx = self.ctx;
        let fanout = self.fanout;
        let poffs = ctx.pool().alloc(((fanout as u64 + 1) * 4).div_ceil(16) * 16)?;
        self.hist_bytes += poffs.size();
        let fgroups = (fanout as u64 + 1).div_ceil(self.k.wg as u64);
        self.pass.label = "offsets";
        if let Some(offs) = &self.last_offs {
            let pipe = self.k.pipe(ctx, false, "gather_offsets")?;
            let ub = ctx.uniform(&Params { fanout, total_tiles: self.total_tiles as u32, total: self.n as u32, ..Default::default() });
            self.pass.dispatch(ctx, &pipe, &[entry(5, offs.raw()), entry(12, poffs.raw()), entry(15, &ub)], fgroups)?;
            self.poffs = Some(poffs);
            return Ok(());
        }
        let bp = self.k.pipe(ctx, false, "bounds")?;
        let cur_ids = self.cur_ids.as_ref().expect("several passes keep an ids array");
        for s in 0..cur_ids.num_segments() {
            let (pb, _, rows) = cur_ids.segment(s);
            let flags = if s > 0 { F_PREV } else { 0 };
            let ub = ctx.uniform(&Params { n: rows as u32, flags, fanout, ..Default::default() });
            self.pass.dispatch(ctx, &bp, &[entry(3, pb), entry(12, poffs.raw()), entry(15, &ub)], fgroups)?;
        }
        self.poffs = Some(poffs);
        if self.fused.is_none() {
            // invert the composed permutation: dest[src[j]] = j
            self.pass.label = "invert";
            let src = self.src.take().expect("several passes track row numbers");
            let d = scratch(ctx, self.n, self.seg, &mut self.row_bytes)?;
            record_move(ctx, &self.k, &mut self.pass, &src, None, &d)?;
            self.keep_arrays.push(src);
            self.dest = Some(d);
        }
        Ok(())
    }

    /// Step 4 of the unfused path: every column (values, then validity bits)
    /// moved by the destinations.
    fn record_column_moves(&mut self, outputs: &[CompactedColumn]) -> GpuResult<()> {
        let Some(dest) = &self.dest else { return Ok(()) };
        self.pass.label = "move columns";
        for (c, o) in self.columns.iter().zip(outputs) {
            record_move(self.ctx, &self.k, &mut self.pass, dest, Some(c.values), &o.values)?;
            if let (Some(vin), Some(vout)) = (c.validity, &o.validity) {
                record_move_validity(self.ctx, &self.k, &mut self.pass, dest, vin, vout)?;
            }
        }
        Ok(())
    }

    /// Encodes the pass (timed as `timing` asks), submits it, and reads the
    /// offsets back (the one synchronisation; with `keep`, a device copy of them
    /// instead and no wait); the scratch lives until then.
    fn finish(self, timing: Timing<'_>, keep: bool) -> GpuResult<(Vec<u64>, Option<DeviceArray>)> {
        let ctx = self.ctx;
        let mut enc = self.enc;
        // the per-dispatch profile's timer (one pass per dispatch)
        let each = match &timing {
            Timing::Each(_) => KernelTimer::new(ctx, self.pass.len() as u32),
            _ => None,
        };
        let timer = match &timing {
            Timing::Pass(t) => {
                self.pass.encode(&mut enc, t.writes(0));
                Some(*t)
            }
            _ => match &each {
                Some(t) => {
                    self.pass.encode_each(&mut enc, t);
                    Some(t)
                }
                None => {
                    self.pass.encode(&mut enc, None);
                    None
                }
            },
        };
        let fanout = self.fanout as usize;
        let read = DeviceArray::alloc_segmented(ctx, fanout + 1, 4, (fanout + 1).div_ceil(4) * 4)?;
        let poffs = self.poffs.as_ref().expect("the offsets are recorded");
        enc.copy_buffer_to_buffer(poffs.raw(), 0, read.segment(0).0, 0, (fanout as u64 + 1) * 4);
        if let Some(t) = timer {
            t.resolve(&mut enc);
        }
        ctx.submit(enc)?;
        // Kept, the copy holds the offsets while the pooled scratch goes back to
        // the pool when `self` drops (queue order makes its reuse safe).
        let (offsets, device) = if keep {
            (Vec::new(), Some(read))
        } else {
            (read.download::<u32>(ctx)?.into_iter().map(u64::from).collect(), None)
        };
        if let (Timing::Each(out), Some(t)) = (timing, &each) {
            for (label, ms) in self.pass.labels().zip(t.read_ms(ctx)?) {
                match out.iter_mut().find(|(l, _)| *l == label) {
                    Some(e) => e.1 += ms,
                    None => out.push((label, ms)),
                }
            }
        }
        Ok((offsets, device))
    }
}
