//! The `memscope` binary: parses flags and calls the library. Everything else lives in `server`'s
//! library so it can be tested without spawning processes.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    server::fix_mmap_threshold();
    let cli = server::cli::Cli::parse();
    match server::cli::run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memscope: {e:#}");
            ExitCode::FAILURE
        }
    }
}
