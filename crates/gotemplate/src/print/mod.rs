//! How values print: Go's `fmt` (`%v` and the `printf` verbs), `strconv` (float and quote formatting),
//! `encoding/json` (for `toJson`/`toJSON`/`toYaml`) and the YAML that sigs.k8s.io/yaml writes.

mod fmt;
mod json;
mod strconv;
mod yaml;

pub(crate) use fmt::{fmt_value, print_value, sprint, sprintf, Spec};
pub(crate) use json::{to_json, write_json};
pub(crate) use strconv::go_quote;
pub(crate) use yaml::to_yaml;
