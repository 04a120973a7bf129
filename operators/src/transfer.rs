//! Host <-> device transfers as measured on the H100 (../shared/h100.md):
//! uploads go through a reused pool of MAP_WRITE staging buffers filled by several
//! threads and then copied on the device (about 30 GB/s where `queue.write_buffer`
//! gives 3.8 GB/s, so column data never goes through the queue's write path);
//! readback goes through MAP_READ staging buffers copied out by several threads.
//! Both pipeline two staging buffers so the bus and the memcpy overlap.
//!
//! This module holds what a transfer moves ([`UploadSource`], [`Extent`]) and the
//! staging pool the context owns; the transfers themselves are [`GpuContext`]
//! methods (`upload_stream`, `download_stream`, `write_small`, in
//! `context/transfers.rs`). It depends on no context, so the context can own the pool.
//!
//! [`GpuContext`]: crate::context::GpuContext
use crate::error::{GpuError, GpuResult};
use crate::tuning::device::{CPU_ADAPTER_STAGE_BYTES, MAX_STAGES, STAGE_BYTES};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

/// Map states of a staging buffer.
pub(crate) const PENDING: u8 = 0;
pub(crate) const MAPPED: u8 = 1;
pub(crate) const FAILED: u8 = 2;

/// A MAP_WRITE staging buffer and its map state.
pub(crate) struct Stage {
    pub(crate) buf: wgpu::Buffer,
    pub(crate) state: Arc<AtomicU8>,
}

impl Stage {
    /// A stage for `buf`, created mapped for writing (`mapped_at_creation`).
    pub(crate) fn mapped(buf: wgpu::Buffer) -> Stage {
        Stage { buf, state: Arc::new(AtomicU8::new(MAPPED)) }
    }

    /// Maps the (submitted) buffer for writing again; `state` turns MAPPED (or
    /// FAILED) when the device is done with it and a poll runs the callback.
    pub(crate) fn remap_for_write(&self) {
        self.state.store(PENDING, Ordering::Release);
        let st = self.state.clone();
        self.buf.map_async(wgpu::MapMode::Write, .., move |r| {
            st.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
        });
    }
}

/// Takes a stage of `list` that is mapped for writing; `None` while every one is
/// in flight. A stage whose mapping failed is destroyed and reported.
pub(crate) fn take_mapped(list: &mut Vec<Stage>) -> GpuResult<Option<Stage>> {
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
    pub(crate) stage_bytes: u64,
    pub(crate) max_stages: usize,
    pub(crate) write: Mutex<Vec<Stage>>,
    pub(crate) read: Mutex<Vec<wgpu::Buffer>>,
    pub(crate) small: Mutex<SmallWrites>,
}

/// Small host-to-device writes (kernel parameters, bucket tables, offsets) that
/// wait for the next submission. wgpu's `queue.write_buffer` and
/// `create_buffer_init` create a fresh staging buffer per call, which costs 2-3 ms
/// of host time on the H100's driver (measured with the `ridgeline::profile::select` log target);
/// these go instead through a few persistent 1 MiB MAP_WRITE chunks, as one copy
/// command buffer submitted ahead of the next command buffer.
#[derive(Default)]
pub(crate) struct SmallWrites {
    pub(crate) pending: Vec<(wgpu::Buffer, u64, Vec<u8>)>,
    pub(crate) chunks: Vec<Stage>,
}

impl SmallWrites {
    /// Bytes waiting.
    pub(crate) fn bytes(&self) -> u64 {
        self.pending.iter().map(|p| p.2.len() as u64).sum()
    }
}

impl StagingPool {
    pub(crate) fn new(cpu_adapter: bool) -> Self {
        StagingPool {
            stage_bytes: if cpu_adapter { CPU_ADAPTER_STAGE_BYTES } else { STAGE_BYTES },
            max_stages: MAX_STAGES,
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

pub(crate) fn encode_extent_copies(
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
