//! The entry type itself: its JSON as found, and the fields doctor, explain and the routing read.

use serde_json::{Map, Value};

use sidecar_core::fields::{self, Fields};

/// The API server's default `timeoutSeconds` for an admission webhook.
pub const DEFAULT_TIMEOUT_SECONDS: i64 = 10;

/// One webhook entry of a configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The configuration's name.
    pub config: String,
    /// The entry's index in `webhooks`.
    pub index: usize,
    /// The entry's name.
    pub name: String,
    /// The entry as the configuration holds it.
    pub value: Value,
    /// The revision the configuration belongs to (its `istio.io/rev` label), when labelled.
    pub revision: Option<String>,
    /// `failurePolicy` when it is a string, else `Fail` (the API server's default; other values are
    /// refused by `routing` and reported by doctor).
    pub failure_policy: String,
    /// How many `matchConditions` the entry has.
    pub match_conditions: usize,
    /// The path the API server calls (service path or the URL's path), for the proxy's URL environment.
    pub path: String,
}

impl Entry {
    /// The entry `value` at `index` of configuration `config`, named `name`.
    pub fn new(config: &str, index: usize, name: &str, value: Value) -> Entry {
        let failure_policy = value
            .field("failurePolicy")
            .and_then(Value::as_str)
            .unwrap_or("Fail")
            .to_string();
        let match_conditions = value
            .field("matchConditions")
            .and_then(Value::as_array)
            .map_or(0, Vec::len);
        let client = value.field("clientConfig");
        let path = client
            .and_then(|c| fields::path(c, ["service", "path"]))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                let url = client?.field("url")?.as_str()?;
                let rest = url.split_once("://").map_or(url, |(_, r)| r);
                Some(rest.find('/').map_or("/", |i| &rest[i..]).to_string())
            })
            .unwrap_or_default();
        Entry {
            config: config.to_string(),
            index,
            name: name.to_string(),
            value,
            revision: None,
            failure_policy,
            match_conditions,
            path,
        }
    }

    /// `configuration/entry`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.config, self.name)
    }

    /// The entry's `clientConfig`.
    pub fn client(&self) -> Option<&Map<String, Value>> {
        self.value.field("clientConfig").and_then(Value::as_object)
    }

    /// `(name, namespace, path)` of the clientConfig's service reference.
    pub fn service(&self) -> Option<(&str, &str, Option<&str>)> {
        let s = self.client()?.field("service")?;
        Some((
            s.field("name")?.as_str()?,
            s.field("namespace")?.as_str()?,
            s.field("path").and_then(Value::as_str),
        ))
    }

    /// The clientConfig's service path, when the entry calls a service that has one.
    pub fn service_path(&self) -> Option<&str> {
        self.service().and_then(|(_, _, path)| path)
    }

    /// `timeoutSeconds`, or the API server's default.
    pub fn timeout_seconds(&self) -> i64 {
        self.value
            .field("timeoutSeconds")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_TIMEOUT_SECONDS)
    }

    /// `clientConfig.caBundle`, as found.
    pub fn ca_bundle(&self) -> Option<&Value> {
        self.client()?.field("caBundle")
    }
}
