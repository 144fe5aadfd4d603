//! The TPROXY / IPv6 route actions (spec §5.4) through iproute2's `ip`, idempotent: a rerun neither fails
//! nor duplicates anything. `ip rule add` does not refuse a duplicate (it would add a second identical
//! rule), so rules are looked up with `ip rule show` first; addresses and routes report "File exists" /
//! "already assigned", which counts as done.

use crate::rules::{Family, RouteAction};

use super::backend::run;
use super::ApplyError;

fn fam(family: Family) -> &'static str {
    match family {
        Family::V4 => "-4",
        Family::V6 => "-6",
    }
}

fn any_route(family: Family) -> &'static str {
    match family {
        Family::V4 => "0.0.0.0/0",
        Family::V6 => "::/0",
    }
}

/// Runs `ip args`; `Ok(true)` when it did something, `Ok(false)` when `tolerated` matched its error.
fn ip(args: &[&str], tolerated: &[&str]) -> Result<bool, ApplyError> {
    let command = format!("ip {}", args.join(" "));
    let out = run("ip", args, None).map_err(|e| ApplyError::Route {
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

fn fwmark_rule_present(family: Family, mark: &str, table: &str) -> Result<bool, ApplyError> {
    let args = [fam(family), "rule", "show", "fwmark", mark, "lookup", table];
    let out = run("ip", &args, None).map_err(|e| ApplyError::Route {
        command: format!("ip {}", args.join(" ")),
        message: e.to_string(),
    })?;
    Ok(out.status.success() && !out.stdout.iter().all(u8::is_ascii_whitespace))
}

/// Applies one action; `Ok(true)` when it changed something (so a rollback knows what to undo).
pub fn add(action: &RouteAction) -> Result<bool, ApplyError> {
    const EXISTS: &[&str] = &["File exists", "already assigned"];
    match action {
        RouteAction::AddLoopbackV6Source => {
            ip(&["-6", "addr", "add", "::6/128", "dev", "lo"], EXISTS)
        }
        RouteAction::AddFwmarkRule {
            family,
            mark,
            table,
        } => {
            let (mark, table) = (mark.to_string(), table.to_string());
            if fwmark_rule_present(*family, &mark, &table)? {
                return Ok(false);
            }
            ip(
                &[
                    fam(*family),
                    "rule",
                    "add",
                    "fwmark",
                    &mark,
                    "lookup",
                    &table,
                ],
                EXISTS,
            )
        }
        RouteAction::AddLocalRoute { family, table } => {
            let table = table.to_string();
            ip(
                &[
                    fam(*family),
                    "route",
                    "add",
                    "local",
                    any_route(*family),
                    "dev",
                    "lo",
                    "table",
                    &table,
                ],
                EXISTS,
            )
        }
    }
}

/// Undoes one action, ignoring "not there". `::6` on `lo` is left alone unless `include_address`: a proxy
/// that is still running may have sockets bound to it.
pub fn remove(action: &RouteAction, include_address: bool) -> Result<(), ApplyError> {
    const GONE: &[&str] = &[
        "No such file",
        "No such process",
        "Cannot assign requested address",
        "not found",
    ];
    match action {
        RouteAction::AddLoopbackV6Source => {
            if include_address {
                ip(&["-6", "addr", "del", "::6/128", "dev", "lo"], GONE)?;
            }
        }
        RouteAction::AddFwmarkRule {
            family,
            mark,
            table,
        } => {
            let (mark, table) = (mark.to_string(), table.to_string());
            // Delete every copy (an older tool may have added duplicates).
            while fwmark_rule_present(*family, &mark, &table)? {
                if !ip(
                    &[
                        fam(*family),
                        "rule",
                        "del",
                        "fwmark",
                        &mark,
                        "lookup",
                        &table,
                    ],
                    GONE,
                )? {
                    break;
                }
            }
        }
        RouteAction::AddLocalRoute { family, table } => {
            let table = table.to_string();
            ip(
                &[
                    fam(*family),
                    "route",
                    "del",
                    "local",
                    any_route(*family),
                    "dev",
                    "lo",
                    "table",
                    &table,
                ],
                GONE,
            )?;
        }
    }
    Ok(())
}
