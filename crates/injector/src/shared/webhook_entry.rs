//! One entry (`webhooks[i]`) of a MutatingWebhookConfiguration, as the API server holds it: read from
//! `--webhook-config` (a YAML stream or a List, `kubectl get mutatingwebhookconfigurations -o yaml`) or
//! taken from the configurations `webhook_config` generates. `doctor` checks entries, `explain` routes a
//! pod through them (`routing`), and both read them here, so an entry is one type everywhere above the
//! k8s-openapi one `webhook_config` builds.
//!
//! The entry keeps its JSON as found: doctor reports a malformed field as a finding instead of refusing
//! the file, and the routing parses what it needs (`routing::Router::new`), refusing what it cannot
//! evaluate.

mod entry;
pub mod routing;

pub use entry::{Entry, DEFAULT_TIMEOUT_SECONDS};

use std::path::{Path, PathBuf};

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use serde_json::Value;

use sidecar_core::fields::{self, Fields};
use sidecar_core::yaml;

/// Why `--webhook-config` gave no entries.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("--webhook-config {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A document is not YAML.
    #[error("--webhook-config {}: document {doc}: {source}", path.display())]
    Yaml {
        path: PathBuf,
        doc: usize,
        source: yaml::YamlError,
    },
    /// A document is not a MutatingWebhookConfiguration.
    #[error("--webhook-config {}: document {doc} has kind {kind:?}, not MutatingWebhookConfiguration or List", path.display())]
    Kind {
        path: PathBuf,
        doc: usize,
        kind: String,
    },
    /// The file holds no webhook entry at all.
    #[error("--webhook-config {}: no MutatingWebhookConfiguration with webhooks", path.display())]
    Empty { path: PathBuf },
}

/// Reads the entries of every configuration in the file `--webhook-config` names.
pub fn load(path: &Path) -> Result<Vec<Entry>, ReadError> {
    read(path, &read_file(path)?)
}

/// The text of the file `--webhook-config` names (bounded as every input).
pub fn read_file(path: &Path) -> Result<String, ReadError> {
    inject::input::read_text(path).map_err(|source| ReadError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the entries of every configuration in `text` (a YAML stream or a List; `path` names it).
pub fn read(path: &Path, text: &str) -> Result<Vec<Entry>, ReadError> {
    let mut configs = Vec::new();
    for (i, doc) in yaml::documents(text).into_iter().enumerate() {
        if yaml::is_blank_document(doc.text) {
            continue;
        }
        let v = yaml::parse_at(doc).map_err(|source| ReadError::Yaml {
            path: path.to_path_buf(),
            doc: i + 1,
            source,
        })?;
        if v.is_null() {
            continue;
        }
        let kind = v.field("kind").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "MutatingWebhookConfiguration" => configs.push(v),
            k if k.ends_with("List") => {
                for item in v
                    .field("items")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let k = item
                        .field("kind")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    if k != "MutatingWebhookConfiguration" {
                        return Err(ReadError::Kind {
                            path: path.to_path_buf(),
                            doc: i + 1,
                            kind: k.to_string(),
                        });
                    }
                    configs.push(item.clone());
                }
            }
            other => {
                return Err(ReadError::Kind {
                    path: path.to_path_buf(),
                    doc: i + 1,
                    kind: other.to_string(),
                })
            }
        }
    }
    let entries = entries_of(&configs);
    if entries.is_empty() {
        return Err(ReadError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(entries)
}

/// The entries of `configs` (MutatingWebhookConfigurations as JSON), in order, each with its
/// configuration's revision label.
pub fn entries_of(configs: &[Value]) -> Vec<Entry> {
    let mut entries = Vec::new();
    for c in configs {
        let config = fields::path(c, ["metadata", "name"])
            .and_then(Value::as_str)
            .unwrap_or("<unnamed>");
        let revision =
            fields::path(c, ["metadata", "labels", "istio.io/rev"]).and_then(Value::as_str);
        for (index, w) in c
            .field("webhooks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let name = w
                .field("name")
                .and_then(Value::as_str)
                .unwrap_or("<unnamed>");
            let mut entry = Entry::new(config, index, name, w.clone());
            entry.revision = revision.map(str::to_string);
            entries.push(entry);
        }
    }
    entries
}

/// The entries of generated configurations (`webhook_config`'s), as they would be read back from the
/// cluster.
pub fn generated(
    configs: &[MutatingWebhookConfiguration],
) -> Result<Vec<Entry>, serde_json::Error> {
    let values = configs
        .iter()
        .map(serde_json::to_value)
        .collect::<Result<Vec<Value>, _>>()?;
    Ok(entries_of(&values))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_carry_their_configuration_revision_and_path() {
        let configs = [
            json!({"metadata": {"name": "c", "labels": {"istio.io/rev": "canary"}},
            "webhooks": [{"name": "a", "clientConfig": {"url": "https://h:9443/inject/net/n1"}},
                         {"name": "b", "failurePolicy": "Ignore", "timeoutSeconds": 3,
                          "clientConfig": {"service": {"name": "s", "namespace": "ns", "path": "/x"}}}]}),
        ];
        let e = entries_of(&configs);
        assert_eq!(e.len(), 2);
        assert_eq!((e[1].index, e[1].label()), (1, "c/b".to_string()));
        assert_eq!(e[0].revision.as_deref(), Some("canary"));
        assert_eq!(e[0].path, "/inject/net/n1");
        assert_eq!(e[0].service_path(), None);
        assert_eq!(e[0].failure_policy, "Fail");
        assert_eq!(e[0].timeout_seconds(), DEFAULT_TIMEOUT_SECONDS);
        assert_eq!(e[1].service(), Some(("s", "ns", Some("/x"))));
        assert_eq!(
            (e[1].failure_policy.as_str(), e[1].timeout_seconds()),
            ("Ignore", 3)
        );
    }

    #[test]
    fn a_file_of_other_kinds_or_without_entries_is_refused() {
        let p = Path::new("w.yaml");
        let e = read(p, "kind: ConfigMap\n").unwrap_err().to_string();
        assert!(e.contains("document 1 has kind \"ConfigMap\""), "{e}");
        let e = read(p, "kind: MutatingWebhookConfiguration\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no MutatingWebhookConfiguration with webhooks"),
            "{e}"
        );
        let list = "kind: List\nitems:\n- kind: MutatingWebhookConfiguration\n  metadata: {name: c}\n  webhooks: [{name: a}]\n";
        assert_eq!(read(p, list).unwrap()[0].label(), "c/a");
    }
}
