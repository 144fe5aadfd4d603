//! Writes a seed corpus for the webhook fuzz target (`crates/injector/fuzz`): an AdmissionReview (v1 and v1beta1)
//! around every pod of the public Istio inputs, some with URL path parameters (`<suffix>\0<body>`).
//!
//! Usage: fuzz-seeds <out-dir>

use anyhow::{anyhow, Context};
use test_support::pods;

fn main() -> anyhow::Result<()> {
    let out = std::env::args()
        .nth(1)
        .ok_or_else(|| anyhow!("usage: fuzz-seeds <out-dir>"))?;
    std::fs::create_dir_all(&out)?;
    let dir = test_support::corpus::inject_dir();
    let mut n = 0;
    let mut names: Vec<_> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && !n.ends_with(".iop.yaml") && !n.starts_with("base-"))
        .collect();
    names.sort();
    for name in names {
        let text = std::fs::read_to_string(dir.join(&name)).with_context(|| name.clone())?;
        let Ok(docs) = pods::injectable_documents(&text) else {
            continue;
        };
        for doc in docs {
            let Ok(pod) = pods::to_pod(&doc) else {
                continue;
            };
            let pod = pods::as_typed_pod(pod);
            for version in ["v1", "v1beta1"] {
                n += 1;
                let review = pods::review(version, &format!("seed-{n}"), "default", &pod);
                let mut body = serde_json::to_vec(&review)?;
                if n % 5 == 0 {
                    let mut with_path = b"cluster/c1/net/n--slash--1\0".to_vec();
                    with_path.append(&mut body);
                    body = with_path;
                }
                std::fs::write(format!("{out}/seed-{n:04}"), body)?;
            }
        }
    }
    eprintln!("{n} seeds written to {out}");
    Ok(())
}
