//! The node's CNI network configuration and our entry in it: Istio's `cni/pkg/install/cniconfig.go`
//! (`getConfigFilenames`, `insertCNIConfig`, `createCNIConfigFile`) and the removal of `Cleanup`
//! (`install.go`). Objects keep their keys in the order they were read (serde_json's `preserve_order`),
//! so the other plugins are written back as they were.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

/// The `type` (and `name`) of our entry.
pub const PLUGIN_TYPE: &str = "istio-cni";
/// The file written when not chained and no name is given (Istio's `getCNIConfigFilepath`).
pub const OWN_CONF_NAME: &str = "YYY-istio-cni.conf";
/// The `cniVersion` Istio writes on a list it builds and on its own file.
const CNI_VERSION: &str = "0.3.1";

/// What is wrong with a configuration file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is not JSON.
    #[error("{path}: not JSON: {source}")]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// The file is JSON but not a network configuration (Istio's `util.GetPlugins`).
    #[error("{path}: {what}")]
    Shape { path: PathBuf, what: String },
    /// The file or the folder cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// What the agent puts into the chain: the plugin's own type of the keys it reads.
pub use crate::plugin::conf::PluginEntry;

/// The entry as it goes into a list: our name and type, then the keys the plugin reads.
#[derive(serde::Serialize)]
struct Listed<'a> {
    name: &'static str,
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    entry: &'a PluginEntry,
}

impl PluginEntry {
    /// The entry as it goes into a list (no `cniVersion`, as Istio's `insertCNIConfig` deletes it).
    pub fn to_value(&self) -> Value {
        let listed = Listed {
            name: PLUGIN_TYPE,
            kind: PLUGIN_TYPE,
            entry: self,
        };
        // Strings, a list of strings and a boolean (the path written lossily): nothing here can fail
        // to serialise, so the fallback is never taken.
        serde_json::to_value(listed).unwrap_or(Value::Null)
    }

    /// The file of its own when not chained: the entry with `cniVersion`.
    pub fn standalone(&self) -> Vec<u8> {
        let mut v = self.to_value();
        if let Value::Object(m) = &mut v {
            m.insert("cniVersion".into(), CNI_VERSION.into());
        }
        render(&v)
    }
}

/// Istio's `MarshalCNIConfig`: two-space indentation and a final newline.
pub fn render(v: &Value) -> Vec<u8> {
    let mut out = serde_json::to_vec_pretty(v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// One field of an object, found by scanning (the workspace reads JSON fields this way, not by
/// serde_json's hashing `get`; see clippy.toml).
pub fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

fn type_of(v: &Value) -> Option<&str> {
    v.as_object()
        .and_then(|o| field(o, "type"))
        .and_then(Value::as_str)
}

fn shape(path: &Path, what: impl Into<String>) -> ConfigError {
    ConfigError::Shape {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

fn parse_object(path: &Path, bytes: &[u8]) -> Result<Map<String, Value>, ConfigError> {
    match serde_json::from_slice(bytes) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(shape(path, format!("is {other}, expected a JSON object"))),
        Err(source) => Err(ConfigError::Json {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The `plugins` list of a configuration list, each an object (Istio's `GetPlugins` and `GetPlugin`).
fn plugins<'a>(path: &Path, list: &'a Map<String, Value>) -> Result<&'a [Value], ConfigError> {
    let Some(Value::Array(items)) = field(list, "plugins") else {
        return Err(shape(
            path,
            format!(
                "plugins is {}, expected a list",
                field(list, "plugins").unwrap_or(&Value::Null)
            ),
        ));
    };
    if let Some((i, bad)) = items.iter().enumerate().find(|(_, p)| !p.is_object()) {
        return Err(shape(
            path,
            format!("plugins[{i}] is {bad}, expected an object"),
        ));
    }
    Ok(items)
}

fn is_ours(plugin: &Value) -> bool {
    type_of(plugin) == Some(PLUGIN_TYPE)
}

/// Whether the file is a network configuration libcni would load: a `.conflist` with a `name` and a
/// non-empty `plugins` list, or a `.conf` with a `type` (Istio's `getConfigFilenames` checks).
pub fn is_valid(path: &Path, bytes: &[u8]) -> bool {
    let Ok(obj) = parse_object(path, bytes) else {
        return false;
    };
    if path.extension().is_some_and(|e| e == "conflist") {
        let named = field(&obj, "name")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        named && plugins(path, &obj).is_ok_and(|p| !p.is_empty())
    } else {
        field(&obj, "type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty())
    }
}

/// The valid `.conf` and `.conflist` files of `dir`, sorted by name: the runtime uses the first.
pub fn valid_files(dir: &Path) -> Result<Vec<PathBuf>, ConfigError> {
    let io = |source| ConfigError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        let conf = path
            .extension()
            .is_some_and(|e| e == "conf" || e == "conflist");
        if conf && entry.file_type().map_err(io)?.is_file() {
            names.push(path);
        }
    }
    names.sort();
    Ok(names
        .into_iter()
        .filter(|p| {
            super::bounded_read::read(p, super::bounded_read::Links::NoFollow)
                .is_ok_and(|b| is_valid(p, &b))
        })
        .collect())
}

/// Istio's `insertCNIConfig`: a single plugin (`.conf`) becomes a list `k8s-pod-network` with it first
/// and our entry second; in a list our entry is appended, every earlier `istio-cni` entry removed first
/// (Istio's removes the first only, so a list holding two kept a stale one, pointing at another run
/// dir, ahead of ours).
pub fn insert(path: &Path, existing: &[u8], entry: &PluginEntry) -> Result<Vec<u8>, ConfigError> {
    let mut obj = parse_object(path, existing)?;
    let ours = entry.to_value();
    if field(&obj, "type").is_some() {
        obj.remove("cniVersion");
        return Ok(render(&json!({
            "name": "k8s-pod-network",
            "cniVersion": CNI_VERSION,
            "plugins": [Value::Object(obj), ours],
        })));
    }
    let mut list = plugins(path, &obj)?.to_vec();
    list.retain(|p| !is_ours(p));
    list.push(ours);
    obj.insert("plugins".into(), Value::Array(list));
    Ok(render(&Value::Object(obj)))
}

/// `Cleanup`'s removal: the list without any `istio-cni` entry (ours and stale ones alike: each would
/// point the runtime at the binary and kubeconfig the cleanup removes), everything else as it was.
pub fn remove(path: &Path, existing: &[u8]) -> Result<Vec<u8>, ConfigError> {
    let mut obj = parse_object(path, existing)?;
    let mut list = plugins(path, &obj)?.to_vec();
    list.retain(|p| !is_ours(p));
    obj.insert("plugins".into(), Value::Array(list));
    Ok(render(&Value::Object(obj)))
}

/// How many `istio-cni` entries a list holds (none when it is not a list).
pub fn entries_of_ours(path: &Path, bytes: &[u8]) -> Result<usize, ConfigError> {
    let obj = parse_object(path, bytes)?;
    if field(&obj, "plugins").is_none() {
        return Ok(0);
    }
    Ok(plugins(path, &obj)?.iter().filter(|p| is_ours(p)).count())
}

/// Whether the configuration holds our entry: exactly one in a list (chained; a second, stale one
/// makes the agent write the list again), or as the file's own type.
pub fn holds_ours(path: &Path, bytes: &[u8], chained: bool) -> Result<bool, ConfigError> {
    let obj = parse_object(path, bytes)?;
    if chained {
        Ok(plugins(path, &obj)?.iter().filter(|p| is_ours(p)).count() == 1)
    } else {
        Ok(field(&obj, "type").and_then(Value::as_str) == Some(PLUGIN_TYPE))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn entry() -> PluginEntry {
        PluginEntry {
            run_dir: PathBuf::from("/var/run/istio-cni"),
            log_level: "info".into(),
            exclude_namespaces: vec!["kube-system".into()],
            pod_namespace: "istio-system".into(),
            native_nftables: false,
        }
    }

    const LIST: &str = r#"{"cniVersion":"1.0.0","name":"k8s","plugins":[
        {"type":"bridge","bridge":"cni0","isGateway":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.1.0.0/16"}]]}},
        {"type":"portmap","capabilities":{"portMappings":true}}]}"#;

    fn value(b: &[u8]) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    /// What the agent writes is what the plugin reads back, in a list and in a file of its own: the
    /// one type, written with serde and read by the plugin's field-by-field parse.
    #[test]
    fn the_plugin_reads_back_the_entry_the_agent_writes() {
        let mut e = entry();
        e.native_nftables = true;
        e.log_level = "debug".into();
        let read = crate::plugin::conf::parse(&e.standalone()).unwrap();
        assert_eq!(read.entry, e);
        let out = insert(Path::new("10-k8s.conflist"), LIST.as_bytes(), &e).unwrap();
        let mut ours = value(&out)["plugins"][2].clone();
        ours["cniVersion"] = "1.0.0".into();
        let read = crate::plugin::conf::parse(&serde_json::to_vec(&ours).unwrap()).unwrap();
        assert_eq!(read.entry, e);
    }

    #[test]
    fn a_list_gets_our_entry_last_and_loses_it_again_unchanged() {
        let p = Path::new("10-k8s.conflist");
        let out = insert(p, LIST.as_bytes(), &entry()).unwrap();
        let v = value(&out);
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 3);
        assert_eq!(plugins[2], entry().to_value());
        assert_eq!(plugins[2]["exclude_namespaces"], json!(["kube-system"]));
        assert!(plugins[2].get("cniVersion").is_none());
        assert!(holds_ours(p, &out, true).unwrap());
        let back = remove(p, &out).unwrap();
        assert_eq!(value(&back), value(LIST.as_bytes()));
        assert!(!holds_ours(p, &back, true).unwrap());
        // The other plugins keep their keys' order, as written.
        let text = String::from_utf8(back).unwrap();
        assert!(text.find("\"bridge\": \"cni0\"").unwrap() < text.find("isGateway").unwrap());
    }

    #[test]
    fn an_existing_entry_of_ours_is_replaced_not_repeated() {
        let p = Path::new("10-k8s.conflist");
        let once = insert(p, LIST.as_bytes(), &entry()).unwrap();
        let mut other = entry();
        other.native_nftables = true;
        let twice = insert(p, &once, &other).unwrap();
        let v = value(&twice);
        let plugins = v["plugins"].as_array().unwrap();
        assert_eq!(plugins.len(), 3);
        assert_eq!(plugins[2]["native_nftables"], json!(true));
    }

    /// Before the fix, a list already holding `istio-cni` twice kept the second after install and
    /// after cleanup.
    #[test]
    fn every_istio_cni_entry_is_replaced_on_insert_and_removed_on_cleanup() {
        let p = Path::new("10-k8s.conflist");
        let stale = json!({"type": "istio-cni", "cni_agent_run_dir": "/old/run"});
        let mut v = value(LIST.as_bytes());
        let list = v["plugins"].as_array_mut().unwrap();
        list.insert(1, stale.clone());
        list.push(stale);
        let twice = render(&v);
        assert_eq!(entries_of_ours(p, &twice).unwrap(), 2);
        assert!(
            !holds_ours(p, &twice, true).unwrap(),
            "two entries pass the check"
        );

        let installed = insert(p, &twice, &entry()).unwrap();
        let v = value(&installed);
        let types: Vec<_> = v["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(types, ["bridge", "portmap", "istio-cni"]);
        assert_eq!(v["plugins"][2], entry().to_value());
        assert!(holds_ours(p, &installed, true).unwrap());

        let cleaned = remove(p, &twice).unwrap();
        assert_eq!(value(&cleaned), value(LIST.as_bytes()));
        assert_eq!(entries_of_ours(p, &cleaned).unwrap(), 0);
        assert_eq!(
            entries_of_ours(Path::new("10-b.conf"), br#"{"type":"bridge"}"#).unwrap(),
            0
        );
    }

    #[test]
    fn a_single_plugin_becomes_a_list_with_it_first() {
        let p = Path::new("10-bridge.conf");
        let conf = br#"{"cniVersion":"0.4.0","name":"bridge-net","type":"bridge","ipam":{"type":"host-local"}}"#;
        let v = value(&insert(p, conf, &entry()).unwrap());
        assert_eq!(v["name"], "k8s-pod-network");
        assert_eq!(v["cniVersion"], "0.3.1");
        assert_eq!(
            v["plugins"][0],
            json!({"name":"bridge-net","type":"bridge","ipam":{"type":"host-local"}})
        );
        assert_eq!(v["plugins"][1]["type"], "istio-cni");
    }

    #[test]
    fn a_broken_list_is_refused_naming_the_file_and_field() {
        let p = Path::new("/etc/cni/net.d/10-x.conflist");
        let e = insert(p, br#"{"name":"x","plugins":{"type":"bridge"}}"#, &entry()).unwrap_err();
        assert_eq!(
            e.to_string(),
            r#"/etc/cni/net.d/10-x.conflist: plugins is {"type":"bridge"}, expected a list"#
        );
        let e = remove(p, br#"{"name":"x","plugins":[1]}"#).unwrap_err();
        assert!(e.to_string().contains("plugins[0] is 1"), "{e}");
        assert!(matches!(
            insert(p, b"{", &entry()),
            Err(ConfigError::Json { .. })
        ));
    }

    #[test]
    fn only_loadable_files_count_in_name_order() {
        let dir = std::env::temp_dir().join(format!("cni-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("05-empty.conflist"),
            br#"{"name":"e","plugins":[]}"#,
        )
        .unwrap();
        std::fs::write(dir.join("06-notype.conf"), br#"{"name":"n"}"#).unwrap();
        std::fs::write(dir.join("07-broken.conflist"), b"{").unwrap();
        std::fs::write(dir.join("10-k8s.conflist"), LIST).unwrap();
        std::fs::write(dir.join("20-b.conf"), br#"{"type":"bridge"}"#).unwrap();
        std::fs::write(dir.join("00-readme.txt"), b"{}").unwrap();
        let names: Vec<_> = valid_files(&dir)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["10-k8s.conflist", "20-b.conf"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_standalone_file_is_our_entry_with_a_version() {
        let v = value(&entry().standalone());
        assert_eq!(v["type"], "istio-cni");
        assert_eq!(v["cniVersion"], "0.3.1");
        assert!(holds_ours(
            Path::new("YYY-istio-cni.conf"),
            &entry().standalone(),
            false
        )
        .unwrap());
    }
}
