//! `iptables-init`: see the library for the pipeline.

fn main() -> std::process::ExitCode {
    iptables_init::run(std::env::args_os())
}
