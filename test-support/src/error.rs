//! The errors of the test-data loaders.

use std::path::PathBuf;

/// Why test data could not be read; each names the file (or case) and what was wrong.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file of the test data could not be read.
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file or text that should be JSON is not.
    #[error("{what} is not JSON: {source}")]
    Json {
        what: String,
        source: serde_json::Error,
    },
    /// A file or text that should be YAML is not.
    #[error("{what} is not YAML: {message}")]
    Yaml { what: String, message: String },
    /// A case of a case table lacks a field or has one of the wrong type.
    #[error("case {case} of {table}: field `{field}` is missing or not a string")]
    Field {
        table: String,
        case: usize,
        field: &'static str,
    },
    /// A workload document has no pod template where its kind keeps one.
    #[error("{kind} {name} has no pod template")]
    NoTemplate { kind: String, name: String },
    /// A document's `metadata` is not a map.
    #[error("{kind} {name}: metadata is not a map")]
    Metadata { kind: String, name: String },
    /// A row of a `cases.tsv` table cannot be read.
    #[error("{path} line {line}: {what}")]
    Row {
        path: PathBuf,
        line: usize,
        what: String,
    },
    /// A group a test needs could not be created.
    #[error("groupadd -f {group}: {message}")]
    Group { group: String, message: String },
    /// A scratch file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}
