//! The `ledger` command: migrations, the ledger service, the CDC relay, the reassignment
//! worker, verification, projection rebuilds, audit queries. Each subcommand lives in
//! [`cli`]. The benchmarks and the demo are `ledger-bench`'s (`bench/`): this binary
//! carries no benchmark, demo or scratch-database code.

// `outln!` and `out!` (`ra_ledger::command_line::out`), for every module of the binary.
#[macro_use]
extern crate ra_ledger;

mod cli;

/// mimalloc rather than glibc's malloc, for Rust here and for librdkafka through the crate's
/// `override` feature: the relay's per-message allocations spent about 30% of its CPU in
/// glibc's allocator (`perf` during `ledger-bench relay`, whose in-process relay has this
/// same allocator). With it the relay drained 112,000-129,000 rows/s, against 93,000-94,000 with mimalloc for Rust alone and 78,000
/// with glibc (docs/benchmarks.md, "Benchmarks on Apache Kafka").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exits 0, or prints the error with its causes (as `fn main() -> anyhow::Result<()>`
/// would) and exits [`cli::exit_status`]: 78 for a refusal no restart mends, 1 for any
/// other error.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    ra_ledger::command_line::init_logging();
    match cli::run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("Error: {error:?}");
            std::process::ExitCode::from(cli::exit_status(&error))
        }
    }
}
