//! `testproxy`: see the library (`testproxy::run`) for the roles.

use std::process::ExitCode;

use clap::Parser as _;

fn main() -> ExitCode {
    let cli = testproxy::cli::Cli::parse();
    // One thread: a test pod's proxy carries a handful of connections.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("testproxy: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(testproxy::run(cli.command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("testproxy: {e}");
            ExitCode::FAILURE
        }
    }
}
