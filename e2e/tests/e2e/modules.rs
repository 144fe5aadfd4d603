//! What Cargo cannot keep: the layers between crates are Cargo's (a crate names only the crates below it
//! in its manifest, and Cargo refuses a cycle), but inside a crate any module may name any other. Read
//! from the sources (`use crate::…` and `crate::…` paths outside test code), so that a new cycle or an
//! import back up fails here rather than in review: no crate's top-level modules form a cycle; in the
//! injector the front ends (one module per subcommand) stand on `cluster` and `shared`, none imports
//! another, and `shared` stays free of the cluster; the CNI plugin stands alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module name → the files that make it up (`a.rs` and everything under `a/`).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut mods: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("read the crate's src") {
        let path = entry.expect("directory entry").path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("")
            .to_string();
        if path.is_dir() {
            let mut stack = vec![path.clone()];
            while let Some(dir) = stack.pop() {
                for e in std::fs::read_dir(&dir).expect("read a module directory") {
                    let p = e.expect("directory entry").path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if p.extension().is_some_and(|x| x == "rs") {
                        mods.entry(name.clone()).or_default().push(p);
                    }
                }
            }
        } else if path.extension().is_some_and(|x| x == "rs") && name != "lib" && name != "main" {
            mods.entry(name).or_default().push(path);
        }
    }
    mods
}

/// The code of a file without its test modules: a `#[cfg(test)]` item and everything after it at the
/// top level (the project keeps unit tests at the end of a file or in a `tests.rs`).
fn production_code(path: &Path) -> String {
    let name = path.file_name().and_then(|s| s.to_str()).unwrap_or("");
    if name == "tests.rs" || name.ends_with("_tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).expect("read a source file");
    match text.find("\n#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The first segment of each path at the start of `rest` (what follows `crate::` or `super::`): of
/// `a::b`, `a`; of a group `{a, b::c}`, `a` and `b`; a glob `*` counted as a name when `glob`.
fn first_segments(rest: &str, glob: bool) -> Vec<&str> {
    if let Some(group) = rest.strip_prefix('{') {
        let end = group.find('}').unwrap_or(group.len());
        group[..end]
            .split(',')
            .map(|p| p.trim().split("::").next().unwrap_or(""))
            .collect()
    } else {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || (glob && c == '*')))
            .unwrap_or(rest.len());
        vec![&rest[..end]]
    }
}

/// Module → the other top-level modules it names through `crate::`.
fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mods = modules(src);
    let mut edges = BTreeMap::new();
    for (name, files) in &mods {
        let mut to = BTreeSet::new();
        for file in files {
            let code = production_code(file);
            let mut rest = code.as_str();
            while let Some(at) = rest.find("crate::") {
                rest = &rest[at + "crate::".len()..];
                // `crate::a::b`, or a group `crate::{a, b::c}`: every first segment counts.
                let names = first_segments(rest, false);
                for n in names {
                    if n != name && mods.contains_key(n) {
                        to.insert(n.to_string());
                    }
                }
            }
        }
        edges.insert(name.clone(), to);
    }
    edges
}

/// A cycle through the graph, if there is one (depth-first search with a path stack).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    fn visit(
        n: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        mark: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        mark.insert(n.to_string(), Mark::OnPath);
        path.push(n.to_string());
        for m in edges.get(n).into_iter().flatten() {
            match mark.get(m.as_str()).copied().unwrap_or(Mark::New) {
                Mark::OnPath => {
                    let start = path.iter().position(|p| p == m).unwrap_or(0);
                    let mut cycle = path[start..].to_vec();
                    cycle.push(m.clone());
                    return Some(cycle);
                }
                Mark::New => {
                    if let Some(c) = visit(m, edges, mark, path) {
                        return Some(c);
                    }
                }
                Mark::Done => {}
            }
        }
        path.pop();
        mark.insert(n.to_string(), Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    for n in edges.keys() {
        if mark.get(n.as_str()).copied().unwrap_or(Mark::New) == Mark::New {
            if let Some(c) = visit(n, edges, &mut mark, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

/// The injector's layers, top down: the front ends (`serve`, with the webhook's review handling in
/// `serve::admission`; `kube_inject`, `explain`, `doctor`, `certs`, `policy`), then `cluster` (the API server
/// connection and what goes through it), then `shared` and `error_report` (what two front ends share,
/// free of the cluster). A module names only modules of a lower layer: no front end another.
const INJECTOR_LAYERS: [&[&str]; 3] = [
    &[
        "certs",
        "doctor",
        "explain",
        "kube_inject",
        "policy",
        "serve",
    ],
    &["cluster"],
    &["error_report", "shared"],
];

/// Every import that does not go down the layers (`layers[0]` on top), as `from → to`. A module in
/// no layer is reported as such, so that a new top-level module is placed on purpose.
fn imports_up_or_across(
    edges: &BTreeMap<String, BTreeSet<String>>,
    layers: &[&[&str]],
) -> Vec<String> {
    let layer = |m: &str| layers.iter().position(|l| l.contains(&m));
    let mut wrong = Vec::new();
    for (from, to) in edges {
        let Some(f) = layer(from) else {
            wrong.push(format!("{from} is in no layer"));
            continue;
        };
        for t in to {
            if layer(t).is_none_or(|t| t <= f) {
                wrong.push(format!("{from} → {t}"));
            }
        }
    }
    wrong
}

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates")
        .join(name)
        .join("src")
}

#[test]
fn no_module_cycles_in_any_crate() {
    for (name, at_least) in [
        ("sidecar-core", 5),
        ("gotemplate", 8),
        ("inject", 20),
        ("injector", 7),
        ("iptables-init", 5),
        ("istio-cni", 3),
    ] {
        let edges = graph(&crate_src(name));
        assert!(
            edges.len() >= at_least,
            "{name}: too few modules found: {edges:?}"
        );
        assert_eq!(
            find_cycle(&edges),
            None,
            "{name}'s module graph: {edges:#?}"
        );
    }
}

#[test]
fn the_injectors_modules_import_only_down_its_layers() {
    let edges = graph(&crate_src("injector"));
    for m in INJECTOR_LAYERS.iter().copied().flatten() {
        assert!(edges.contains_key(*m), "module {m} not found: {edges:?}");
    }
    assert_eq!(
        imports_up_or_across(&edges, &INJECTOR_LAYERS),
        Vec::<String>::new(),
        "module graph: {edges:#?}"
    );
}

#[test]
fn no_module_cycles_in_istio_cni_and_the_plugin_stands_alone() {
    let edges = graph(&crate_src("istio-cni"));
    for m in ["agent", "plugin", "repair"] {
        assert!(edges.contains_key(m), "module {m} not found: {edges:?}");
    }
    // The runtime runs the plugin on every sandbox: it must not pull in the node agent's code.
    assert_eq!(
        edges["plugin"],
        BTreeSet::new(),
        "the plugin imports other modules (module graph: {edges:#?})"
    );
}

/// Every `super::name` in a child module's production code that names no sibling, as
/// `file → name` (the file relative to `src`): a child importing back up from the module that
/// dispatches to it, where a `mod.rs` (or `a.rs` beside `a/`) should keep only its face.
fn imports_back_up(src: &Path) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(src)
        .expect("read the crate's src")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.is_dir() && !p.ends_with("tests"))
        .collect();
    while let Some(dir) = dirs.pop() {
        let entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("read a module directory")
            .filter_map(|e| Some(e.ok()?.path()))
            .collect();
        let siblings: BTreeSet<String> = entries
            .iter()
            .filter_map(|p| Some(p.file_stem()?.to_str()?.to_string()))
            .collect();
        for path in &entries {
            if path.is_dir() {
                // A `tests/` folder holds test modules, which may reach anything they test.
                if !path.ends_with("tests") {
                    dirs.push(path.clone());
                }
                continue;
            }
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == "mod.rs" || !name.ends_with(".rs") {
                continue;
            }
            let code = production_code(path);
            let mut rest = code.as_str();
            while let Some(at) = rest.find("super::") {
                rest = &rest[at + "super::".len()..];
                // `super::super::a` names a sibling of the parent, not the parent's own item.
                if rest.starts_with("super::") {
                    rest = rest.trim_start_matches("super::");
                    continue;
                }
                let names = first_segments(rest, true);
                for n in names {
                    if !n.is_empty() && n != "super" && !siblings.contains(n) {
                        let file = path.strip_prefix(src).unwrap_or(path).display();
                        found.insert(format!("{file} → {n}"));
                    }
                }
            }
        }
    }
    found
}

/// The children that still import from their parent, each for a reason (none left: a parent's types
/// that its children share live in a sibling module of their own). A new one fails the test below; one
/// made good fails it too, so that this list only shrinks.
const IMPORTS_BACK_UP: &[(&str, &[&str])] = &[];

#[test]
fn children_do_not_import_back_up_from_their_parent() {
    for name in [
        "sidecar-core",
        "gotemplate",
        "inject",
        "injector",
        "iptables-init",
        "istio-cni",
    ] {
        let known: BTreeSet<String> = IMPORTS_BACK_UP
            .iter()
            .filter(|(c, _)| *c == name)
            .flat_map(|(_, l)| l.iter().map(|s| s.to_string()))
            .collect();
        assert_eq!(
            imports_back_up(&crate_src(name)),
            known,
            "{name}: children importing from their parent (IMPORTS_BACK_UP lists the known ones)"
        );
    }
}

/// A graph of one edge per module, for the tests of the checks themselves.
fn edges_of(pairs: &[(&str, &str)]) -> BTreeMap<String, BTreeSet<String>> {
    pairs
        .iter()
        .map(|(from, to)| (from.to_string(), BTreeSet::from([to.to_string()])))
        .collect()
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let edges = edges_of(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "a")]);
    let cycle = find_cycle(&edges).expect("a → b → c → a");
    assert_eq!(cycle.first(), cycle.last());
    assert_eq!(cycle.len(), 4);
}

#[test]
fn the_layering_check_finds_imports_up_across_and_unplaced_modules() {
    let edges = edges_of(&[
        ("explain", "doctor"),
        ("doctor", "shared"),
        ("shared", "cluster"),
        ("cluster", "shared"),
        ("engine", "shared"),
    ]);
    let layers: [&[&str]; 3] = [&["doctor", "explain"], &["cluster"], &["shared"]];
    assert_eq!(
        imports_up_or_across(&edges, &layers),
        [
            "engine is in no layer",
            "explain → doctor",
            "shared → cluster"
        ]
    );
}
