//! Ridgeline's session settings (`SET ridgeline.gpu = 'on'` and friends), the
//! root crate's `RIDGELINE_*` environment switches ([`SWITCHES`], read once by
//! [`switch`]), and the device context a session uses. The operators crate
//! declares its own switches in `ridgeline_operators::tuning`; docs/settings.md
//! lists every setting and switch in one table (a test keeps it complete).
use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;
use datafusion::config::ConfigOptions;
use datafusion::error::{DataFusionError, Result};
use ridgeline_operators::tuning::{Switch, SwitchKind};
use ridgeline_operators::{context, GpuContext, GpuMode};
use std::sync::Arc;

/// The root crate's `RIDGELINE_*` environment switches (the library, the CLI, the
/// benchmark harness and the test suite); see `ridgeline_operators::tuning` for
/// the device, mode and operator switches.
pub const SWITCHES: &[Switch] = &[
    sw("RIDGELINE_TOKEN", SwitchKind::Runtime, "a token", "`serve`: the bearer token clients must send when `--token` is not given."),
    sw("RIDGELINE_TPCH_ANSWERS", SwitchKind::Bench, "a directory", "`bench tpch`: reference answers (dbgen's `qN.out`) when `--answers` is not given."),
    sw("RIDGELINE_PYTHON", SwitchKind::Bench, "a python executable", "`bench ... --duckdb` and the DuckDB tests: a Python that imports duckdb."),
    sw("RIDGELINE_DUCKDB_VENV", SwitchKind::Bench, "a directory (default .venv-duckdb)", "`bench ... --duckdb`: the virtual environment DuckDB is installed into."),
    sw("RIDGELINE_DUCKDB_WHEEL", SwitchKind::Bench, "a .whl file", "`bench ... --duckdb`: a DuckDB wheel to install offline when `--duckdb-wheel` is not given."),
    sw("RIDGELINE_DUCKDB_VIEWS", SwitchKind::Bench, "0 | 1 (default 0)", "`bench tpch --duckdb`: 1 lets DuckDB scan the Parquet files through views instead of loading tables."),
    sw("RIDGELINE_FUZZ_CASES", SwitchKind::Test, "a count", "tests/integration/fuzz.rs: cases per fuzz test (more than CI's bounded default)."),
    sw("RIDGELINE_FUZZ_SEED", SwitchKind::Test, "an integer", "tests/integration/fuzz.rs: another seed than the fixed one."),
    sw("RIDGELINE_SLT_COMPLETE", SwitchKind::Test, "0 | 1", "the .slt runner: 1 rewrites the expected output from CPU mode."),
    sw("RIDGELINE_ADBC_VENV", SwitchKind::Test, "a directory (default .venv-adbc)", "tests/integration/serve_adbc.rs: where the ADBC Flight SQL driver is installed."),
    sw("RIDGELINE_SHARED_DIR", SwitchKind::Test, "a directory (default ../shared)", "tests: the project's shared data (shared/data)."),
    sw("RIDGELINE_BLESS", SwitchKind::Test, "0 | 1", "tests/integration/settings.rs: 1 rewrites docs/settings.md from `config::settings_reference`."),
];

const fn sw(name: &'static str, kind: SwitchKind, values: &'static str, doc: &'static str) -> Switch {
    Switch { name, kind, values, doc }
}

/// The value of the root crate's switch `name` as the process started (read
/// once; unset and empty are `None`). `name` must be declared in [`SWITCHES`].
pub fn switch(name: &str) -> Option<&'static str> {
    static ENV: std::sync::OnceLock<Vec<(&'static str, String)>> = std::sync::OnceLock::new();
    debug_assert!(SWITCHES.iter().any(|s| s.name == name), "{name} is not declared in config::SWITCHES");
    ENV.get_or_init(|| {
        SWITCHES.iter().filter_map(|s| std::env::var(s.name).ok().filter(|v| !v.trim().is_empty()).map(|v| (s.name, v))).collect()
    })
    .iter()
    .find(|(n, _)| *n == name)
    .map(|(_, v)| v.as_str())
}

/// The settings reference (docs/settings.md below its marker): every
/// `ridgeline.*` session setting and every `RIDGELINE_*` switch of both crates,
/// as Markdown tables. A test keeps docs/settings.md equal to it.
pub fn settings_reference() -> String {
    use datafusion::config::ExtensionOptions;
    let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
    let mut out = String::from("## Session settings (`SET ridgeline.NAME = VALUE`)\n\n| Setting | Default | What it does |\n|---|---|---|\n");
    for e in RidgelineOptions::default().entries() {
        let value = e.value.unwrap_or_default();
        out += &format!("| `ridgeline.{}` | `{}` | {} |\n", e.key, cell(&value), cell(e.description));
    }
    out += "\n## Environment switches (read once, when the process starts)\n\n| Variable | Kind | Values | What it does |\n|---|---|---|---|\n";
    let mut all: Vec<&Switch> = ridgeline_operators::tuning::all_switches().chain(SWITCHES.iter()).collect();
    all.sort_by_key(|s| (s.kind as u8, s.name));
    for s in all {
        out += &format!("| `{}` | {:?} | {} | {} |\n", s.name, s.kind, cell(s.values), cell(s.doc));
    }
    out
}

extensions_options! {
    /// Ridgeline settings, under the `ridgeline.` prefix.
    pub struct RidgelineOptions {
        /// Where operators run: off, auto or on (default: `RIDGELINE_GPU`, else auto).
        pub gpu: ModeSetting, default = ModeSetting(GpuMode::Auto)
        /// Rows an operator's input must have before auto mode moves it to the GPU.
        pub min_gpu_rows: usize, default = 1_000_000
        /// Rows a GPU operator gathers into one device chunk (0: from the memory budget).
        pub chunk_rows: usize, default = 0
        /// Compaction of GPU filters: auto (measured choice), stable or jumping_jack
        /// (Jumping Jack only runs where no parent needs the input order).
        pub compaction: Choice, default = Choice::new("compaction", "auto", check_compaction)
        /// Rows a skyline's input must have before auto mode runs SkyAlign on the GPU.
        pub min_gpu_skyline_rows: usize, default = 20_000
        /// Reorder inner-join clusters by estimated sizes (the `ridgeline_join_reorder`
        /// logical rule); false keeps the order of the query text.
        pub join_reorder: bool, default = true
        /// Let in-memory and resident scans apply the dynamic filters hash joins and
        /// top-k sorts push down (measured slower on TPC-H at SF 10, so off).
        pub scan_dynamic_filters: bool, default = false
        /// Give filters that DataFusion's interval analysis cannot bound (string
        /// equality, IN lists, LIKE, OR) a selectivity estimated from column
        /// statistics instead of a fixed 20% (the `ridgeline_filter_estimates` rule).
        pub filter_estimates: bool, default = true
        /// Let a GPU aggregation with more groups than its per-chunk tables take keep
        /// its groups' state in one table in device memory (no quantiles).
        pub gpu_group_tables: bool, default = true
        /// Let a hash join's build-side keys filter its GPU-resident probe side on the
        /// device before download (the `ridgeline_gpu_join_prefilter` rule).
        pub gpu_join_prefilter: bool, default = true
        /// Run hash joins on integer, date, timestamp or decimal keys on the GPU
        /// (`GpuHashJoinExec`: the table and the probe on the device; mode auto only
        /// when both sides are estimated at 2^23 rows or more).
        pub gpu_joins: bool, default = true
        /// Rows DataFusion's statistics must give both sides of a hash join before
        /// mode auto runs it on the GPU.
        pub gpu_join_min_rows: usize, default = crate::tuning::join::AUTO_MIN_ROWS
        /// Mode on: run an aggregation over host inputs (Parquet, CSV, JSON, Arrow,
        /// memory tables) as a GPU island (`GpuIslandExec`: the inputs uploaded once
        /// when the query runs, the GPU operators planned over them then). Mode auto
        /// never does (no cost model of the upload yet).
        pub gpu_islands: bool, default = true
        /// Over a resident scan under a CPU operator, how the prefilter's rows reach
        /// it: true computes every row's selection in one device pass and filters the
        /// scan's host copy with it (the mask path); false compacts on the device per
        /// partition and downloads the rows; auto takes the cheaper once the build
        /// side's keys are known.
        pub gpu_semi_filter_mask: Choice, default = Choice::new("gpu_semi_filter_mask", "auto", check_tri)
        /// Let SQL read local files by path: `FROM 'data/x.parquet'` and the
        /// `read_parquet` / `read_csv` / `read_json` / `read_arrow` functions (the
        /// server turns it off: its clients see only the tables it registers).
        pub file_access: bool, default = true
    }
}

/// A text setting with a fixed set of values, checked when it is set: a bad
/// value is refused with an error that lists the valid ones, and the setting
/// keeps its old value (so the statements after a mistyped `SET` still run).
#[derive(Debug, Clone)]
pub struct Choice {
    value: String,
    name: &'static str,
    default: &'static str,
    check: fn(&str) -> std::result::Result<(), &'static str>,
}

impl Choice {
    /// The setting `ridgeline.{name}` with its default and its check (which names
    /// the valid values when it refuses one).
    pub fn new(name: &'static str, default: &'static str, check: fn(&str) -> std::result::Result<(), &'static str>) -> Choice {
        Choice { value: default.to_string(), name, default, check }
    }
    /// Sets the value after checking it.
    pub fn set_value(&mut self, value: &str) -> Result<()> {
        let v = value.trim().to_ascii_lowercase();
        (self.check)(&v).map_err(|valid| {
            DataFusionError::Configuration(format!("ridgeline.{} must be {valid}, not '{}'", self.name, value.trim()))
        })?;
        self.value = v;
        Ok(())
    }
    /// The value.
    pub fn as_str(&self) -> &str {
        &self.value
    }
}

impl PartialEq for Choice {
    fn eq(&self, other: &Choice) -> bool {
        self.name == other.name && self.value == other.value
    }
}

impl std::ops::Deref for Choice {
    type Target = str;
    fn deref(&self) -> &str {
        &self.value
    }
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.value)
    }
}

impl datafusion::config::ConfigField for Choice {
    fn visit<V: datafusion::config::Visit>(&self, v: &mut V, key: &str, description: &'static str) {
        v.some(key, &self.value, description)
    }
    fn set(&mut self, _key: &str, value: &str) -> Result<()> {
        self.set_value(value)
    }
    fn reset(&mut self, _key: &str) -> Result<()> {
        self.value = self.default.to_string();
        Ok(())
    }
}

/// The `ridgeline.gpu` setting: a [`GpuMode`], typed from `SET` to the
/// operators (a bad value is refused with the valid ones and the old value kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ModeSetting(pub GpuMode);

impl std::fmt::Display for ModeSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl datafusion::config::ConfigField for ModeSetting {
    fn visit<V: datafusion::config::Visit>(&self, v: &mut V, key: &str, description: &'static str) {
        v.some(key, self.0, description)
    }
    fn set(&mut self, _key: &str, value: &str) -> Result<()> {
        self.0 = value
            .parse()
            .map_err(|_| DataFusionError::Configuration(format!("ridgeline.gpu must be off, auto or on, not '{}'", value.trim())))?;
        Ok(())
    }
    fn reset(&mut self, _key: &str) -> Result<()> {
        self.0 = GpuMode::Auto;
        Ok(())
    }
}

/// The compaction setting's values (the one list `SET` checks against).
fn parse_compaction(v: &str) -> std::result::Result<ridgeline_operators::compact::CompactAlgo, &'static str> {
    use ridgeline_operators::compact::CompactAlgo;
    match v.trim().to_ascii_lowercase().as_str() {
        "auto" => Ok(CompactAlgo::Auto),
        "stable" => Ok(CompactAlgo::Stable),
        "jumping_jack" | "jumpingjack" | "jj" => Ok(CompactAlgo::JumpingJack),
        _ => Err("auto, stable or jumping_jack"),
    }
}

fn check_compaction(v: &str) -> std::result::Result<(), &'static str> {
    parse_compaction(v).map(|_| ())
}

fn check_tri(v: &str) -> std::result::Result<(), &'static str> {
    crate::exec::join_prefilter::semi_filter::MaskChoice::parse(v).map(|_| ()).map_err(|_| "auto, true or false")
}

impl ConfigExtension for RidgelineOptions {
    const PREFIX: &'static str = "ridgeline";
}

impl RidgelineOptions {
    /// The options of a session (defaults when Ridgeline is not installed).
    pub fn from_config(cfg: &ConfigOptions) -> RidgelineOptions {
        cfg.extensions.get::<RidgelineOptions>().cloned().unwrap_or_default()
    }
    /// The GPU mode (checked when it was set, so this never fails; `Result` for
    /// the callers that propagate it).
    pub fn mode(&self) -> Result<GpuMode> {
        Ok(self.gpu.0)
    }
    /// The compaction algorithm setting.
    pub fn compaction(&self) -> Result<ridgeline_operators::compact::CompactAlgo> {
        parse_compaction(&self.compaction).map_err(|valid| {
            DataFusionError::Configuration(format!("ridgeline.compaction must be {valid}, not '{}'", self.compaction.trim()))
        })
    }
    /// Rows per device chunk: the setting, or what a quarter of the memory budget holds
    /// at 64 bytes a row, within [1M, 256M] rows.
    pub fn chunk_rows(&self, ctx: Option<&GpuContext>) -> usize {
        if self.chunk_rows > 0 {
            return self.chunk_rows;
        }
        let budget = ctx.map_or(1u64 << 30, |c| c.pool().budget());
        ((budget / 4 / 64) as usize).clamp(1 << 20, 1 << 28)
    }
}

/// What a GPU optimizer rule works with: the session's options, its mode and the
/// device; `None` when the rule has nothing to do (mode off, or mode auto without
/// an adapter); an error in mode on without an adapter.
pub fn rule_device(config: &ConfigOptions) -> Result<Option<(RidgelineOptions, GpuMode, Arc<GpuContext>)>> {
    let opts = RidgelineOptions::from_config(config);
    let mode = opts.mode()?;
    if mode == GpuMode::Off {
        return Ok(None);
    }
    Ok(device_for(mode)?.map(|dev| (opts, mode, dev)))
}

/// The device for a session in `mode`: `Ok(None)` means run on the CPU (mode off,
/// or auto without an adapter, which warns once); mode on without an adapter is an
/// error.
pub fn device_for(mode: GpuMode) -> Result<Option<Arc<GpuContext>>> {
    match mode {
        GpuMode::Off => Ok(None),
        GpuMode::Auto => match context::global() {
            Ok(c) => Ok(Some(c)),
            Err(e) => {
                context::warn_once(&format!("no GPU, running on the CPU ({e})"));
                Ok(None)
            }
        },
        GpuMode::On => context::global().map(Some).map_err(|e| {
            DataFusionError::Execution(format!("GPU mode is 'on' but the GPU is unavailable: {e}"))
        }),
    }
}
