//! The `ridgeline` binary.
use clap::Parser;
use std::process::ExitCode;

/// The CLI's allocator: mimalloc keeps and reuses freed memory, so the large
/// temporary buffers of queries (rank matrices, join tables) do not fault in
/// fresh pages on every run. The library leaves the choice to the embedder.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    ridgeline::guard::install_panic_hook();
    // Warnings and errors print as `warning: ...` / `error: ...` lines (each once);
    // `RUST_LOG` turns on the other levels with their targets.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format(|buf, record| {
            use std::io::Write;
            match record.level() {
                log::Level::Warn => writeln!(buf, "warning: {}", record.args()),
                log::Level::Error => writeln!(buf, "error: {}", record.args()),
                l => writeln!(buf, "[{l} {}] {}", record.target(), record.args()),
            }
        })
        .init();
    let cli = ridgeline::cli::Cli::parse();
    // Deep SQL (long OR chains, thousands of UNION ALL branches) recurses in the
    // parser, planner and optimizer: DataFusion's `recursive_protection` grows the
    // stack on demand where it recurses; large worker stacks cover the rest.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(ridgeline::WORKER_STACK_BYTES)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = std::io::Write::write_fmt(&mut std::io::stderr(), format_args!("error: cannot start the runtime: {e}\n"));
            return ExitCode::FAILURE;
        }
    };
    // The command's own future runs on this thread: give it a large stack too.
    let result = std::thread::Builder::new()
        .name("ridgeline-main".into())
        .stack_size(ridgeline::WORKER_STACK_BYTES)
        .spawn(move || rt.block_on(ridgeline::cli::run(cli)))
        .map_err(|e| datafusion::error::DataFusionError::Execution(format!("cannot start the main thread: {e}")))
        .and_then(|h| {
            h.join().unwrap_or_else(|p| {
                Err(ridgeline::guard::panic_error(p.as_ref()))
            })
        });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!: it panics when standard error is closed.
            ridgeline::cli::output::report_error(&e);
            ExitCode::FAILURE
        }
    }
}
