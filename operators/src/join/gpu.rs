//! The GPU join: the build table by the stable partition, the probe kernels of
//! shaders/join/ (see the module documentation, [`super`]).
use super::{bucket_count, JoinOptions, KeyColumn, KeyWidth};
use crate::array::DeviceArray;
use crate::compact::Column;
use crate::context::{dispatch_dims, GpuContext};
use crate::error::{GpuError, GpuResult};
use crate::partition::{partition_gpu, PartitionFn, PartitionOptions};
use crate::scan::{scan, ScanKind, ScanOptions, ScanType};
use std::sync::Arc;

const HASH_WGSL: &str = include_str!("../../../shaders/hash.wgsl");
const COMMON_WGSL: &str = include_str!("../../../shaders/join/common.wgsl");
const COUNT_WGSL: &str = include_str!("../../../shaders/join/count.wgsl");
const WRITE_WGSL: &str = include_str!("../../../shaders/join/write.wgsl");
const MATCHED_WGSL: &str = include_str!("../../../shaders/join/matched.wgsl");
const BUCKETS_WGSL: &str = include_str!("../../../shaders/join/buckets.wgsl");

const F_WIDE: u32 = 1;
const F_PVALID: u32 = 2;
const F_BVALID: u32 = 4;

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    rows: u32,
    row_base: u32,
    out_base: u32,
    grid: u32,
    flags: u32,
    mask: u32,
    capacity: u32,
    skip: u32,
    run: u32,
    pad0: u32,
    pad1: u32,
}

/// A build table on the device (see [`build_table_gpu`]).
#[derive(Debug)]
pub struct DeviceJoinTable {
    /// The build keys grouped by bucket (each bucket in build order).
    keys: DeviceArray,
    /// Their validity bits, when some build key is NULL.
    validity: Option<DeviceArray>,
    /// The build row of every entry.
    rows: DeviceArray,
    /// `fanout + 1` bucket offsets.
    offsets: DeviceArray,
    fanout: u32,
    width: KeyWidth,
    build_rows: usize,
    /// Entries of the longest bucket.
    longest: u32,
}

impl DeviceJoinTable {
    /// Entries of the longest bucket (build rows of the most repeated key, at least).
    pub fn longest_bucket(&self) -> u32 {
        self.longest
    }
    /// Build rows (NULL keys included).
    pub fn build_rows(&self) -> usize {
        self.build_rows
    }
    /// Buckets.
    pub fn buckets(&self) -> u32 {
        self.fanout
    }
    /// The key width.
    pub fn width(&self) -> KeyWidth {
        self.width
    }
    /// The table in host memory, for tests: key words, build rows, bucket offsets.
    #[doc(hidden)]
    pub fn download(&self, ctx: &GpuContext) -> GpuResult<(Vec<u32>, Vec<u32>, Vec<u32>)> {
        let keys = if self.keys.elem_size() == 8 {
            self.keys.download::<u64>(ctx)?.into_iter().flat_map(|k| [k as u32, (k >> 32) as u32]).collect()
        } else {
            self.keys.download::<u32>(ctx)?
        };
        Ok((keys, self.rows.download(ctx)?, self.offsets.download(ctx)?))
    }
    /// Device bytes held.
    pub fn device_bytes(&self) -> u64 {
        self.keys.device_bytes() + self.validity.as_ref().map_or(0, |v| v.device_bytes()) + self.rows.device_bytes() + self.offsets.device_bytes()
    }
}

fn elem_of(width: KeyWidth) -> usize {
    if width == KeyWidth::I64 {
        8
    } else {
        4
    }
}

fn check_column(c: &KeyColumn<'_>, what: &str) -> GpuResult<()> {
    let elem = elem_of(c.width);
    if c.keys.elem_size() != elem || c.keys.len() < c.rows {
        return Err(GpuError::Invalid(format!("{what}: {} keys of {elem} bytes expected, got {} of {}", c.rows, c.keys.len(), c.keys.elem_size())));
    }
    let seg = c.keys.seg_rows();
    let segments = c.rows.div_ceil(seg);
    if segments > 1 && seg % 32 != 0 {
        return Err(GpuError::Invalid(format!("{what}: key segments of {seg} rows (expected a multiple of 32)")));
    }
    if let Some(v) = c.validity {
        if v.num_segments() < segments || (segments > 1 && v.seg_rows() != seg / 32) {
            return Err(GpuError::Invalid(format!("{what}: validity bitmap not split like its keys")));
        }
    }
    Ok(())
}

/// The build table of `build` (one segment: a build side must fit one binding).
pub fn build_table_gpu(ctx: &GpuContext, build: &KeyColumn<'_>, opts: &JoinOptions) -> GpuResult<DeviceJoinTable> {
    check_column(build, "join build side")?;
    let n = build.rows;
    let seg = build.keys.seg_rows();
    if n > seg {
        return Err(GpuError::Invalid(format!("join build side of {n} rows exceeds one binding ({seg} rows)")));
    }
    if n >= u32::MAX as usize {
        return Err(GpuError::Invalid(format!("join build side of {n} rows")));
    }
    if n == 0 {
        // nothing can match: one empty bucket (the probes return before binding it)
        let one = |v: u32| DeviceArray::upload_segmented(ctx, &[v; 4], 4);
        return Ok(DeviceJoinTable { keys: one(0)?, validity: None, rows: one(0)?, offsets: one(0)?, fanout: 1, width: build.width, build_rows: 0, longest: 0 });
    }
    let fanout = bucket_count(n, opts.buckets_per_row);
    let iota: Vec<u32> = (0..n as u32).collect();
    let rows = DeviceArray::upload_segmented(ctx, &iota, seg.max(4))?;
    let key_col = Column { values: build.keys, validity: build.validity };
    let popts = PartitionOptions { device_offsets: true, ..Default::default() };
    let mut part = partition_gpu(ctx, &[key_col, Column::new(&rows)], &[0], &PartitionFn::Hash { fanout }, &popts)?;
    let offsets = part.device_offsets.take().ok_or_else(|| GpuError::Invalid("partition kept no device offsets".into()))?;
    let mut cols = part.columns.into_iter();
    let (Some(k), Some(r)) = (cols.next(), cols.next()) else {
        return Err(GpuError::Invalid("partition returned too few columns".into()));
    };
    let longest = longest_bucket(ctx, &offsets, fanout, opts)?;
    Ok(DeviceJoinTable { keys: k.values, validity: k.validity, rows: r.values, offsets, fanout, width: build.width, build_rows: n, longest })
}

/// The longest bucket of a table's offsets (the build's one synchronisation).
fn longest_bucket(ctx: &GpuContext, offsets: &DeviceArray, fanout: u32, opts: &JoinOptions) -> GpuResult<u32> {
    check_opts(ctx, opts)?;
    let out = DeviceArray::upload_segmented(ctx, &[0u32; 4], 4)?;
    let pipe = pipe(ctx, "longest_bucket", BUCKETS_WGSL, opts.workgroup_size)?;
    let mut enc = ctx.encoder("join-longest");
    let params = Params { rows: fanout, ..Default::default() };
    let ob = offsets.segment(0).0;
    dispatch(ctx, &mut enc, &pipe, params, &[(5, ob), (8, out.segment(0).0)], opts.workgroup_size)?;
    ctx.submit(enc)?;
    Ok(out.download::<u32>(ctx)?[0])
}

/// Pairs of one probe range on the device: `len` (probe row, build row) pairs.
#[derive(Debug)]
pub struct JoinPairs {
    /// Probe rows (global rows of the probe column).
    pub probe: DeviceArray,
    /// Build rows.
    pub build: DeviceArray,
    /// Pairs.
    pub len: usize,
}

impl JoinPairs {
    /// The pairs in host memory: `(probe rows, build rows)`.
    pub fn download(&self, ctx: &GpuContext) -> GpuResult<(Vec<u32>, Vec<u32>)> {
        if self.len == 0 {
            return Ok((Vec::new(), Vec::new()));
        }
        let mut p: Vec<u32> = self.probe.download(ctx)?;
        let mut b: Vec<u32> = self.build.download(ctx)?;
        p.truncate(self.len);
        b.truncate(self.len);
        Ok((p, b))
    }
}

struct Kernels {
    count: Arc<wgpu::ComputePipeline>,
    write: Arc<wgpu::ComputePipeline>,
    wg: u32,
    run: u32,
}

/// Bucket entries one probe dispatch walks per row: a CPU adapter stops loops after
/// 65535 iterations, so there a long bucket takes several rounds.
fn run_of(ctx: &GpuContext) -> u32 {
    if ctx.is_cpu_adapter() {
        crate::tuning::join::CPU_ADAPTER_RUN
    } else {
        u32::MAX
    }
}

fn pipe(ctx: &GpuContext, entry: &str, stage: &'static str, wg: u32) -> GpuResult<Arc<wgpu::ComputePipeline>> {
    ctx.pipeline_lazy("join", entry, &[("WG", wg.to_string())], || Ok(format!("{HASH_WGSL}\n{COMMON_WGSL}\n{stage}")))
}

fn check_opts(ctx: &GpuContext, opts: &JoinOptions) -> GpuResult<()> {
    let wg = opts.workgroup_size;
    if wg == 0 || wg % 32 != 0 || wg > ctx.limits().max_compute_invocations_per_workgroup.min(1024) {
        return Err(GpuError::Invalid(format!("join workgroup size {wg} (expected a multiple of 32 the adapter allows)")));
    }
    Ok(())
}

/// One dispatch of `pipe` over `rows` rows.
fn dispatch(ctx: &GpuContext, enc: &mut wgpu::CommandEncoder, pipe: &wgpu::ComputePipeline, params: Params, bufs: &[(u32, &wgpu::Buffer)], wg: u32) -> GpuResult<()> {
    let (x, y, z) = dispatch_dims((params.rows as u64).div_ceil(wg as u64).max(1), ctx.limits().max_compute_workgroups_per_dimension);
    let ub = ctx.uniform(&Params { grid: x, ..params });
    let layout = pipe.get_bind_group_layout(0);
    let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: ub.as_entire_binding() }];
    entries.extend(bufs.iter().map(|(b, buf)| wgpu::BindGroupEntry { binding: *b, resource: buf.as_entire_binding() }));
    let bg = ctx.scoped(|| ctx.device.create_bind_group(&wgpu::BindGroupDescriptor { label: Some("join"), layout: &layout, entries: &entries }))?;
    let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("join"), timestamp_writes: None });
    pass.set_pipeline(pipe);
    pass.set_bind_group(0, &bg, &[]);
    pass.dispatch_workgroups(x, y, z);
    Ok(())
}

/// The bound buffers every probe kernel reads: probe keys and validity of one
/// segment, and the table.
struct Bound<'a> {
    pkeys: &'a wgpu::Buffer,
    pvalid: &'a wgpu::Buffer,
    flags: u32,
    table: &'a DeviceJoinTable,
}

impl<'a> Bound<'a> {
    fn new(table: &'a DeviceJoinTable, probe: &KeyColumn<'a>, s: usize) -> Bound<'a> {
        let (pkeys, _, _) = probe.keys.segment(s);
        let mut flags = if table.width == KeyWidth::I64 { F_WIDE } else { 0 };
        let pvalid = match probe.validity {
            Some(v) => {
                flags |= F_PVALID;
                v.segment(s).0
            }
            None => pkeys,
        };
        if table.validity.is_some() {
            flags |= F_BVALID;
        }
        Bound { pkeys, pvalid, flags, table }
    }
    fn entries(&self) -> Vec<(u32, &'a wgpu::Buffer)> {
        let bkeys = self.table.keys.segment(0).0;
        let bvalid = self.table.validity.as_ref().map_or(bkeys, |v| v.segment(0).0);
        vec![(1, self.pkeys), (2, self.pvalid), (3, bkeys), (4, bvalid), (5, self.table.offsets.segment(0).0)]
    }
    fn params(&self, rows: usize, row_base: usize, out_base: usize, capacity: usize) -> Params {
        Params {
            rows: rows as u32,
            row_base: row_base as u32,
            out_base: out_base as u32,
            flags: self.flags,
            mask: self.table.fanout - 1,
            capacity: capacity as u32,
            ..Default::default()
        }
    }
    /// The rounds of `run` bucket entries a probe walks: `(skip, run)` each.
    fn rounds(&self, run: u32) -> impl Iterator<Item = (u32, u32)> {
        let run = run.max(1);
        let n = self.table.longest.div_ceil(run).max(1);
        (0..n).map(move |r| (r * run, run))
    }
}

fn check_probe(table: &DeviceJoinTable, probe: &KeyColumn<'_>) -> GpuResult<()> {
    check_column(probe, "join probe side")?;
    if probe.width != table.width && (elem_of(probe.width) != elem_of(table.width)) {
        return Err(GpuError::Invalid(format!("join keys of {:?} probed against a {:?} table", probe.width, table.width)));
    }
    if probe.rows >= u32::MAX as usize {
        return Err(GpuError::Invalid(format!("join probe side of {} rows", probe.rows)));
    }
    Ok(())
}

/// Every (probe row, build row) pair of equal valid keys, probe-major with build
/// rows ascending, as device arrays in probe order (one or more per probe
/// segment).
pub fn probe_gpu(ctx: &GpuContext, table: &DeviceJoinTable, probe: &KeyColumn<'_>, opts: &JoinOptions) -> GpuResult<Vec<JoinPairs>> {
    check_opts(ctx, opts)?;
    check_probe(table, probe)?;
    let mut out = Vec::new();
    if probe.rows == 0 || table.build_rows == 0 {
        return Ok(out);
    }
    let k = Kernels { count: pipe(ctx, "count", COUNT_WGSL, opts.workgroup_size)?, write: pipe(ctx, "write", WRITE_WGSL, opts.workgroup_size)?, wg: opts.workgroup_size, run: run_of(ctx) };
    let limit = opts.max_pairs.unwrap_or(ctx.segment_rows()).clamp(1, ctx.segment_rows().min(i32::MAX as usize));
    let seg = probe.keys.seg_rows();
    for s in 0..probe.rows.div_ceil(seg) {
        let start = s * seg;
        let rows = (probe.rows - start).min(seg);
        let b = Bound::new(table, probe, s);
        probe_range(ctx, &k, &b, 0, rows, start, limit, opts, &mut out)?;
    }
    Ok(out)
}

/// Rows `row_base .. row_base + rows` of one bound probe segment (probe rows
/// `out_base ..`); halves the range while its pairs exceed `limit`.
#[allow(clippy::too_many_arguments)]
fn probe_range(
    ctx: &GpuContext,
    k: &Kernels,
    b: &Bound<'_>,
    row_base: usize,
    rows: usize,
    out_base: usize,
    limit: usize,
    opts: &JoinOptions,
    out: &mut Vec<JoinPairs>,
) -> GpuResult<()> {
    let counts = DeviceArray::alloc_segmented(ctx, rows, 4, rows.div_ceil(4) * 4)?;
    let total = DeviceArray::upload_segmented(ctx, &[0u32; 4], 4)?;
    let mut enc = ctx.encoder("join-count");
    let mut bufs = b.entries();
    bufs.extend([(7, counts.segment(0).0), (8, total.segment(0).0)]);
    for (skip, run) in b.rounds(k.run) {
        dispatch(ctx, &mut enc, &k.count, Params { skip, run, ..b.params(rows, row_base, out_base, 0) }, &bufs, k.wg)?;
    }
    ctx.submit(enc)?;
    let guess = (rows as u64 * opts.pairs_per_row_guess.max(1) as u64).clamp(4, limit as u64) as usize;
    let mut pairs = write_pairs(ctx, k, b, &counts, row_base, rows, out_base, guess)?;
    let t = total.download::<u32>(ctx)?;
    let n = t[0] as u64 | (t[1] as u64) << 32;
    if n > limit as u64 {
        if rows == 1 {
            return Err(GpuError::Invalid(format!("one probe row matches {n} build rows, more pairs than one binding holds")));
        }
        drop((pairs, counts));
        let half = rows / 2;
        probe_range(ctx, k, b, row_base, half, out_base, limit, opts, out)?;
        return probe_range(ctx, k, b, row_base + half, rows - half, out_base + half, limit, opts, out);
    }
    let n = n as usize;
    if n > guess {
        pairs = write_pairs(ctx, k, b, &counts, row_base, rows, out_base, n)?;
    }
    pairs.len = n;
    if n > 0 {
        out.push(pairs);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn write_pairs(ctx: &GpuContext, k: &Kernels, b: &Bound<'_>, counts: &DeviceArray, row_base: usize, rows: usize, out_base: usize, capacity: usize) -> GpuResult<JoinPairs> {
    // every row's first slot (the write pass moves them on, so each pass scans anew)
    let starts = scan(ctx, counts, ScanType::U32, ScanKind::Exclusive, &ScanOptions::default())?.values;
    let cap = capacity.max(4).div_ceil(4) * 4;
    let probe = DeviceArray::alloc_segmented(ctx, cap, 4, cap)?;
    let build = DeviceArray::alloc_segmented(ctx, cap, 4, cap)?;
    let mut enc = ctx.encoder("join-write");
    let mut bufs = b.entries();
    bufs.extend([(6, b.table.rows.segment(0).0), (7, starts.segment(0).0), (8, probe.segment(0).0), (9, build.segment(0).0)]);
    for (skip, run) in b.rounds(k.run) {
        dispatch(ctx, &mut enc, &k.write, Params { skip, run, ..b.params(rows, row_base, out_base, capacity) }, &bufs, k.wg)?;
    }
    ctx.submit(enc)?;
    Ok(JoinPairs { probe, build, len: 0 })
}

/// The bitmap (bit `i % 32` of word `i / 32`, one segment) of the probe rows with
/// a matching build row: semi, anti and mark joins.
pub fn probe_matched_gpu(ctx: &GpuContext, table: &DeviceJoinTable, probe: &KeyColumn<'_>, opts: &JoinOptions) -> GpuResult<DeviceArray> {
    check_opts(ctx, opts)?;
    check_probe(table, probe)?;
    let words = probe.rows.div_ceil(32).max(1);
    let bits = DeviceArray::alloc_segmented(ctx, words.div_ceil(4) * 4, 4, words.div_ceil(4) * 4)?;
    let mut enc = ctx.encoder("join-matched");
    enc.clear_buffer(bits.segment(0).0, 0, None);
    if probe.rows > 0 && table.build_rows > 0 {
        let pipe = pipe(ctx, "matched", MATCHED_WGSL, opts.workgroup_size)?;
        let seg = probe.keys.seg_rows();
        for s in 0..probe.rows.div_ceil(seg) {
            let start = s * seg;
            let rows = (probe.rows - start).min(seg);
            let b = Bound::new(table, probe, s);
            let mut bufs = b.entries();
            bufs.push((8, bits.segment(0).0));
            for (skip, run) in b.rounds(run_of(ctx)) {
                dispatch(ctx, &mut enc, &pipe, Params { skip, run, ..b.params(rows, 0, start, 0) }, &bufs, opts.workgroup_size)?;
            }
        }
    }
    ctx.submit(enc)?;
    Ok(bits)
}
