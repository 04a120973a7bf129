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
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = ridgeline::cli::Cli::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(ridgeline::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", ridgeline::cli::one_line(&e));
            ExitCode::FAILURE
        }
    }
}
