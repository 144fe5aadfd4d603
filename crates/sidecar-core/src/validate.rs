//! Validators shared by the pod annotations and the `values` document: the checks of Istio's
//! `validate.go` (ports, CIDRs, interception mode, quantities) and the shapes of the values that reach
//! `istio-init` arguments unchecked by Istio (interface names, log levels). Each returns the reason a
//! value is invalid; the caller names the annotation or key.

use std::net::IpAddr;

/// `REDIRECT`, `TPROXY` or `NONE`, exactly.
pub fn validate_interception_mode(v: &str) -> Result<(), String> {
    match v {
        "REDIRECT" | "TPROXY" | "NONE" => Ok(()),
        _ => Err(format!(
            "interceptionMode invalid, use REDIRECT,TPROXY,NONE: {v}"
        )),
    }
}

/// A port: decimal 0-65535 after trimming spaces.
pub fn parse_port(v: &str) -> Result<u16, String> {
    let t = v.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("failed parsing port {t:?}"));
    }
    t.parse::<u16>()
        .map_err(|_| format!("failed parsing port {t:?}: out of range"))
}

/// A comma list of ports; an all-blank value is an empty list; entries are trimmed; empty entries fail.
pub fn validate_port_list(v: &str) -> Result<(), String> {
    if v.trim().is_empty() {
        return Ok(());
    }
    for p in v.split(',') {
        parse_port(p)?;
    }
    Ok(())
}

/// One CIDR as Go's `netip.ParsePrefix` accepts it: an address, `/`, a decimal prefix length without
/// leading zeros, within the family's width; no zones, no spaces.
pub fn parse_cidr(c: &str) -> Result<(IpAddr, u8), String> {
    let (addr, bits) = c
        .split_once('/')
        .ok_or_else(|| format!("failed parsing cidr '{c}': no '/'"))?;
    let ip: IpAddr = addr
        .parse()
        .map_err(|_| format!("failed parsing cidr '{c}': bad address {addr:?}"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let ok_digits = !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !(bits.len() > 1 && bits.starts_with('0'))
        && bits.len() <= 3;
    let n: u8 = if ok_digits {
        bits.parse().unwrap_or(u8::MAX)
    } else {
        u8::MAX
    };
    if n > max {
        return Err(format!(
            "failed parsing cidr '{c}': bad bits after slash: {bits:?}"
        ));
    }
    Ok((ip, n))
}

/// A comma list of CIDRs (empty value allowed, empty entries not).
pub fn validate_cidr_list(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    for c in v.split(',') {
        parse_cidr(c)?;
    }
    Ok(())
}

/// `*` or a CIDR list (Istio's `ValidateIncludeIPRanges`).
pub fn validate_include_ip_ranges(v: &str) -> Result<(), String> {
    if v == "*" {
        return Ok(());
    }
    validate_cidr_list(v).map_err(|e| format!("IncludeIPRanges invalid: {e}"))
}

/// A CIDR list (Istio's `ValidateExcludeIPRanges`; `*` is invalid).
pub fn validate_exclude_ip_ranges(v: &str) -> Result<(), String> {
    validate_cidr_list(v).map_err(|e| format!("ExcludeIPRanges invalid: {e}"))
}

/// Interface names: comma list, entries trimmed and non-empty, `^[a-zA-Z][a-zA-Z0-9_.-]*$`, ≤ 15 chars.
pub fn validate_interfaces(v: &str) -> Result<(), String> {
    if v.is_empty() {
        return Ok(());
    }
    for name in v.split(',') {
        let n = name.trim();
        let b = n.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 15
            && b[0].is_ascii_alphabetic()
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
        if !ok {
            return Err(format!("interface name {n:?} invalid"));
        }
    }
    Ok(())
}

/// A Kubernetes quantity (`resource.ParseQuantity`): sign, decimal number, optional suffix (binary SI,
/// decimal SI or exponent).
pub fn validate_quantity(v: &str) -> Result<(), String> {
    if parse_quantity(v).is_some() {
        Ok(())
    } else {
        Err("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'".to_string())
    }
}

/// Parses a Kubernetes quantity to its value (as f64; precise enough to compare and validate).
pub fn parse_quantity(v: &str) -> Option<f64> {
    let b = v.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let num_start = i;
    let mut dots = 0;
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        if b[i] == b'.' {
            dots += 1;
        }
        i += 1;
    }
    let num = &v[num_start..i];
    if num.is_empty() || num == "." || dots > 1 {
        return None;
    }
    let mut value: f64 = num.parse().ok()?;
    if num_start == 1 && b[0] == b'-' {
        value = -value;
    }
    let suffix = &v[i..];
    let mult = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        s if s.starts_with(['e', 'E']) => {
            let exp = &s[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            10f64.powi(exp.parse::<i32>().ok()?)
        }
        _ => return None,
    };
    Some(value * mult)
}

/// The names a container's `env` may use, as the API server validates them since Kubernetes 1.32
/// (`RelaxedEnvironmentVariableValidation`, on by default from 1.32 and GA in 1.34; `validation.go`
/// `IsRelaxedEnvVarName`): not empty, printable ASCII only, no `=`. `proxyMetadata` and ProxyConfig
/// `environmentVariables` become such env entries; the older C-identifier rule would refuse names
/// (`A B`, `1A`) that the clusters this targets accept, and Istio does not check them at all.
pub fn is_env_var_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|c| (b' '..=b'~').contains(&c) && c != b'=')
}

/// `scope:level` pairs (or a bare level) joined by commas: the value becomes one `--log_output_level=`
/// argument, so only a conservative character set is allowed.
pub fn validate_log_level(v: &str) -> Result<(), String> {
    let ok = !v.is_empty()
        && v.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b':' | b',' | b'_' | b'-' | b'.'));
    if ok {
        Ok(())
    } else {
        Err("log level must be level or scope:level[,scope:level…] (letters, digits, ':', ',', '_', '-', '.')".to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(parse_quantity("2000m"), parse_quantity("2"));
        assert_eq!(parse_quantity("1024Mi"), parse_quantity("1Gi"));
        assert_eq!(parse_quantity("1Gib"), None);
    }

    #[test]
    fn ports_and_cidrs() {
        assert_eq!(parse_port(" 80 "), Ok(80));
        assert!(parse_port("65536").is_err());
        assert!(validate_port_list(" ").is_ok());
        assert!(validate_port_list("80,").is_err());
        assert_eq!(parse_cidr("10.0.0.0/8").map(|(_, n)| n), Ok(8));
        assert!(parse_cidr("10.0.0.0/08").is_err());
        assert!(validate_include_ip_ranges("*").is_ok());
        assert!(validate_exclude_ip_ranges("*").is_err());
    }
}
