//! `JoinKeysExec`: passes a hash join's build side through unchanged and collects
//! its join keys into exact key sets ([`KeyBitmap`]s), which it hands to the
//! probe side's [`GpuSemiFilterExec`](crate::exec::GpuSemiFilterExec)s through a
//! [`JoinKeyLink`] when the build side ends (sideways information passing; the
//! rule is `optimizer::join_prefilter`).
//!
//! A `CollectLeft` hash join executes its build side before it polls its probe
//! side (DataFusion 55: `left.execute(0)` runs first and the join stream starts in
//! `WaitBuildSide`), so the sets are complete before any probe row is read. In a
//! partitioned join the node sits below the build side's hash repartition and
//! publishes when all of its input partitions have ended: a build partition ends
//! only once the repartition has read its whole input, so again no probe row is
//! read before the sets are out. A build side that fails or is dropped early
//! publishes "no sets", and the probe side then passes every row: the prefilter
//! only ever removes rows the join would drop.
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Date32Type, Int16Type, Int32Type, Int64Type, Int8Type, SchemaRef, UInt16Type, UInt32Type, UInt8Type};
use datafusion::error::Result;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, PlanProperties};
use futures::StreamExt;
use ridgeline_operators::member::{DeviceKeySet, KeyBitmap, MAX_SET_BITS};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Whether a join key of this type can go into a key set (integers of at most 64
/// bits whose values fit `i64`, and dates).
pub fn key_type_supported(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 | DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::Date32
    )
}

/// Appends the non-NULL values of `a` (of a [`key_type_supported`] type) to `out`.
fn push_keys(a: &ArrayRef, out: &mut Vec<i64>) {
    macro_rules! ints {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            if p.null_count() == 0 {
                out.extend(p.values().iter().map(|&v| v as i64));
            } else {
                out.extend(p.iter().flatten().map(|v| v as i64));
            }
        }};
    }
    match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::Date32 => ints!(Date32Type),
        _ => {}
    }
}

/// The key sets of one execution of a build side: one per tapped key column
/// (`None` where the keys span more than a dense set covers).
#[derive(Debug)]
pub struct KeySets {
    /// The sets, in the tap's key order.
    pub sets: Vec<Option<KeyBitmap>>,
    /// Each set on the device, uploaded by the first probe partition that uses it.
    device: Vec<Mutex<Option<Arc<DeviceKeySet>>>>,
}

impl KeySets {
    /// Sets for the collected keys of each column.
    pub fn new(keys: Vec<Vec<i64>>) -> KeySets {
        let sets: Vec<Option<KeyBitmap>> = keys.iter().map(|k| KeyBitmap::from_keys(k, MAX_SET_BITS)).collect();
        let device = sets.iter().map(|_| Mutex::new(None)).collect();
        KeySets { sets, device }
    }

    /// Set `slot` on the device (uploaded once; `None` if it has no set).
    pub fn device_set(&self, dev: &ridgeline_operators::GpuContext, slot: usize) -> ridgeline_operators::GpuResult<Option<Arc<DeviceKeySet>>> {
        let Some(set) = self.sets.get(slot).and_then(|s| s.as_ref()) else { return Ok(None) };
        let mut d = self.device[slot].lock().unwrap();
        if d.is_none() {
            *d = Some(Arc::new(DeviceKeySet::upload(dev, set)?));
        }
        Ok(d.clone())
    }
}

#[derive(Clone, Debug)]
enum KeyState {
    Pending,
    Ready(Option<Arc<KeySets>>),
}

/// The channel from a build side's [`JoinKeysExec`] to its probe side's filters.
#[derive(Debug)]
pub struct JoinKeyLink {
    tx: tokio::sync::watch::Sender<KeyState>,
    id: usize,
}

static LINK_IDS: AtomicUsize = AtomicUsize::new(1);

impl JoinKeyLink {
    /// A new link (numbered for EXPLAIN).
    pub fn new() -> Arc<JoinKeyLink> {
        let (tx, _) = tokio::sync::watch::channel(KeyState::Ready(None));
        Arc::new(JoinKeyLink { tx, id: LINK_IDS.fetch_add(1, Ordering::Relaxed) })
    }
    /// Its number.
    pub fn id(&self) -> usize {
        self.id
    }
    fn start(&self) {
        self.tx.send_replace(KeyState::Pending);
    }
    fn publish(&self, sets: Option<Arc<KeySets>>) {
        self.tx.send_replace(KeyState::Ready(sets));
    }
    /// The sets of the current execution, once its build side has ended; `None`
    /// when it failed, was dropped, or took longer than `timeout` (the probe side
    /// then passes every row).
    pub async fn wait(&self, timeout: Duration) -> Option<Arc<KeySets>> {
        let mut rx = self.tx.subscribe();
        let ready = tokio::time::timeout(timeout, rx.wait_for(|s| matches!(s, KeyState::Ready(_)))).await;
        match ready {
            Ok(Ok(s)) => match &*s {
                KeyState::Ready(sets) => sets.clone(),
                KeyState::Pending => None,
            },
            Ok(Err(_)) => None,
            Err(_) => {
                log::warn!("join keys #{} not ready after {timeout:?}; probe rows pass unfiltered", self.id);
                None
            }
        }
    }
}

/// The build side of a hash join, passed through, its join keys collected.
#[derive(Debug)]
pub struct JoinKeysExec {
    input: Arc<dyn ExecutionPlan>,
    keys: Vec<usize>,
    link: Arc<JoinKeyLink>,
    shared: Arc<Shared>,
    metrics: ExecutionPlanMetricsSet,
}

impl JoinKeysExec {
    /// Collects the columns `keys` of `input` (one partition) into `link`.
    pub fn new(input: Arc<dyn ExecutionPlan>, keys: Vec<usize>, link: Arc<JoinKeyLink>) -> Self {
        JoinKeysExec { input, keys, link, shared: Arc::default(), metrics: ExecutionPlanMetricsSet::new() }
    }
    /// The link to the probe side.
    pub fn link(&self) -> &Arc<JoinKeyLink> {
        &self.link
    }
}

impl DisplayAs for JoinKeysExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        let schema = self.input.schema();
        let names: Vec<String> = self.keys.iter().map(|&k| format!("{}@{k}", schema.field(k).name())).collect();
        write!(f, "JoinKeysExec: keys #{}=[{}]", self.link.id, names.join(", "))
    }
}

/// One execution's collection over the input's partitions.
#[derive(Debug)]
struct Acc {
    generation: u64,
    started: Vec<bool>,
    finished: usize,
    failed: bool,
    keys: Vec<Vec<i64>>,
}

/// The shared collection of a node: the current execution's [`Acc`].
#[derive(Debug, Default)]
struct Shared {
    acc: Mutex<Option<Acc>>,
    generations: std::sync::atomic::AtomicU64,
}

/// One partition's stream state. Its keys join the execution's collection when
/// it ends; the last partition to end publishes the sets. A partition that fails
/// or is dropped early publishes "no sets".
struct Guard {
    link: Arc<JoinKeyLink>,
    shared: Arc<Shared>,
    generation: u64,
    keys: Vec<usize>,
    collected: Vec<Vec<i64>>,
    done: bool,
}

impl Guard {
    fn add(&mut self, b: &RecordBatch) {
        for (k, &c) in self.keys.iter().enumerate() {
            push_keys(b.column(c), &mut self.collected[k]);
        }
    }
    /// Merges this partition's keys; returns the set bytes when it was the last.
    fn finish(&mut self) -> usize {
        self.done = true;
        let mut g = self.shared.acc.lock().unwrap();
        let Some(acc) = g.as_mut().filter(|a| a.generation == self.generation) else { return 0 };
        for (all, mine) in acc.keys.iter_mut().zip(self.collected.iter_mut()) {
            if all.is_empty() {
                std::mem::swap(all, mine);
            } else {
                all.append(mine);
            }
        }
        acc.finished += 1;
        if acc.failed || acc.finished < acc.started.len() {
            return 0;
        }
        let sets = KeySets::new(std::mem::take(&mut acc.keys));
        drop(g);
        let n = sets.sets.iter().flatten().map(|s| s.words.len() * 4).sum();
        self.link.publish(Some(Arc::new(sets)));
        n
    }
    fn fail(&mut self) {
        self.done = true;
        if let Some(acc) = self.shared.acc.lock().unwrap().as_mut().filter(|a| a.generation == self.generation) {
            acc.failed = true;
        }
        self.link.publish(None);
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if !self.done {
            self.fail();
        }
    }
}

impl ExecutionPlan for JoinKeysExec {
    fn name(&self) -> &str {
        "JoinKeysExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        self.input.properties()
    }
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn datafusion::physical_expr::PhysicalExpr>) -> Result<datafusion::common::tree_node::TreeNodeRecursion>,
    ) -> Result<datafusion::common::tree_node::TreeNodeRecursion> {
        crate::exec::no_expressions(f)
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }
    fn maintains_input_order(&self) -> Vec<bool> {
        vec![true]
    }
    fn benefits_from_input_partitioning(&self) -> Vec<bool> {
        vec![false]
    }
    #[allow(deprecated)]
    fn with_new_children(self: Arc<Self>, mut children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(JoinKeysExec::new(children.swap_remove(0), self.keys.clone(), self.link.clone())))
    }
    fn execute(&self, partition: usize, ctx: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        // A new execution starts when a partition is executed again (or first).
        let generation = {
            let mut g = self.shared.acc.lock().unwrap();
            if g.as_ref().is_none_or(|a| a.started.get(partition).copied().unwrap_or(true)) {
                let n = self.input.output_partitioning().partition_count().max(partition + 1);
                let generation = self.shared.generations.fetch_add(1, Ordering::Relaxed);
                *g = Some(Acc { generation, started: vec![false; n], finished: 0, failed: false, keys: self.keys.iter().map(|_| Vec::new()).collect() });
                self.link.start();
            }
            let acc = g.as_mut().expect("set above");
            acc.started[partition] = true;
            acc.generation
        };
        let collected = self.keys.iter().map(|_| Vec::new()).collect();
        let mut guard = Guard { link: self.link.clone(), shared: self.shared.clone(), generation, keys: self.keys.clone(), collected, done: false };
        let input = match self.input.execute(partition, ctx) {
            Ok(s) => s,
            Err(e) => {
                guard.fail();
                return Err(e);
            }
        };
        let schema: SchemaRef = input.schema();
        let rows = MetricBuilder::new(&self.metrics).output_rows(partition);
        let set_bytes = MetricBuilder::new(&self.metrics).gauge("key_set_bytes", partition);
        let time = MetricBuilder::new(&self.metrics).elapsed_compute(partition);
        let mut input = Some(input);
        let s = futures::stream::poll_fn(move |cx| {
            let Some(inp) = input.as_mut() else { return std::task::Poll::Ready(None) };
            match inp.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some(Ok(b))) => {
                    let _t = time.timer();
                    rows.add(b.num_rows());
                    guard.add(&b);
                    std::task::Poll::Ready(Some(Ok(b)))
                }
                std::task::Poll::Ready(None) => {
                    let _t = time.timer();
                    set_bytes.add(guard.finish());
                    input = None;
                    std::task::Poll::Ready(None)
                }
                std::task::Poll::Ready(Some(Err(e))) => {
                    guard.fail();
                    std::task::Poll::Ready(Some(Err(e)))
                }
                std::task::Poll::Pending => std::task::Poll::Pending,
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, s)))
    }
    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }
}

/// How long a probe side waits for its build side's keys before it passes every
/// row (a safety net: DataFusion builds first, so this is never reached in a
/// working plan; the answer stays right either way).
pub const KEY_WAIT: Duration = Duration::from_secs(30);
