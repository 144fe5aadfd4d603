//! `istio-cni`: `istio-cni install ...` is the node agent; otherwise the CNI plugin as the runtime runs
//! it (`CNI_COMMAND` set). See the library.

use std::process::ExitCode;

fn main() -> ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("install") {
        let settings = match istio_cni::agent::cli::parse(&argv[2..], &env) {
            Ok(s) => s,
            Err(istio_cni::agent::cli::CliError::Parse(e)) => {
                let _ = e.print();
                return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
            }
            Err(e) => {
                eprintln!("istio-cni install: {e}");
                return ExitCode::from(2);
            }
        };
        istio_cni::agent::init_logging();
        return match istio_cni::agent::run(settings) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("istio-cni install: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let code = istio_cni::plugin::run(
        &env,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
    );
    ExitCode::from(code)
}
