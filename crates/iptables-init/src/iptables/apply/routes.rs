//! The TPROXY / IPv6 route actions (Istio's `tools/common/tproxy/run_linux.go`) through iproute2's `ip`,
//! idempotent: a rerun neither fails nor duplicates anything. `ip rule add` does not refuse a duplicate (it
//! would add a second identical rule), so rules are looked up with `ip rule show` first; addresses and routes
//! report "File exists" / "already assigned", which counts as done.

use crate::routes::RouteAction;

use super::backend::run;
use super::error::ApplyError;

/// Runs `ip args`; `Ok(true)` when it did something, `Ok(false)` when `tolerated` matched its error.
fn ip(args: &[String], tolerated: &[&str]) -> Result<bool, ApplyError> {
    let command = format!("ip {}", args.join(" "));
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("ip", &argv, None).map_err(|e| ApplyError::Route {
        command: command.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(true);
    }
    let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if tolerated.iter().any(|t| stderr.contains(t)) {
        return Ok(false);
    }
    Err(ApplyError::Route {
        command,
        message: stderr,
    })
}

/// Whether the fwmark rule of `action` is present (`ip rule show` with the same selector).
fn fwmark_rule_present(action: &RouteAction) -> Result<bool, ApplyError> {
    let args = action.ip_args("show");
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run("ip", &argv, None).map_err(|e| ApplyError::Route {
        command: format!("ip {}", args.join(" ")),
        message: e.to_string(),
    })?;
    Ok(out.status.success() && !out.stdout.iter().all(u8::is_ascii_whitespace))
}

/// Applies one action; `Ok(true)` when it changed something (so a rollback knows what to undo). The
/// command is the one `--dry-run` prints ([`RouteAction::ip_args`]).
pub fn add(action: &RouteAction) -> Result<bool, ApplyError> {
    const EXISTS: &[&str] = &["File exists", "already assigned"];
    if matches!(action, RouteAction::AddFwmarkRule { .. }) && fwmark_rule_present(action)? {
        return Ok(false);
    }
    ip(&action.ip_args("add"), EXISTS)
}

/// Undoes one action, ignoring "not there". `::6` on `lo` is left alone unless `include_address`: a proxy
/// that is still running may have sockets bound to it.
pub fn remove(action: &RouteAction, include_address: bool) -> Result<(), ApplyError> {
    const GONE: &[&str] = &[
        "No such file",
        "No such process",
        "Cannot assign requested address",
        "not found",
        // `ip route del … table 133` when the table was never created (ESRCH with this extack).
        "FIB table does not exist",
    ];
    match action {
        RouteAction::AddLoopbackV6Source => {
            if include_address {
                ip(&action.ip_args("del"), GONE)?;
            }
        }
        // Delete every copy (an older tool may have added duplicates).
        RouteAction::AddFwmarkRule { .. } => {
            while fwmark_rule_present(action)? {
                if !ip(&action.ip_args("del"), GONE)? {
                    break;
                }
            }
        }
        RouteAction::AddLocalRoute { .. } => {
            ip(&action.ip_args("del"), GONE)?;
        }
    }
    Ok(())
}
