//! `istio-cni`: the CNI plugin when the runtime runs it (`CNI_COMMAND` set). See the library.

fn main() -> std::process::ExitCode {
    let env = |name: &str| std::env::var(name).ok();
    let code = istio_cni::plugin::run(
        &env,
        &mut std::io::stdin().lock(),
        &mut std::io::stdout().lock(),
    );
    std::process::ExitCode::from(code)
}
