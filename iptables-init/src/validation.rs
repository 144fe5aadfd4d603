//! `--run-validation`: prove interception with a real connection (spec §9). (Contract only; the apply
//! engineer fills it in.)

use std::time::Duration;

/// What validation needs to know.
#[derive(Debug, Clone)]
pub struct ValidationOptions {
    /// The outbound listener port (`-p`).
    pub proxy_port: u16,
    /// The inbound capture port (`-z`).
    pub inbound_port: u16,
    /// `--iptables-probe-port`.
    pub probe_port: u16,
    /// `--probe-timeout`.
    pub timeout: Duration,
    /// Probe over IPv6 (the detected host IP is IPv6).
    pub ipv6: bool,
}

/// Why validation failed (exit status 126).
#[derive(Debug, thiserror::Error)]
pub enum ValidationError {
    /// Placeholder until validation exists.
    #[error("validation is not implemented yet")]
    NotImplemented,
}

/// Runs the validation.
pub fn run(_opts: &ValidationOptions) -> Result<(), ValidationError> {
    Err(ValidationError::NotImplemented)
}
