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
            [ISTIO_INJECTED_ARGS, &["--log_output_level=default:info"]].concat()
        );
    }
}
