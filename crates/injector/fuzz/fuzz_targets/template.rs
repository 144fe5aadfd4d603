//! Fuzz target over the evaluator of users' Go templates, with the work budget as its oracle.
//!
//! Input layout: bytes before the first NUL are the template text, the rest is the JSON of `.Values` (not
//! JSON: the rest as a string, `.Values.s`, so long strings reach the string functions). The text is parsed
//! and, when it parses, executed within a small budget. Failures: a panic, an output past the output bound,
//! and an execution that takes longer than the budget allows — `MAX_WORK` units at `NS_PER_UNIT`, far above
//! the release build's measured worst (a few ns per unit), so only work the budget does not charge (a
//! primitive that is superlinear or not charged at all) can cross it.
#![no_main]

use std::time::{Duration, Instant};

use gotemplate::{Limits, Template};
use libfuzzer_sys::fuzz_target;

const MAX_WORK: usize = 4 << 20;
/// Generous per-unit time under fuzzing instrumentation (sanitizer coverage slows the evaluator).
const NS_PER_UNIT: u64 = 100;
/// Fixed cost of one execution (setting up, parsing the data root) that the budget does not cover.
const FIXED: Duration = Duration::from_millis(50);

fuzz_target!(|data: &[u8]| {
    let (text, rest) = match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let values = serde_json::from_slice::<serde_json::Value>(rest).unwrap_or_else(|_| {
        serde_json::json!({"s": String::from_utf8_lossy(rest), "l": [1, "a", {"b": "c"}], "m": {"a": "b"}})
    });
    let root = serde_json::json!({
        "Values": values,
        "ObjectMeta": {"name": "p", "annotations": {"a": "b"}, "labels": {"app": "x"}},
        "Spec": {"containers": [{"name": "app", "image": "nginx", "env": [{"name": "A", "value": "b"}]}]},
    });
    let Ok(t) = Template::parse("fuzz", text) else {
        return;
    };
    let limits = Limits {
        max_work: MAX_WORK,
        max_output_bytes: 256 << 10,
        ..Limits::default()
    };
    let start = Instant::now();
    let (res, cost) = t.execute_metered(&root, &limits);
    let elapsed = start.elapsed();
    if let Ok(out) = &res {
        assert!(out.len() <= limits.max_output_bytes, "output past the bound");
    }
    let bound = FIXED + Duration::from_nanos(NS_PER_UNIT * MAX_WORK as u64);
    assert!(
        elapsed <= bound,
        "took {elapsed:?} (bound {bound:?}) for {cost:?}: {text:?}"
    );
});
