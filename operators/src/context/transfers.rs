//! The transfers: [`GpuContext`] methods that move bytes through the staging pool
//! ([`crate::transfer`]): staged uploads and readbacks filled and emptied by several
//! threads, and small writes that wait for the next submission.
use super::GpuContext;
use crate::error::{GpuError, GpuResult};
use crate::transfer::{encode_extent_copies, take_mapped, BytesSource, Extent, SmallWrites, Stage, UploadSource, FAILED, MAPPED, PENDING};
use crate::tuning::device::{COPY_PIECE_BYTES, SMALL_CHUNKS, SMALL_CHUNK_BYTES};
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

struct SendPtr(*mut u8);
// SAFETY: used only to hand disjoint ranges of one mapping to worker threads.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

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
        if len > SMALL_CHUNK_BYTES / 4 {
            return self.upload_stream(&BytesSource(data), &[Extent { buffer: dst, offset, stream_offset: 0, len }]);
        }
        let mut sw = self.staging.small.lock().unwrap();
        if sw.bytes() + len > SMALL_CHUNK_BYTES {
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
                break self.new_write_stage("ridgeline-small-writes", SMALL_CHUNK_BYTES)?;
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

    /// A new MAP_WRITE staging buffer of `bytes`, mapped at creation.
    fn new_write_stage(&self, label: &str, bytes: u64) -> GpuResult<Stage> {
        let buf = self.scoped(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            })
        })?;
        Ok(Stage::mapped(buf))
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
                    return self.new_write_stage("ridgeline-upload-stage", self.staging.stage_bytes);
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
                let piece = (len as usize).div_ceil(rayon::current_num_threads().max(1)).max(COPY_PIECE_BYTES).div_ceil(4096) * 4096;
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
                let piece = out.len().div_ceil(rayon::current_num_threads().max(1)).max(COPY_PIECE_BYTES);
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
