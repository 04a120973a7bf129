//! The `ridgeline` command line: `query`, the interactive shell, `gen`, `gpu`,
//! `demo` and `bench`.
pub mod bench;
pub mod bench_aggregate;
pub mod bench_join;
pub mod bench_skyline;
pub mod bench_tpch;
pub mod complete;
pub mod demo;
pub mod output;
pub mod shell;

use crate::gen::skyline::{write_skyline, SkylineDist};
use crate::gen::tpch::{write_tpch, OutputFormat};
use crate::{GpuMode, Ridgeline};
use clap::{Parser, Subcommand};
use datafusion::error::{DataFusionError, Result};
use output::Format;
use std::path::PathBuf;

/// Ridgeline: SQL over Arrow, CSV and Parquet with GPU operators.
#[derive(Parser, Debug)]
#[command(
    name = "ridgeline",
    version,
    about,
    override_usage = "ridgeline [--table NAME=PATH]... [--resident] [--gpu MODE] [-c SQL | -f FILE...]   (the shell)\n       \
                      ridgeline <COMMAND> [OPTIONS]",
    after_help = "Without a command, ridgeline starts the interactive shell over the tables given by --table; \
                  with -c or -f it runs that SQL (and dot commands) instead and exits. In the shell, .help lists \
                  the dot commands (.tables, .schema, .mode, .read, .output, .once, .timer, .maxrows, .quit, ...); \
                  Tab completes, Ctrl-C cancels the running statement, Ctrl-D or .quit leaves.\n\n\
                  Exit status: 0 on success, also when the reader of standard output goes away (as with `| head`); \
                  1 on an error, printed as one `error: ...` line (a script on standard input stops at its first error); \
                  2 on a usage error."
)]
pub struct Cli {
    /// Shell: where operators run, off, auto or on (default: RIDGELINE_GPU, else auto);
    /// also taken before `query`, `demo` and `serve`.
    #[arg(long, value_name = "MODE")]
    pub gpu: Option<GpuMode>,
    /// Shell: register a table first, NAME=PATH (repeatable; the file's kind by its extension).
    #[arg(long = "table", value_name = "NAME=PATH")]
    pub tables: Vec<String>,
    /// Shell: keep the --table tables on the GPU.
    #[arg(long)]
    pub resident: bool,
    /// Shell: run this SQL (`;`-separated statements) and exit instead of starting the shell.
    #[arg(short = 'c', value_name = "SQL", conflicts_with = "files")]
    pub command_sql: Option<String>,
    /// Shell: run the SQL in FILE (repeatable) and exit instead of starting the shell.
    #[arg(short = 'f', value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Command; none starts the interactive shell.
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run one or more `;`-separated SQL statements (from the argument, `-f FILE`
    /// or standard input).
    Query {
        /// The SQL text (it may start with a `--` comment); `-` reads standard input.
        #[arg(allow_hyphen_values = true, required_unless_present = "files", conflicts_with = "files")]
        sql: Option<String>,
        /// Read the SQL from FILE (`-`: standard input); repeat to run several files in turn.
        #[arg(short = 'f', long = "file", value_name = "FILE")]
        files: Vec<PathBuf>,
        /// Register a table: NAME=PATH (.csv with header, .parquet, .arrow).
        #[arg(long = "table", value_name = "NAME=PATH")]
        tables: Vec<String>,
        /// Output format.
        #[arg(long, default_value = "table")]
        format: Format,
        /// Keep the registered tables on the GPU.
        #[arg(long)]
        resident: bool,
        /// Print the physical plan (GPU nodes marked) instead of running.
        #[arg(long)]
        explain: bool,
        /// Where operators run: off, auto or on (default: RIDGELINE_GPU, else auto).
        #[arg(long, value_name = "MODE")]
        gpu: Option<GpuMode>,
    },
    /// Generate data sets.
    Gen {
        /// What to generate.
        #[command(subcommand)]
        what: GenCommand,
    },
    /// Report the GPU adapter (name, backend, driver, limits, features) or why there is none.
    Gpu,
    /// The showcase on built-in data: TPC-H and skyline data generated in memory.
    Demo {
        /// TPC-H scale factor.
        #[arg(long, default_value_t = 0.1)]
        sf: f64,
        /// Where operators run: off, auto or on (default: RIDGELINE_GPU, else auto).
        #[arg(long, value_name = "MODE")]
        gpu: Option<GpuMode>,
    },
    /// Serve SQL over Arrow Flight SQL and HTTP (`POST /query`, `GET /health`).
    Serve {
        #[command(flatten)]
        args: ServeArgs,
        /// Where operators run: off, auto or on (default: RIDGELINE_GPU, else auto).
        #[arg(long, value_name = "MODE")]
        gpu: Option<GpuMode>,
    },
    /// Benchmarks.
    Bench {
        /// Which benchmark.
        #[command(subcommand)]
        what: BenchCommand,
    },
}

/// `ridgeline serve` options.
#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Flight SQL address (`none` to switch it off; port 0 picks a free port).
    #[arg(long = "flight-sql", value_name = "ADDR")]
    pub flight_sql: Option<String>,
    /// HTTP address (`none` to switch it off; port 0 picks a free port).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<String>,
    /// Register a table: NAME=PATH (.csv with header, .parquet, .arrow).
    #[arg(long = "table", value_name = "NAME=PATH")]
    pub tables: Vec<String>,
    /// Also serve the 8 TPC-H tables generated in memory at this scale factor.
    #[arg(long, value_name = "SF")]
    pub tpch: Option<f64>,
    /// Keep the tables on the GPU.
    #[arg(long)]
    pub resident: bool,
    /// Clients must send `Authorization: Bearer TOKEN` (default: RIDGELINE_TOKEN, else none).
    #[arg(long)]
    pub token: Option<String>,
    /// Per-query timeout in seconds (0: none).
    #[arg(long, default_value_t = 300.0)]
    pub query_timeout: f64,
    /// Per-query memory limit in MiB (DataFusion's memory pool; 0: none).
    #[arg(long, default_value_t = 0)]
    pub query_memory_mib: u64,
    /// Memory limit of all running queries together in MiB (0: none).
    #[arg(long, default_value_t = 0)]
    pub total_memory_mib: u64,
    /// Largest request (SQL text) in bytes.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_request_bytes: usize,
    /// Queries running at once (the rest wait); default 4 per core.
    #[arg(long)]
    pub max_concurrent: Option<usize>,
    /// HTTP: accept browser requests from this origin (`scheme://host[:port]`, or
    /// `*`); repeatable. Requests with any other `Origin` header get 403.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    pub allow_origins: Vec<String>,
    /// HTTP: accept this `Host` name besides localhost and IP addresses (`*`: any);
    /// repeatable. Other names get 403 (DNS rebinding).
    #[arg(long = "allow-host", value_name = "NAME")]
    pub allow_hosts: Vec<String>,
    /// Seconds a client may take to send a request header, or to start a Flight
    /// SQL connection, or to send its next request on an idle connection (0: none).
    #[arg(long, default_value_t = 10.0, value_name = "SECS")]
    pub header_timeout: f64,
    /// Seconds a client may take to send a request body, or leave the server's
    /// writes stalled by not reading its answer (0: none).
    #[arg(long, default_value_t = 30.0, value_name = "SECS")]
    pub body_timeout: f64,
    /// Open connections per endpoint (HTTP evicts the oldest idle one at the limit).
    #[arg(long, default_value_t = 512)]
    pub max_connections: usize,
}

/// `gen` subcommands.
#[derive(Subcommand, Debug)]
pub enum GenCommand {
    /// The 8 TPC-H tables through the tpchgen crates.
    Tpch {
        /// Scale factor.
        #[arg(long)]
        sf: f64,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// parquet or csv.
        #[arg(long, default_value = "parquet")]
        format: OutputFormat,
        /// Overwrite the tables' files if the directory holds them already.
        #[arg(long)]
        force: bool,
    },
    /// Börzsönyi-style skyline data (columns d0..d{D-1}, smaller is better).
    Skyline {
        /// independent, correlated or anticorrelated.
        #[arg(long)]
        dist: SkylineDist,
        /// Dimensions.
        #[arg(long)]
        dims: usize,
        /// Rows.
        #[arg(long)]
        rows: usize,
        /// Random seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Output file (.csv, .parquet or .arrow).
        #[arg(long)]
        out: PathBuf,
        /// Overwrite the file if it exists.
        #[arg(long)]
        force: bool,
    },
}

/// Sizes 2^min_log2 .. 2^max_log2 and repetitions of a kernel benchmark.
#[derive(clap::Args, Debug, Clone, Copy)]
pub struct SizeRange {
    /// Smallest size, log2.
    #[arg(long, default_value_t = 20)]
    pub min_log2: u32,
    /// Largest size, log2.
    #[arg(long, default_value_t = 28)]
    pub max_log2: u32,
    /// Repetitions (GPU: median; CPU: best).
    #[arg(long, default_value_t = 5)]
    pub iterations: usize,
}

/// `bench` subcommands.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Upload, readback and device-copy GB/s from 1 MiB up to --max-mib.
    Transfer {
        /// Largest size in MiB.
        #[arg(long, default_value_t = 1024)]
        max_mib: u64,
        /// Repetitions per size (the median is reported).
        #[arg(long, default_value_t = 3)]
        iterations: usize,
    },
    /// GPU exclusive prefix sum of u32 at 2^min-log2 .. 2^max-log2 elements, and the
    /// CPU scan against the sequential loop.
    Scan {
        #[command(flatten)]
        range: SizeRange,
    },
    /// GPU stream compaction (stable vs Jumping Jack, flags vs bitmap) over selectivity 0..100%.
    Compact {
        #[command(flatten)]
        range: SizeRange,
        /// Only this selectivity (0..1), e.g. to time one case in a fresh process.
        #[arg(long)]
        selectivity: Option<f64>,
    },
    /// GPU filter (predicate kernel + compaction) on resident data vs DataFusion's CPU filter.
    Filter {
        #[command(flatten)]
        range: SizeRange,
    },
    /// SampleSelect on resident f32 keys: exact median, quartiles, top-k, approximate median.
    Select {
        #[command(flatten)]
        range: SizeRange,
        /// Also time (timestamp queries) plain load-and-sum passes and the selection's
        /// bracketing and count kernels over the same keys, at the largest size.
        #[arg(long)]
        probe: bool,
        /// Also time variants of the approximate median's one pass (kernel, keys per
        /// invocation, sample size, window width) at the largest size, interleaved
        /// call by call so that every variant sees the same GPU state.
        #[arg(long)]
        approx_variants: bool,
        /// Add DuckDB's quantile_cont(x, 0.5) over the same column (a table loaded
        /// from Parquet), on the same CPU.
        #[arg(long)]
        duckdb: bool,
        /// A duckdb wheel to install offline (default: RIDGELINE_DUCKDB_WHEEL).
        #[arg(long)]
        duckdb_wheel: Option<std::path::PathBuf>,
    },
    /// GPU hash partitioning (histogram, scan, stable scatter) at fan-outs 2..4096 vs the CPU partition.
    Partition {
        #[command(flatten)]
        range: SizeRange,
    },
    /// GPU hash join primitives (build table, probe to pairs) on resident i64 keys vs the
    /// CPU path and DataFusion's hash join, by build and probe size and match rate.
    Join(bench_join::JoinArgs),
    /// GROUP BY aggregation by regions on the GPU (4, 1k, 1M groups) vs the CPU and DataFusion;
    /// with --sql, the GROUP BY query in GPU and CPU mode (and DuckDB).
    Aggregate {
        #[command(flatten)]
        range: SizeRange,
        /// Run the SQL comparison (every second size) instead of the operator one.
        #[arg(long)]
        sql: bool,
        /// Add DuckDB to the SQL comparison.
        #[arg(long)]
        duckdb: bool,
        /// A duckdb wheel to install offline (default: RIDGELINE_DUCKDB_WHEEL).
        #[arg(long)]
        duckdb_wheel: Option<std::path::PathBuf>,
    },
    /// The 22 TPC-H queries: CPU and GPU mode side by side (min / median ms), optional
    /// answer checks and DuckDB on the same Parquet files.
    Tpch(bench_tpch::TpchArgs),
    /// SKYLINE OF: GPU SkyAlign vs the CPU algorithm (and the whole query in GPU and CPU
    /// mode, and DuckDB's NOT EXISTS formulation), with dominance and mask test counts.
    Skyline(bench_skyline::SkylineArgs),
}

/// Builds an engine in `mode` (or the environment's).
pub fn engine(mode: Option<GpuMode>) -> Result<Ridgeline> {
    let mut b = Ridgeline::builder();
    if let Some(m) = mode {
        b = b.gpu_mode(m);
    }
    let rl = b.build()?;
    // Planning errors then know where in the statement they are (`at Line: L, Column: C`).
    rl.session().state_ref().write().config_mut().options_mut().sql_parser.collect_spans = true;
    Ok(rl)
}

/// Registers `NAME=PATH` tables.
pub async fn register_tables(rl: &Ridgeline, tables: &[String], resident: bool) -> Result<()> {
    for t in tables {
        let (name, path) = t
            .split_once('=')
            .ok_or_else(|| DataFusionError::Plan(format!("--table expects NAME=PATH, got '{t}'")))?;
        rl.register_file(name.trim(), path.trim()).await?;
        if resident {
            rl.make_resident(name.trim()).await?;
        }
    }
    Ok(())
}

/// Reads the SQL text of a file, `-` being standard input.
fn read_sql(path: &std::path::Path) -> Result<String> {
    let r = if path.as_os_str() == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(path) };
    r.map_err(|e| {
        let what = if path.as_os_str() == "-" { "standard input".to_string() } else { path.display().to_string() };
        DataFusionError::Plan(format!("cannot read the SQL from {what}: {e}"))
    })
}

/// Prints one line on standard output (a closed pipe is noted, not a panic).
fn say(line: std::fmt::Arguments<'_>) -> Result<()> {
    use std::io::Write;
    let mut out = output::Stdout::new();
    writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| DataFusionError::External(Box::new(e)))
}

/// Runs the command line. A panic anywhere becomes an `internal error` (one
/// line, exit code 1); a closed standard output (`| head -1`) ends quietly.
pub async fn run(cli: Cli) -> Result<()> {
    match crate::guard::catch(run_command(cli)).await {
        Err(e) if output::is_closed_stdout(&e) => Ok(()),
        r => r,
    }
}

/// The GPU mode of a command: its own `--gpu`, else the one given before it.
fn gpu_mode(before: Option<GpuMode>, own: Option<GpuMode>) -> Option<GpuMode> {
    own.or(before)
}

async fn run_command(cli: Cli) -> Result<()> {
    if cli.gpu.is_some() {
        let other = match &cli.command {
            Some(Command::Gen { .. }) => Some("gen"),
            Some(Command::Gpu) => Some("gpu"),
            Some(Command::Bench { .. }) => Some("bench"),
            _ => None,
        };
        if let Some(c) = other {
            return Err(DataFusionError::Plan(format!(
                "--gpu does not apply to `ridgeline {c}` (it sets where the shell, query, demo and serve run operators{})",
                if c == "bench" { "; `bench tpch` takes its own --gpu off|on|both" } else { "" }
            )));
        }
    }
    if cli.command.is_some() && (cli.command_sql.is_some() || !cli.files.is_empty() || !cli.tables.is_empty() || cli.resident) {
        return Err(DataFusionError::Plan(
            "--table, --resident, -c and -f before a command are the shell's; give them after the command (`ridgeline query --table ...`)".into(),
        ));
    }
    match cli.command {
        None => {
            let texts: Vec<(Option<PathBuf>, String)> = match &cli.command_sql {
                Some(sql) => vec![(None, sql.clone())],
                None => cli.files.iter().map(|f| Ok((Some(f.clone()), read_sql(f)?))).collect::<Result<_>>()?,
            };
            let rl = engine(cli.gpu)?;
            register_tables(&rl, &cli.tables, cli.resident).await?;
            if texts.is_empty() {
                return shell::run(rl).await;
            }
            shell::run_texts(rl, &texts).await
        }
        Some(Command::Query { sql, files, tables, format, resident, explain, gpu }) => {
            // Read every input first: a missing file fails before any work.
            let texts: Vec<(Option<&std::path::Path>, String)> = match &sql {
                Some(s) if s == "-" => vec![(None, read_sql(std::path::Path::new("-"))?)],
                Some(s) => vec![(None, s.clone())],
                None => files.iter().map(|f| Ok((Some(f.as_path()), read_sql(f)?))).collect::<Result<_>>()?,
            };
            let rl = engine(gpu_mode(cli.gpu, gpu))?;
            register_tables(&rl, &tables, resident).await?;
            let mut out = output::Stdout::new();
            for (path, text) in &texts {
                output::run_statements(&rl, text, format, explain, &mut out).await.map_err(|e| match path {
                    Some(p) if texts.len() > 1 => DataFusionError::Context(format!("in {}", p.display()), Box::new(e)),
                    _ => e,
                })?;
            }
            Ok(())
        }
        Some(Command::Gen { what: GenCommand::Tpch { sf, out, format, force } }) => {
            let existing = crate::gen::tpch::existing_files(&out, format);
            if !force && !existing.is_empty() {
                let names: Vec<String> = existing.iter().filter_map(|p| p.file_name()).map(|n| n.to_string_lossy().into_owned()).collect();
                return Err(DataFusionError::Plan(format!(
                    "{} already holds TPC-H data ({}); --force overwrites it",
                    out.display(),
                    names.join(", ")
                )));
            }
            let files = tokio::task::spawn_blocking(move || write_tpch(sf, &out, format, true))
                .await
                .map_err(|e| DataFusionError::Execution(e.to_string()))??;
            for f in files {
                say(format_args!("{}", f.display()))?;
            }
            Ok(())
        }
        Some(Command::Gen { what: GenCommand::Skyline { dist, dims, rows, seed, out, force } }) => {
            if !force && out.exists() {
                return Err(DataFusionError::Plan(format!("{} exists; --force overwrites it", out.display())));
            }
            write_skyline(dist, dims, rows, seed, &out)?;
            say(format_args!("{} ({rows} rows, {dims} dims, {dist})", out.display()))
        }
        Some(Command::Gpu) => match ridgeline_operators::context::global() {
            Ok(ctx) => say(format_args!("{}", ctx.report())),
            Err(e) => Err(DataFusionError::Execution(format!("{e}"))),
        },
        Some(Command::Demo { sf, gpu }) => demo::run(engine(gpu_mode(cli.gpu, gpu))?, sf).await,
        Some(Command::Serve { args, gpu }) => serve(engine(gpu_mode(cli.gpu, gpu))?, args).await,
        Some(Command::Bench { what: BenchCommand::Tpch(args) }) => bench_tpch::run(args).await,
        Some(Command::Bench { what: BenchCommand::Skyline(args) }) => bench_skyline::run(args).await,
        Some(Command::Bench { what: BenchCommand::Aggregate { range, sql: true, duckdb, duckdb_wheel } }) => {
            bench_aggregate::run(range.min_log2, range.max_log2, range.iterations, duckdb, duckdb_wheel).await
        }
        Some(Command::Bench { what }) => tokio::task::spawn_blocking(move || match what {
            BenchCommand::Transfer { max_mib, iterations } => bench::transfer(max_mib, iterations),
            BenchCommand::Scan { range } => bench::scan(range.min_log2, range.max_log2, range.iterations),
            BenchCommand::Compact { range, selectivity } => bench::compact(range.min_log2, range.max_log2, range.iterations, selectivity),
            BenchCommand::Filter { range } => bench::filter(range.min_log2, range.max_log2, range.iterations),
            BenchCommand::Select { range, probe, approx_variants, duckdb, duckdb_wheel } => {
                let py = if duckdb { Some(bench_tpch::duckdb_python(duckdb_wheel.as_deref())?) } else { None };
                bench::select(range.min_log2, range.max_log2, range.iterations, probe, approx_variants, py.as_deref())
            }
            BenchCommand::Partition { range } => bench::partition(range.min_log2, range.max_log2, range.iterations),
            BenchCommand::Join(args) => bench_join::run(args),
            BenchCommand::Aggregate { range, .. } => bench::aggregate(range.min_log2, range.max_log2, range.iterations),
            BenchCommand::Tpch(_) | BenchCommand::Skyline(_) => {
                Err(DataFusionError::Internal("this benchmark runs on the async runtime".into()))
            }
        })
        .await
        .map_err(|e| DataFusionError::Execution(e.to_string()))?,
    }
}

fn parse_addr(flag: &str, v: Option<&str>, default: &str) -> Result<Option<std::net::SocketAddr>> {
    let v = v.unwrap_or(default);
    if v.eq_ignore_ascii_case("none") || v.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    use std::net::ToSocketAddrs;
    v.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(Some)
        .ok_or_else(|| DataFusionError::Plan(format!("--{flag} expects HOST:PORT or none, got '{v}'")))
}

/// `ridgeline serve`: registers the tables and serves until Ctrl-C.
async fn serve(rl: Ridgeline, args: ServeArgs) -> Result<()> {
    use crate::serve::{Listen, QueryService, ServiceOptions};
    let listen = Listen {
        flight_sql: parse_addr("flight-sql", args.flight_sql.as_deref(), "127.0.0.1:50051")?,
        http: parse_addr("http", args.http.as_deref(), "127.0.0.1:8080")?,
    };
    if listen.flight_sql.is_none() && listen.http.is_none() {
        return Err(DataFusionError::Plan("serve: both endpoints are off".into()));
    }
    // Options first: a bad one is one error line before any work.
    let secs = |flag: &str, v: f64| -> Result<Option<std::time::Duration>> {
        if !v.is_finite() || v < 0.0 {
            return Err(DataFusionError::Plan(format!("--{flag} expects a finite number of seconds >= 0 (0: none), got {v}")));
        }
        if v == 0.0 {
            return Ok(None);
        }
        if v > 1e9 {
            return Err(DataFusionError::Plan(format!("--{flag} {v} is too large (0 switches the limit off)")));
        }
        std::time::Duration::try_from_secs_f64(v)
            .map(Some)
            .map_err(|_| DataFusionError::Plan(format!("--{flag} {v} is too large")))
    };
    let mib = |flag: &str, m: u64| -> Result<Option<usize>> {
        if m == 0 {
            return Ok(None);
        }
        m.checked_mul(1 << 20)
            .and_then(|b| usize::try_from(b).ok())
            .filter(|&b| b < isize::MAX as usize)
            .map(Some)
            .ok_or_else(|| DataFusionError::Plan(format!("--{flag} {m} is too large (at most {} MiB)", (isize::MAX as u64) >> 20)))
    };
    let query_timeout = secs("query-timeout", args.query_timeout)?;
    let header_timeout = secs("header-timeout", args.header_timeout)?;
    let body_timeout = secs("body-timeout", args.body_timeout)?;
    let query_memory_limit = mib("query-memory-mib", args.query_memory_mib)?;
    let total_memory_limit = mib("total-memory-mib", args.total_memory_mib)?;
    if args.max_connections == 0 {
        return Err(DataFusionError::Plan("--max-connections expects at least 1".into()));
    }
    if let Some(sf) = args.tpch.filter(|sf| !sf.is_finite() || *sf <= 0.0) {
        return Err(DataFusionError::Plan(format!("--tpch expects a scale factor > 0, got {sf}")));
    }
    register_tables(&rl, &args.tables, args.resident).await?;
    if let Some(sf) = args.tpch {
        let tables = tokio::task::spawn_blocking(move || crate::gen::tpch::generate_all(sf))
            .await
            .map_err(|e| DataFusionError::Execution(e.to_string()))??;
        for (name, batches) in tables {
            let schema = crate::gen::tpch::table_schema(&name)?;
            if args.resident {
                rl.register_resident(&name, schema, batches).await?;
            } else {
                rl.register_batches(&name, schema, batches)?;
            }
        }
    }
    let mut options = ServiceOptions {
        token: args.token.clone().or_else(|| crate::config::switch("RIDGELINE_TOKEN").map(str::to_string)).filter(|t| !t.is_empty()),
        query_timeout,
        query_memory_limit,
        total_memory_limit,
        max_request_bytes: args.max_request_bytes,
        allowed_origins: args.allow_origins.clone(),
        allowed_hosts: args.allow_hosts.clone(),
        header_timeout,
        body_timeout,
        max_connections: args.max_connections,
        ..ServiceOptions::default()
    };
    if let Some(m) = args.max_concurrent {
        options.max_concurrent_queries = m.max(1);
    }
    let service = QueryService::new(rl, options);
    crate::serve::serve(service, listen, async {
        let _ = tokio::signal::ctrl_c().await;
    })
    .await
}

