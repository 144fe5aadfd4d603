//! The traffic stage: each `--connection` walked through the rule model of the pod's `istio-init`
//! arguments by iptables-init's library (`iptables_init::explain`, the walk `iptables-init explain`
//! runs); nothing of the walk is here.

pub use iptables_init::{Connection, ConnectionError, ExplainError, Verdict};

/// Parses the `--connection` specs with iptables-init's own parser, whose error names the spec.
pub fn parse(specs: &[String]) -> Result<Vec<Connection>, ConnectionError> {
    specs.iter().map(|s| s.parse::<Connection>()).collect()
}

/// Walks `connections` through the rules of `init_args` (the init container's args; the leading
/// `istio-iptables` word, the program name, is dropped as iptables-init takes the flags alone).
pub fn walk(
    init_args: &[String],
    connections: &[Connection],
) -> Result<Vec<Verdict>, ExplainError> {
    let flags = match init_args.first().map(String::as_str) {
        Some("istio-iptables") => &init_args[1..],
        _ => init_args,
    };
    iptables_init::explain(flags, connections).map(|e| e.connections)
}

/// One verdict as a text line: the spec, where it lands, and the deciding rule.
pub fn text(v: &Verdict) -> String {
    let place = match (&v.table, &v.chain) {
        (Some(t), Some(c)) => format!("{t}/{c}"),
        (None, Some(c)) => c.clone(),
        (Some(t), None) => t.clone(),
        (None, None) => "no rule for this family".to_string(),
    };
    let rule = v
        .rule
        .clone()
        .unwrap_or_else(|| "end of the base chain (policy accept)".to_string());
    format!(
        "{} -> {} port {} ({place}: {rule})",
        v.spec, v.verdict, v.port
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn connections_parse_with_iptables_inits_parser_and_errors_name_the_spec() {
        let c = parse(&["outbound:tcp:10.0.0.5:5432".to_string()]).unwrap();
        assert_eq!(c[0].port, 5432);
        let e = parse(&["sideways:tcp:80".to_string()])
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("connection \"sideways:tcp:80\": "), "{e}");
    }

    #[test]
    fn the_init_args_are_walked_without_the_program_name() {
        let init = args("istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i * -x 10.0.0.0/8 -b * -d 15090,15021,15020");
        let conns = parse(&[
            "outbound:tcp:93.184.216.34:443".to_string(),
            "outbound:tcp:10.0.0.5:5432".to_string(),
            "inbound:tcp:8080".to_string(),
            "outbound:tcp:93.184.216.34:443,uid=1337".to_string(),
        ])
        .unwrap();
        let v = walk(&init, &conns).unwrap();
        let kinds: Vec<(String, u16)> = v.iter().map(|v| (v.verdict.to_string(), v.port)).collect();
        assert_eq!(
            kinds,
            [
                ("outbound-proxy".to_string(), 15001),
                ("bypass".to_string(), 5432),
                ("inbound-proxy".to_string(), 15006),
                ("bypass".to_string(), 443),
            ]
        );
        // The same flags without the program name give the same verdicts.
        assert_eq!(walk(&init[1..], &conns).unwrap(), v);
        let line = text(&v[0]);
        assert!(
            line.starts_with("outbound:tcp:93.184.216.34:443 -> outbound-proxy port 15001 (nat/"),
            "{line}"
        );
    }
}
