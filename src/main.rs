//! The `ridgeline` binary.
use clap::Parser;
use std::process::ExitCode;

/// The CLI's allocator: mimalloc keeps and reuses freed memory, so the large
/// temporary buffers of queries (rank matrices, join tables) do not fault in
/// fresh pages on every run. The library leaves the choice to the embedder.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Mesa's Vulkan WSI complains on stderr when this is unset, even for compute.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        std::env::set_var("XDG_RUNTIME_DIR", std::env::temp_dir());
    }
    ridgeline::guard::install_panic_hook();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
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
            eprintln!("error: cannot start the runtime: {e}");
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
            eprintln!("error: {}", ridgeline::cli::one_line(&e));
            ExitCode::FAILURE
        }
    }
}
