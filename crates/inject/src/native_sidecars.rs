//! Native sidecars `auto` decided from the cluster's Nodes, as Istio's `DetectNativeSidecar`
//! (`pkg/kube/inject/webhook.go`) does: the kubelet version of the pod's node when it is set and known,
//! else of every node; native sidecars only when each one checked is at least 1.33 (the release where
//! they graduated to stable). Without a cluster (`serve` from files, `kube-inject`), `auto` is on.

use crate::cow_map::CowMap;

/// Istio's `minVersion`: the Kubernetes minor release from which native sidecars are on.
const MIN_MINOR: i64 = 33;

/// Whether each Node's kubelet supports native sidecars, by name: all the decision reads of a Node
/// (Istio's `StripNodeUnusedFields` keeps more, for its other users). Cheap to clone (a watch changes
/// one Node at a time and shares the rest with the engines of earlier states).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Nodes {
    supported: CowMap<String, bool>,
    /// How many of them do not: a pod without a known node is decided in O(1), not by a walk.
    unsupported: usize,
}

impl Nodes {
    /// Sets Node `name` to its kubelet version (`Some`, empty when it reports none), or removes it
    /// (`None`); whether that changed what it holds. A version that does not parse is logged
    /// here, once per change of the Node.
    pub fn set(&mut self, name: &str, kubelet_version: Option<&str>) -> bool {
        let new = kubelet_version.map(|v| supports(name, v));
        let old = match new {
            Some(s) => self.supported.insert(name.to_string(), s),
            None => self.supported.remove(name),
        };
        self.unsupported =
            self.unsupported + usize::from(new == Some(false)) - usize::from(old == Some(false));
        old != new
    }

    /// The names of every Node held.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.supported.iter().map(|(k, _)| k.as_str())
    }

    /// How many Nodes there are.
    pub fn len(&self) -> usize {
        self.supported.len()
    }

    /// Whether no Nodes are held.
    pub fn is_empty(&self) -> bool {
        self.supported.len() == 0
    }

    /// Istio's `DetectNativeSidecar` for a pod whose `spec.nodeName` is `node_name` ("" when unset).
    pub fn detect(&self, node_name: &str) -> bool {
        if !node_name.is_empty() {
            match self.supported.get(node_name) {
                Some(s) => return *s,
                None => tracing::warn!(
                    node = node_name,
                    "pod assigned to a node not found in the cluster; checking all nodes"
                ),
            }
        }
        // Any older node turns the feature off, so a mixed cluster never gets a pod its node cannot run.
        self.unsupported == 0
    }
}

/// Istio's `checkNodeVersion`: the version's second segment (go-version's `Segments()[1]`) ≥ 33; a
/// version that does not parse is unsupported.
fn supports(node: &str, version: &str) -> bool {
    match minor(version) {
        Some(m) => m >= MIN_MINOR,
        None => {
            tracing::warn!(node, version, "could not read the node's kubelet version");
            false
        }
    }
}

/// The minor segment as hashicorp/go-version's `NewVersion` reads it: an optional `v`, dot-separated
/// decimal segments (missing ones are 0), then nothing, a pre-release (`-rc.1`, or letters right after
/// the numbers) or build metadata (`+…`); anything else does not parse.
fn minor(version: &str) -> Option<i64> {
    let v = version.strip_prefix('v').unwrap_or(version);
    let end = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (numbers, rest) = v.split_at(end);
    let segments: Vec<&str> = numbers.split('.').collect();
    if segments.iter().any(|s| s.is_empty()) {
        return None;
    }
    let suffix_ok = match rest.chars().next() {
        None => true,
        Some(c) => {
            (c == '-' || c == '+' || c == '~' || c.is_ascii_alphabetic())
                && rest.len() > 1
                && rest[1..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-~.+".contains(c))
        }
    };
    if !suffix_ok {
        return None;
    }
    let mut parsed = segments.iter().map(|s| s.parse::<i64>().ok());
    let _major = parsed.next()??;
    match parsed.next() {
        Some(m) => m,
        None => Some(0),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_go_version_reads_them() {
        for (v, m) in [
            ("v1.33.0", Some(33)),
            ("1.32.4", Some(32)),
            ("v1.34.1-gke.1200", Some(34)),
            ("v1.33.2+k3s1", Some(33)),
            ("v1.33.0-rc.1", Some(33)),
            ("1", Some(0)),
            ("", None),
            ("v", None),
            ("1..33", None),
            ("banana", None),
            ("1.33 ", None),
        ] {
            assert_eq!(minor(v), m, "{v:?}");
        }
    }

    fn nodes(pairs: &[(&str, &str)]) -> Nodes {
        let mut n = Nodes::default();
        for (name, v) in pairs {
            n.set(name, Some(v));
        }
        n
    }

    #[test]
    fn the_pods_node_decides_else_every_node() {
        let mixed = nodes(&[("old", "v1.32.0"), ("new", "v1.33.0")]);
        assert!(mixed.detect("new"));
        assert!(!mixed.detect("old"));
        assert!(!mixed.detect(""));
        // A node the cluster does not know: all nodes decide.
        assert!(!mixed.detect("gone"));
        let new = nodes(&[("a", "v1.33.0"), ("b", "v1.35.1")]);
        assert!(new.detect(""));
        assert!(new.detect("gone"));
        assert!(!nodes(&[("a", "v1.33.0"), ("b", "")]).detect(""));
        // No node at all: nothing disagrees (Istio's loop over an empty list).
        assert!(Nodes::default().detect(""));
    }

    #[test]
    fn changes_keep_the_count_of_older_nodes() {
        let mut n = nodes(&[("a", "v1.32.0"), ("b", "v1.33.0")]);
        assert!(!n.detect(""));
        assert!(!n.set("b", Some("v1.33.1")), "the same decision: no change");
        assert!(n.set("a", Some("v1.33.0")), "upgraded");
        assert!(n.detect(""));
        assert!(n.set("c", Some("")));
        assert!(!n.detect(""));
        assert!(n.set("c", None));
        assert!(!n.set("c", None));
        assert!(n.detect(""));
        assert_eq!(n, nodes(&[("a", "v1.34.0"), ("b", "v1.33.0")]));
        assert_eq!(n.len(), 2);
    }
}
