//! A device buffer pool that reuses allocations by size class, under a memory
//! budget. Allocations that do not fit the budget fail with
//! [`GpuError::BudgetExceeded`], which the planner turns into a CPU fallback.
//!
//! The budget is per process: the process-wide context ([`crate::context::global`])
//! owns the pool that every session of the process allocates from.
use crate::error::{wgpu_error, GpuError, GpuResult};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Usage of every pooled buffer: storage for kernels, indirect dispatch sizes that
/// kernels write, copy source and destination for transfers.
pub const POOL_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::INDIRECT)
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

const MIN_CLASS: u64 = 256;

/// Size class of a request: at least 256 bytes, then four classes per power of two,
/// so at most 25% of a buffer is slack.
pub fn size_class(bytes: u64) -> u64 {
    if bytes <= MIN_CLASS {
        return MIN_CLASS;
    }
    let hb = 63 - (bytes - 1).leading_zeros() as u64; // floor(log2(bytes - 1))
    let step = (1u64 << hb) / 4;
    bytes.div_ceil(step) * step
}

/// Pool statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Bytes held by buffers in use.
    pub live_bytes: u64,
    /// Bytes held by free buffers kept for reuse.
    pub cached_bytes: u64,
    /// Highest `live_bytes` seen.
    pub peak_live_bytes: u64,
    /// Buffers created.
    pub created: u64,
    /// Allocations served from the free lists.
    pub reused: u64,
}

struct PoolState {
    free: BTreeMap<u64, Vec<wgpu::Buffer>>,
    stats: PoolStats,
    budget: u64,
}

pub(crate) struct PoolInner {
    device: wgpu::Device,
    max_buffer: u64,
    max_binding: u64,
    state: Mutex<PoolState>,
}

/// The pool; cheap to clone.
#[derive(Clone)]
pub struct BufferPool {
    inner: Arc<PoolInner>,
}

/// A pooled device buffer; returns to its pool when dropped.
pub struct GpuBuffer {
    buffer: Option<wgpu::Buffer>,
    class: u64,
    pool: Arc<PoolInner>,
}

impl std::fmt::Debug for GpuBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GpuBuffer({} bytes)", self.class)
    }
}

impl GpuBuffer {
    /// The wgpu buffer.
    pub fn raw(&self) -> &wgpu::Buffer {
        self.buffer.as_ref().expect("buffer present until drop")
    }
    /// Its size in bytes (the size class, at least what was asked for).
    pub fn size(&self) -> u64 {
        self.class
    }
}

impl Drop for GpuBuffer {
    fn drop(&mut self) {
        if let Some(b) = self.buffer.take() {
            self.pool.release(b, self.class);
        }
    }
}

impl PoolInner {
    fn release(&self, buffer: wgpu::Buffer, class: u64) {
        let mut st = self.state.lock().unwrap();
        st.stats.live_bytes -= class;
        // Keep it for reuse while live + cached stays within the budget.
        if st.stats.live_bytes + st.stats.cached_bytes + class <= st.budget {
            st.stats.cached_bytes += class;
            st.free.entry(class).or_default().push(buffer);
        } else {
            drop(st);
            buffer.destroy();
        }
    }
}

impl BufferPool {
    pub(crate) fn new(device: wgpu::Device, budget: u64, max_buffer: u64, max_binding: u64) -> Self {
        BufferPool {
            inner: Arc::new(PoolInner {
                device,
                max_buffer,
                max_binding,
                state: Mutex::new(PoolState { free: BTreeMap::new(), stats: PoolStats::default(), budget }),
            }),
        }
    }

    /// The memory budget of the process in bytes.
    pub fn budget(&self) -> u64 {
        self.inner.state.lock().unwrap().budget
    }

    /// Changes the budget; cached buffers beyond it are freed.
    pub fn set_budget(&self, budget: u64) {
        let mut st = self.inner.state.lock().unwrap();
        st.budget = budget;
        Self::evict(&mut st, 0);
    }

    /// Current statistics.
    pub fn stats(&self) -> PoolStats {
        self.inner.state.lock().unwrap().stats
    }

    /// Frees every cached buffer.
    pub fn trim(&self) {
        let mut st = self.inner.state.lock().unwrap();
        let all = st.stats.live_bytes + st.stats.cached_bytes + st.budget;
        let b = st.budget;
        st.budget = 0;
        Self::evict(&mut st, all);
        st.budget = b;
    }

    fn evict(st: &mut PoolState, need: u64) {
        while st.stats.live_bytes + st.stats.cached_bytes + need > st.budget && st.stats.cached_bytes > 0 {
            // Largest first: frees the most with the fewest destroys.
            let (&class, list) = st.free.iter_mut().next_back().expect("cached bytes imply a free buffer");
            let b = list.pop().expect("free lists are never empty");
            if list.is_empty() {
                st.free.remove(&class);
            }
            st.stats.cached_bytes -= class;
            b.destroy();
        }
    }

    /// Whether `bytes` more could be allocated now without exceeding the budget.
    pub fn fits(&self, bytes: u64) -> bool {
        let st = self.inner.state.lock().unwrap();
        st.stats.live_bytes + size_class(bytes) <= st.budget
    }

    /// A buffer of at least `bytes` bytes (contents undefined).
    pub fn alloc(&self, bytes: u64) -> GpuResult<GpuBuffer> {
        let max = self.inner.max_buffer / 4 * 4;
        if bytes > max {
            return Err(GpuError::Invalid(format!("buffer of {bytes} bytes exceeds the adapter's max_buffer_size {max}")));
        }
        let mut class = size_class(bytes).min(max);
        // A buffer that fits one binding must stay bindable whole: its size class
        // may not round it past the binding limit (2^28 i64 rows would become 2 GiB).
        if bytes <= self.inner.max_binding && class > self.inner.max_binding {
            class = bytes.div_ceil(256) * 256;
        }
        {
            let mut st = self.inner.state.lock().unwrap();
            if let Some(list) = st.free.get_mut(&class) {
                let b = list.pop().expect("free lists are never empty");
                if list.is_empty() {
                    st.free.remove(&class);
                }
                st.stats.cached_bytes -= class;
                st.stats.live_bytes += class;
                st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
                st.stats.reused += 1;
                return Ok(GpuBuffer { buffer: Some(b), class, pool: self.inner.clone() });
            }
            if st.stats.live_bytes + class > st.budget {
                return Err(GpuError::BudgetExceeded { requested: class, in_use: st.stats.live_bytes, budget: st.budget });
            }
            Self::evict(&mut st, class);
            // Reserve before creating so concurrent allocations see it.
            st.stats.live_bytes += class;
            st.stats.peak_live_bytes = st.stats.peak_live_bytes.max(st.stats.live_bytes);
            st.stats.created += 1;
        }
        let dev = &self.inner.device;
        let oom = dev.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let val = dev.push_error_scope(wgpu::ErrorFilter::Validation);
        let buffer = dev.create_buffer(&wgpu::BufferDescriptor {
            label: Some("ridgeline-pool"),
            size: class,
            usage: POOL_USAGE,
            mapped_at_creation: false,
        });
        let v = pollster::block_on(val.pop());
        let o = pollster::block_on(oom.pop());
        if let Some(e) = o.or(v) {
            self.inner.state.lock().unwrap().stats.live_bytes -= class;
            buffer.destroy();
            return Err(wgpu_error(e));
        }
        Ok(GpuBuffer { buffer: Some(buffer), class, pool: self.inner.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn classes() {
        assert_eq!(size_class(0), 256);
        assert_eq!(size_class(256), 256);
        assert_eq!(size_class(257), 320);
        assert_eq!(size_class(1000), 1024);
        assert_eq!(size_class(600), 640);
        assert_eq!(size_class(1 << 20), 1 << 20);
        assert_eq!(size_class((1 << 20) + 1), (1 << 20) + (1 << 18));
        for n in [1u64, 5, 255, 257, 4095, 4097, 123_456_789] {
            let c = size_class(n);
            assert!(c >= n && c % 4 == 0, "{n} -> {c}");
            assert!(c <= n.max(256) + n.max(256) / 4 + 64, "{n} -> {c} too much slack");
        }
    }
}
