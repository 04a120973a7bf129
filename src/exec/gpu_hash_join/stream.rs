//! One probe partition as a stream: its probe batches (device batches from a
//! resident scan or a boundary, host batches otherwise), gathered and joined.
use super::*;

/// A probe batch: host rows, or a device batch from a GPU input (its key column
/// is probed where it is; its host rows are its host copy or downloaded).
pub(super) enum ProbeBatch {
    Host(RecordBatch),
    Device(GpuBatch),
}

impl GpuHashJoinExec {
    /// The probe side's batches: device batches when it is a GPU operator (or a
    /// download of one), so its keys need no upload; host batches otherwise, and
    /// when the GPU input cannot start (its boundary's CPU replay then runs).
    pub(super) fn probe_stream(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<futures::stream::BoxStream<'static, Result<ProbeBatch>>> {
        let right = self.join.right();
        // A boundary's GPU input hands over what the boundary would download; a
        // resident scan hands over its chunks with their host copies. (Other GPU
        // nodes that serve CPU parents, the semi-join prefilter, keep their own
        // fallbacks on the host side: they are read as host batches.)
        let src = match right.downcast_ref::<crate::exec::GpuUnloadExec>() {
            Some(u) => Some(u.input()),
            None if right.downcast_ref::<crate::exec::GpuScanExec>().is_some() => Some(right),
            None => None,
        };
        if let Some(g) = src.and_then(crate::exec::as_gpu) {
            match g.execute_gpu(partition, ctx.clone()) {
                Ok(s) => return Ok(s.map(|r| r.map(ProbeBatch::Device)).boxed()),
                Err(e) if is_gpu_error(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(right.execute(partition, ctx)?.map(|r| r.map(ProbeBatch::Host)).boxed())
    }
}

/// One probe partition's progress.
pub(super) struct ProbeState {
    pub(super) me: Arc<GpuHashJoinExec>,
    pub(super) build: Option<Arc<Build>>,
    pub(super) build_fut: Option<futures::future::BoxFuture<'static, Result<Arc<Build>>>>,
    pub(super) probe: futures::stream::BoxStream<'static, Result<ProbeBatch>>,
    pub(super) pending: Vec<RecordBatch>,
    pub(super) pending_rows: usize,
    pub(super) done: bool,
    pub(super) m: Metrics,
}

impl ProbeState {
    /// The next output batches; `None` at the end.
    pub(super) async fn step(&mut self) -> Option<Result<Vec<RecordBatch>>> {
        if self.done {
            return None;
        }
        if let Some(f) = self.build_fut.take() {
            match f.await {
                Ok(b) => self.build = Some(b),
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        let build = self.build.clone().expect("built");
        // probe on the device in batches of PROBE_MIN_ROWS rows or more
        let min_rows = match build.table {
            Table::Device { .. } => PROBE_MIN_ROWS,
            Table::Host(_) => 1,
        };
        loop {
            match self.probe.next().await {
                Some(Ok(ProbeBatch::Host(b))) => {
                    if b.num_rows() == 0 {
                        continue;
                    }
                    self.m.probe_rows.add(b.num_rows());
                    self.pending_rows += b.num_rows();
                    self.pending.push(b);
                    if self.pending_rows >= min_rows {
                        return Some(self.run(build, false, None).await);
                    }
                }
                Some(Ok(ProbeBatch::Device(g))) => {
                    if g.num_rows == 0 {
                        continue;
                    }
                    self.m.probe_rows.add(g.num_rows);
                    // a large device batch is probed where it is (after the rows
                    // gathered before it, to keep the probe order)
                    return Some(self.run(build, false, Some(g)).await);
                }
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.done = true;
                    return Some(self.run(build, true, None).await);
                }
            }
        }
    }

    /// Joins the pending probe batches (and, at the end, the build rows that wait
    /// for every probe).
    pub(super) async fn run(&mut self, build: Arc<Build>, last: bool, device: Option<GpuBatch>) -> Result<Vec<RecordBatch>> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        let me = self.me.clone();
        let m = self.m.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            match pending.len() {
                0 => {}
                1 => out.extend(me.join_batch(&build, &pending[0], None, &m)?),
                _ => out.extend(me.join_batches(&build, &pending, &m)?),
            }
            drop(pending);
            if let Some(g) = device {
                let dev = match &build.table {
                    Table::Device { dev, .. } => dev.clone(),
                    Table::Host(_) => ridgeline_operators::context::global().map_err(gerr)?,
                };
                let host = g.to_host(&dev)?;
                let key = g.columns.get(me.keys[0].1).map(|c| c.as_ref());
                out.extend(me.join_batch(&build, &host, key, &m)?);
            }
            if last && build.remaining.fetch_sub(1, Ordering::AcqRel) == 1 {
                if let Some(o) = me.final_batch(&build)? {
                    out.push(o);
                }
            }
            for o in &out {
                m.output_rows.add(o.num_rows());
            }
            Ok(out)
        })
        .await
        .map_err(crate::exec::blocking_err)?
    }
}
