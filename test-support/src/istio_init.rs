//! The `istio-init` container's arguments as Istio's injector writes them, shared by the tests that render
//! them and the netfilter tests that run them.

/// The `istio-init` arguments Istio's injector writes for a default pod (`hello.yaml.injected`): the
/// `istio-iptables` subcommand word, then its flags.
pub const ISTIO_INJECTED_ARGS: &[&str] = &[
    "istio-iptables",
    "-p",
    "15001",
    "-z",
    "15006",
    "-u",
    "1337",
    "-m",
    "REDIRECT",
    "-i",
    "*",
    "-x",
    "",
    "-b",
    "*",
    "-d",
    "15090,15021,15020",
];

/// The flag Istio's injector appends after [`ISTIO_INJECTED_ARGS`] for the default proxy log level.
pub const DEFAULT_LOG_LEVEL_ARG: &str = "--log_output_level=default:info";

/// [`ISTIO_INJECTED_ARGS`] with the value after each `(flag, value)` flag replaced, then `extra` appended:
/// the variations tests make of the injected configuration. Panics on a flag the list does not hold.
pub fn injected_args_with<'a>(replace: &[(&str, &'a str)], extra: &[&'a str]) -> Vec<&'a str> {
    let mut args: Vec<&'a str> = ISTIO_INJECTED_ARGS.to_vec();
    for (flag, value) in replace {
        let at = args
            .iter()
            .position(|a| a == flag)
            .unwrap_or_else(|| panic!("{flag} is not among Istio's injected arguments"));
        args[at + 1] = value;
    }
    args.extend_from_slice(extra);
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::corpus::read_inject;
    use crate::pods::documents;

    /// The list is the one of the golden it is named after, so the tests sharing it run what injected
    /// pods run.
    #[test]
    fn the_list_is_the_golden_s() {
        let docs = documents(&read_inject("hello.yaml.injected").expect("golden")).expect("YAML");
        let init = docs[0]["spec"]["template"]["spec"]["initContainers"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["name"] == "istio-init"))
            .expect("istio-init");
        let args: Vec<&str> = init["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect();
        assert_eq!(
            args,
            [ISTIO_INJECTED_ARGS, &[DEFAULT_LOG_LEVEL_ARG]].concat()
        );
    }

    #[test]
    fn variations_replace_values_and_append() {
        let v = injected_args_with(&[("-m", "TPROXY"), ("-d", "15090")], &["--ipv6", "false"]);
        assert_eq!(v.len(), ISTIO_INJECTED_ARGS.len() + 2);
        assert_eq!(v[8], "TPROXY");
        assert_eq!(v[16], "15090");
        assert_eq!(&v[17..], ["--ipv6", "false"]);
        assert_eq!(&v[..8], &ISTIO_INJECTED_ARGS[..8]);
    }

    #[test]
    #[should_panic(expected = "-t is not among")]
    fn an_unknown_flag_is_refused() {
        injected_args_with(&[("-t", "9")], &[]);
    }
}
