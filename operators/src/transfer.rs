//! Host <-> device transfers as measured on the H100 (../shared/h100.md):
//! uploads go through a reused pool of MAP_WRITE staging buffers filled by several
//! threads and then copied on the device (about 30 GB/s where `queue.write_buffer`
//! gives 3.8 GB/s, so column data never goes through the queue's write path);
//! readback goes through MAP_READ staging buffers copied out by several threads.
//! Both pipeline two staging buffers so the bus and the memcpy overlap.
use crate::context::GpuContext;
use crate::error::{GpuError, GpuResult};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

const PENDING: u8 = 0;
const MAPPED: u8 = 1;
const FAILED: u8 = 2;

/// Bytes each thread copies at least (smaller pieces are not worth a task).
const PIECE: usize = 1 << 20;

struct SendPtr(*mut u8);
// SAFETY: used only to hand disjoint ranges of one mapping to worker threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

struct Stage {
    buf: wgpu::Buffer,
    state: Arc<AtomicU8>,
}

impl Stage {
    /// A new MAP_WRITE staging buffer of `bytes`, mapped at creation.
    fn new_write(ctx: &GpuContext, label: &str, bytes: u64) -> GpuResult<Stage> {
        let buf = ctx.scoped(|| {
            ctx.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            })
        })?;
        Ok(Stage { buf, state: Arc::new(AtomicU8::new(MAPPED)) })
    }

    /// Maps the (submitted) buffer for writing again; `state` turns MAPPED (or
    /// FAILED) when the device is done with it and a poll runs the callback.
    fn remap_for_write(&self) {
        self.state.store(PENDING, Ordering::Release);
        let st = self.state.clone();
        self.buf.map_async(wgpu::MapMode::Write, .., move |r| {
            st.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
        });
    }
}

/// Takes a stage of `list` that is mapped for writing; `None` while every one is
/// in flight. A stage whose mapping failed is destroyed and reported.
fn take_mapped(list: &mut Vec<Stage>) -> GpuResult<Option<Stage>> {
    let Some(i) = list.iter().position(|s| s.state.load(Ordering::Acquire) != PENDING) else { return Ok(None) };
    let s = list.swap_remove(i);
    if s.state.load(Ordering::Acquire) == FAILED {
        s.buf.destroy();
        return Err(GpuError::Map("staging buffer could not be mapped for writing".into()));
    }
    Ok(Some(s))
}

/// Staging buffers shared by every transfer of the process.
pub(crate) struct StagingPool {
    stage_bytes: u64,
    max_stages: usize,
    write: Mutex<Vec<Stage>>,
    read: Mutex<Vec<wgpu::Buffer>>,
    small: Mutex<SmallWrites>,
}

/// Bytes of one staging chunk for small writes, and the most writes wait for.
const SMALL_CHUNK: u64 = 1 << 20;
/// Chunks for small writes kept (each 1 MiB, mapped again after its submission).
const SMALL_CHUNKS: usize = 16;

/// Small host-to-device writes (kernel parameters, bucket tables, offsets) that
/// wait for the next submission. wgpu's `queue.write_buffer` and
/// `create_buffer_init` create a fresh staging buffer per call, which costs 2-3 ms
/// of host time on the H100's driver (measured with the `ridgeline::profile::select` log target);
/// these go instead through a few persistent 1 MiB MAP_WRITE chunks, as one copy
/// command buffer submitted ahead of the next command buffer.
#[derive(Default)]
pub(crate) struct SmallWrites {
    pending: Vec<(wgpu::Buffer, u64, Vec<u8>)>,
    chunks: Vec<Stage>,
}

impl SmallWrites {
    /// Bytes waiting.
    fn bytes(&self) -> u64 {
        self.pending.iter().map(|p| p.2.len() as u64).sum()
    }
}

impl StagingPool {
    pub(crate) fn new(cpu_adapter: bool) -> Self {
        StagingPool {
            stage_bytes: if cpu_adapter { 16 << 20 } else { 64 << 20 },
            max_stages: 4,
            write: Mutex::new(Vec::new()),
            read: Mutex::new(Vec::new()),
            small: Mutex::new(SmallWrites::default()),
        }
    }
}

/// A byte stream to upload. `write` fills `dst` with the bytes at
/// `[offset, offset + dst.len())` of the stream; it is called from several
/// threads at once on disjoint ranges whose offsets are multiples of 4096.
pub trait UploadSource: Sync {
    /// Total bytes (a multiple of 4).
    fn len_bytes(&self) -> u64;
    /// Writes the bytes at `offset..offset + dst.len()`.
    fn write(&self, offset: u64, dst: wgpu::WriteOnly<'_, [u8]>);
}

/// A plain byte slice as an upload source; its length is padded with zeros to a
/// multiple of 4.
pub struct BytesSource<'a>(pub &'a [u8]);

impl UploadSource for BytesSource<'_> {
    fn len_bytes(&self) -> u64 {
        (self.0.len() as u64).div_ceil(4) * 4
    }
    fn write(&self, offset: u64, mut dst: wgpu::WriteOnly<'_, [u8]>) {
        let off = offset as usize;
        let end = (off + dst.len()).min(self.0.len());
        let have = end.saturating_sub(off);
        if have == dst.len() {
            dst.copy_from_slice(&self.0[off..end]);
        } else {
            let (mut a, mut b) = dst.split_at(have);
            a.copy_from_slice(&self.0[off..end]);
            b.fill(0);
        }
    }
}

/// One destination extent of a transfer: `len` bytes at `offset` of `buffer`,
/// holding the stream's bytes from `stream_offset`.
#[derive(Clone, Copy)]
pub struct Extent<'a> {
    /// Device buffer.
    pub buffer: &'a wgpu::Buffer,
    /// Byte offset in the buffer.
    pub offset: u64,
    /// Byte offset in the logical stream.
    pub stream_offset: u64,
    /// Bytes (a multiple of 4).
    pub len: u64,
}

fn encode_extent_copies(
    enc: &mut wgpu::CommandEncoder,
    stage: &wgpu::Buffer,
    extents: &[Extent<'_>],
    chunk_start: u64,
    chunk_len: u64,
    upload: bool,
) {
    let chunk_end = chunk_start + chunk_len;
    for e in extents {
        let s = e.stream_offset.max(chunk_start);
        let t = (e.stream_offset + e.len).min(chunk_end);
        if s >= t {
            continue;
        }
        let dev_off = e.offset + (s - e.stream_offset);
        let stage_off = s - chunk_start;
        if upload {
            enc.copy_buffer_to_buffer(stage, stage_off, e.buffer, dev_off, t - s);
        } else {
            enc.copy_buffer_to_buffer(e.buffer, dev_off, stage, stage_off, t - s);
        }
    }
}

impl GpuContext {
    /// Writes `data` (a multiple of 4 bytes) at `offset` of `dst`, ordered like
    /// `queue.write_buffer`: commands submitted afterwards see it. Small writes wait
    /// for the next submission (see [`SmallWrites`]); large ones go through
    /// [`GpuContext::upload_stream`] at once.
    pub fn write_small(&self, dst: &wgpu::Buffer, offset: u64, data: &[u8]) -> GpuResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        if data.len() % 4 != 0 || offset % 4 != 0 {
            return Err(GpuError::Invalid(format!("write of {} bytes at {offset}: not a multiple of 4", data.len())));
        }
        let len = data.len() as u64;
        if len > SMALL_CHUNK / 4 {
            return self.upload_stream(&BytesSource(data), &[Extent { buffer: dst, offset, stream_offset: 0, len }]);
        }
        let mut sw = self.staging.small.lock().unwrap();
        if sw.bytes() + len > SMALL_CHUNK {
            // Flush what waits on its own, so this write fits the next chunk.
            self.submit_locked(&mut sw, Vec::new())?;
        }
        sw.pending.push((dst.clone(), offset, data.to_vec()));
        Ok(())
    }

    /// The pending small writes as one copy command buffer, and the chunk it reads
    /// (to be mapped again once submitted).
    fn flush_small(&self, sw: &mut SmallWrites) -> GpuResult<Option<(wgpu::CommandBuffer, Stage)>> {
        if sw.pending.is_empty() {
            return Ok(None);
        }
        let stage = loop {
            if let Some(s) = take_mapped(&mut sw.chunks)? {
                break s;
            }
            if sw.chunks.len() < SMALL_CHUNKS {
                break Stage::new_write(self, "ridgeline-small-writes", SMALL_CHUNK)?;
            }
            // Every chunk is in flight: let the device finish, then look again
            // (the map callbacks only touch the chunks' states).
            self.wait_device()?;
        };
        let total = sw.bytes();
        let pending = std::mem::take(&mut sw.pending);
        let mut enc = self.encoder("small-writes");
        {
            let mut view = stage.buf.slice(0..total).get_mapped_range_mut().map_err(|e| GpuError::Map(e.to_string()))?;
            let mut at = 0usize;
            for (_, _, data) in &pending {
                view.slice(at..at + data.len()).copy_from_slice(data);
                at += data.len();
            }
        }
        stage.buf.unmap();
        let mut at = 0u64;
        for (dst, offset, data) in &pending {
            enc.copy_buffer_to_buffer(&stage.buf, at, dst, *offset, data.len() as u64);
            at += data.len() as u64;
        }
        Ok(Some((enc.finish(), stage)))
    }

    /// Submits `buffers` after the pending small writes, in one queue submission.
    /// The writes' lock is held across the submission, so no thread's commands can
    /// overtake writes queued before them.
    pub(crate) fn submit_buffers(&self, buffers: Vec<wgpu::CommandBuffer>) -> GpuResult<wgpu::SubmissionIndex> {
        let mut sw = self.staging.small.lock().unwrap();
        self.submit_locked(&mut sw, buffers)
    }

    fn submit_locked(&self, sw: &mut SmallWrites, buffers: Vec<wgpu::CommandBuffer>) -> GpuResult<wgpu::SubmissionIndex> {
        let idx = match self.flush_small(sw)? {
            Some((cb, stage)) => {
                let idx = self.queue.submit(std::iter::once(cb).chain(buffers));
                stage.remap_for_write();
                sw.chunks.push(stage);
                idx
            }
            None => self.queue.submit(buffers),
        };
        Ok(idx)
    }

    fn acquire_write_stage(&self) -> GpuResult<Stage> {
        loop {
            {
                let mut list = self.staging.write.lock().unwrap();
                if let Some(s) = take_mapped(&mut list)? {
                    return Ok(s);
                }
                if list.len() < self.staging.max_stages {
                    drop(list);
                    return Stage::new_write(self, "ridgeline-upload-stage", self.staging.stage_bytes);
                }
            }
            // Every stage is in flight: wait for the device, then look again.
            self.wait()?;
        }
    }

    fn release_write_stage(&self, stage: Stage) {
        stage.remap_for_write();
        self.staging.write.lock().unwrap().push(stage);
    }

    /// Uploads the stream `src` into the destination `extents` (which together cover
    /// the stream) through the staging pool, filling each staging buffer from
    /// several threads. Returns once the copies are submitted; work submitted later
    /// on the same queue sees the data.
    pub fn upload_stream(&self, src: &dyn UploadSource, extents: &[Extent<'_>]) -> GpuResult<()> {
        let total = src.len_bytes();
        if total % 4 != 0 {
            return Err(GpuError::Invalid(format!("upload of {total} bytes is not a multiple of 4")));
        }
        let stage_bytes = self.staging.stage_bytes;
        let mut start = 0u64;
        while start < total {
            let len = (total - start).min(stage_bytes);
            let stage = self.acquire_write_stage()?;
            {
                let mut view = stage
                    .buf
                    .slice(0..len)
                    .get_mapped_range_mut()
                    .map_err(|e| GpuError::Map(e.to_string()))?;
                // WriteOnly<[u8]> is not Send in wgpu 30, so the pieces travel as
                // raw ranges of the mapping, each rebuilt on its worker thread.
                let base = SendPtr(view.slice(..).as_raw_element_ptr().as_ptr());
                let piece = (len as usize).div_ceil(rayon::current_num_threads().max(1)).max(PIECE).div_ceil(4096) * 4096;
                let ranges: Vec<(usize, usize)> =
                    (0..len as usize).step_by(piece).map(|s| (s, piece.min(len as usize - s))).collect();
                ranges.into_par_iter().for_each(|(s, l)| {
                    let b = &base;
                    // SAFETY: the ranges are disjoint and lie inside the mapped range,
                    // which stays mapped until `view` is dropped after this loop.
                    let part = unsafe { std::slice::from_raw_parts_mut(b.0.add(s), l) };
                    src.write(start + s as u64, wgpu::WriteOnly::from(part));
                });
            }
            stage.buf.unmap();
            let mut enc = self.encoder("upload");
            encode_extent_copies(&mut enc, &stage.buf, extents, start, len, true);
            self.submit(enc)?;
            self.release_write_stage(stage);
            start += len;
        }
        Ok(())
    }

    fn acquire_read_stage(&self) -> GpuResult<wgpu::Buffer> {
        if let Some(b) = self.staging.read.lock().unwrap().pop() {
            return Ok(b);
        }
        self.scoped(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("ridgeline-readback-stage"),
                size: self.staging.stage_bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Reads the device `extents` (together the stream `0..dst.len()`) into `dst`
    /// through MAP_READ staging buffers, two in flight, copied out by several threads.
    pub fn download_stream(&self, extents: &[Extent<'_>], dst: &mut [u8]) -> GpuResult<()> {
        let total = dst.len() as u64;
        let stage_bytes = self.staging.stage_bytes;
        let mut inflight: VecDeque<(wgpu::Buffer, u64, u64, Arc<AtomicU8>)> = VecDeque::new();
        let mut next = 0u64;
        let mut result = Ok(());
        while next < total || !inflight.is_empty() {
            while next < total && inflight.len() < 2 {
                let len = (total - next).min(stage_bytes);
                let copy_len = len.div_ceil(4) * 4;
                let stage = self.acquire_read_stage()?;
                let mut enc = self.encoder("readback");
                encode_extent_copies(&mut enc, &stage, extents, next, copy_len, false);
                self.submit(enc)?;
                let st = Arc::new(AtomicU8::new(PENDING));
                let st2 = st.clone();
                stage.map_async(wgpu::MapMode::Read, 0..copy_len, move |r| {
                    st2.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
                });
                inflight.push_back((stage, next, len, st));
                next += len;
            }
            let (stage, start, len, st) = inflight.pop_front().expect("loop condition");
            while st.load(Ordering::Acquire) == PENDING {
                self.wait()?;
            }
            if st.load(Ordering::Acquire) == FAILED {
                result = Err(GpuError::Map("staging buffer could not be mapped for reading".into()));
                stage.destroy();
                continue;
            }
            {
                let view = stage.slice(0..len.div_ceil(4) * 4).get_mapped_range().map_err(|e| GpuError::Map(e.to_string()))?;
                let out = &mut dst[start as usize..(start + len) as usize];
                let piece = out.len().div_ceil(rayon::current_num_threads().max(1)).max(PIECE);
                out.par_chunks_mut(piece)
                    .zip(view[..len as usize].par_chunks(piece))
                    .for_each(|(d, s)| d.copy_from_slice(s));
            }
            stage.unmap();
            self.staging.read.lock().unwrap().push(stage);
        }
        result
    }

    /// Uploads through `queue.write_buffer`, for comparison in `bench transfer` only.
    pub fn upload_via_queue(&self, data: &[u8], dst: &wgpu::Buffer) -> GpuResult<()> {
        self.queue.write_buffer(dst, 0, data);
        self.queue.submit([]);
        self.wait()
    }

    /// Frees idle staging buffers.
    pub fn trim_staging(&self) {
        for s in self.staging.write.lock().unwrap().drain(..) {
            s.buf.destroy();
        }
        for b in self.staging.read.lock().unwrap().drain(..) {
            b.destroy();
        }
    }
}
