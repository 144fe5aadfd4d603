//! A snapshot of the host's state that a cluster with nodes (`scripts/cluster.sh up DIR --nodes N`) could
//! change, and the differences between two snapshots that a cluster left behind.
//!
//! The machine is shared (other tests of this binary, other engineers' test runs, their own containerd),
//! so a difference counts as the cluster's when it carries one of the cluster's marks ([`Marks`]: its
//! folders, its slot's names `sik<K>…`, its nodes' namespaces) or is of a kind only a node makes:
//!
//! - a mount over a folder a node has its own of (`/etc`, `/opt`, `/run`, `/var/lib`, `/var/log`, `/sys`) or at
//!   or below a node's standard paths (`/etc/cni`, `/opt/cni`, `/var/lib/kubelet`,
//!   `/var/lib/containerd`, `/run/containerd`, `/var/log/pods`, `/proc/sys`) or a pod's network namespace
//!   (`/run/netns/cni-<uuid>`, containerd's names), also as named network namespaces;
//! - the bridge plugin's `cni0` and the veths on it (a node whose CNI ran in the host's namespace);
//! - a `kubepods` or `k8s.io` cgroup outside another cluster's node roots;
//! - any change of the host's netfilter rules or sysctls (the other tests program netfilter in
//!   namespaces of their own).
//!
//! Other tests' namespaces (`ip netns add`, `<prefix>-<pid>-<n>`), their links in the host's namespace
//! (`vh<pid>x<n>` of [`crate::netns::HostLink`], the CNI tests' bridges and veths) and a standalone
//! containerd's mounts and cgroups are not the cluster's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result};

/// One process: what identifies it as a cluster's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proc {
    pub comm: String,
    pub cmdline: String,
    pub cgroup: String,
    pub netns: String,
    pub mntns: String,
}

/// The host's state, as `ps`, `/proc/self/mountinfo`, `ip -o link`, `ip netns list`, the cgroup folders,
/// `iptables-save`, `ip6tables-save`, `nft list ruleset` and `/proc/sys` show it.
#[derive(Debug, Clone)]
pub struct HostState {
    pub processes: BTreeMap<u32, Proc>,
    /// mountinfo lines without the mount and parent ids: mount point, root, options, type, source.
    pub mounts: BTreeSet<String>,
    /// `ip -o link` lines by link name.
    pub links: BTreeMap<String, String>,
    pub netns: BTreeSet<String>,
    /// Every cgroup folder, as `<hierarchy mount point>:<path>`.
    pub cgroups: BTreeSet<String>,
    /// The three dumps with comments and packet counters taken out.
    pub netfilter: String,
    /// Every readable sysctl but the ones that change on their own and the per-link ones.
    pub sysctls: BTreeMap<String, String>,
}

/// What marks a process, mount or cgroup as a cluster's.
#[derive(Debug, Clone, Default)]
pub struct Marks {
    /// The clusters' folders (DIR).
    pub dirs: Vec<PathBuf>,
    /// The clusters' slots (bridge `sik<K>`, veths `sik<K>n<i>`, cgroup roots `/sik<K>-node<i>`).
    pub slots: Vec<u32>,
    /// The nodes' network and mount namespaces (`net:[…]`, `mnt:[…]`).
    pub namespaces: BTreeSet<String>,
}

impl Marks {
    /// Adds a cluster's marks from its `DIR/env` variables, while it runs.
    pub fn add_cluster(&mut self, dir: &Path, env: &BTreeMap<String, String>) -> Result<()> {
        self.dirs.push(dir.to_path_buf());
        let bridge = env.get("BRIDGE").context("BRIDGE missing in env")?;
        self.slots.push(
            bridge
                .strip_prefix("sik")
                .and_then(|k| k.parse().ok())
                .with_context(|| format!("BRIDGE={bridge}"))?,
        );
        let nodes: usize = env.get("NODES").context("NODES")?.parse()?;
        for i in 1..=nodes {
            let pid = env
                .get(&format!("NODE{i}_PID"))
                .with_context(|| format!("NODE{i}_PID"))?;
            for ns in ["net", "mnt"] {
                let link = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
                    .with_context(|| format!("node{i}'s {ns} namespace"))?;
                self.namespaces.insert(link.to_string_lossy().into_owned());
            }
        }
        Ok(())
    }

    fn process(&self, p: &Proc) -> bool {
        self.dirs
            .iter()
            .any(|d| p.cmdline.contains(&*d.to_string_lossy()))
            || self.namespaces.contains(&p.netns)
            || self.namespaces.contains(&p.mntns)
            || self
                .slots
                .iter()
                .any(|k| p.cgroup.contains(&format!("/sik{k}-node")))
    }

    fn text(&self, s: &str) -> bool {
        self.dirs.iter().any(|d| s.contains(&*d.to_string_lossy()))
            || self.slots.iter().any(|k| s.contains(&format!("sik{k}")))
    }
}

impl HostState {
    /// Takes a snapshot; fails when a tool it reads with fails.
    pub fn take() -> Result<HostState> {
        Ok(HostState {
            processes: processes(),
            mounts: mounts()?,
            links: output("ip", &["-o", "link"])?
                .lines()
                .filter_map(|l| {
                    let name = l.split(": ").nth(1)?;
                    let name = name.split('@').next().unwrap_or(name);
                    Some((name.to_string(), l.to_string()))
                })
                .collect(),
            netns: output("ip", &["netns", "list"])?
                .lines()
                .filter_map(|l| l.split_whitespace().next())
                .map(str::to_string)
                .collect(),
            cgroups: cgroups()?,
            netfilter: netfilter()?,
            sysctls: sysctls(),
        })
    }

    /// What `after` holds of a cluster (marked by `marks`) that `self`, taken before it started, did not:
    /// one line per difference, empty when the host is as it was.
    pub fn left_behind(&self, after: &HostState, marks: &Marks) -> Vec<String> {
        let mut found = Vec::new();
        for (pid, p) in &after.processes {
            if self.processes.get(pid) != Some(p) && marks.process(p) {
                found.push(format!("process {pid} ({}): {}", p.comm, p.cmdline));
            }
        }
        for m in after.mounts.difference(&self.mounts) {
            let point = m.split(' ').next().unwrap_or_default();
            let node_path = NODE_ROOTS.contains(&point)
                || NODE_PATHS
                    .iter()
                    .any(|p| point == *p || point.starts_with(&format!("{p}/")));
            let pod_netns = point
                .strip_prefix("/run/netns/")
                .is_some_and(is_containerd_netns);
            if node_path || pod_netns || marks.text(m) {
                found.push(format!("mount {m}"));
            }
        }
        for (name, line) in &after.links {
            if self.links.contains_key(name) {
                continue;
            }
            let pod_network = name == "cni0" || line.contains(" master cni0 ");
            if marks.text(name) || pod_network || line.contains(" master sik") {
                found.push(format!("link {name}: {line}"));
            }
        }
        for n in after.netns.difference(&self.netns) {
            if is_containerd_netns(n) || marks.text(n) {
                found.push(format!("network namespace {n}"));
            }
        }
        for c in after.cgroups.difference(&self.cgroups) {
            // The cgroup root of a node: this cluster's, or another's running meanwhile.
            let node_root = c
                .split_once(":/sik")
                .and_then(|(_, rest)| rest.split_once("-node"))
                .and_then(|(k, _)| k.parse::<u32>().ok());
            let ours = match node_root {
                Some(k) => marks.slots.contains(&k),
                None => c.contains("kubepods") || c.contains(":/k8s.io"),
            };
            if ours {
                found.push(format!("cgroup {c}"));
            }
        }
        if after.netfilter != self.netfilter {
            found.push(format!(
                "netfilter changed:\n--- before\n{}\n--- after\n{}",
                self.netfilter, after.netfilter
            ));
        }
        let keys: BTreeSet<&String> = self.sysctls.keys().chain(after.sysctls.keys()).collect();
        for k in keys {
            let (b, a) = (self.sysctls.get(k), after.sysctls.get(k));
            if b != a {
                found.push(format!("sysctl {k}: {b:?} -> {a:?}"));
            }
        }
        found
    }
}

/// The folders a node mounts its own over, in its mount namespace, and below which its components
/// mount: on the host, a mount at one of them (or below, for the first ones) is a node's that escaped.
const NODE_PATHS: &[&str] = &[
    "/etc/cni",
    "/opt/cni",
    "/var/lib/kubelet",
    "/var/lib/containerd",
    "/run/containerd",
    "/var/log/pods",
    "/proc/sys",
];
const NODE_ROOTS: &[&str] = &["/etc", "/opt", "/run", "/var/lib", "/var/log", "/sys"];

/// containerd's name for a pod's network namespace: `cni-` and a UUID (8-4-4-4-12 hex digits).
fn is_containerd_netns(name: &str) -> bool {
    name.strip_prefix("cni-").is_some_and(|uuid| {
        let groups: Vec<&str> = uuid.split('-').collect();
        groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
            && groups
                .iter()
                .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()))
    })
}

fn output(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    crate::cluster::stdout_of_success(program, args, out)
}

fn processes() -> BTreeMap<u32, Proc> {
    let mut all = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return all;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let read =
            |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).unwrap_or_default();
        let link = |f: &str| {
            std::fs::read_link(format!("/proc/{pid}/{f}"))
                .map(|l| l.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        // A process that ended while being read is left out.
        let stat = read("stat");
        if stat.is_empty()
            || stat
                .rsplit_once(") ")
                .is_some_and(|(_, r)| r.starts_with('Z'))
        {
            continue;
        }
        all.insert(
            pid,
            Proc {
                comm: read("comm").trim().to_string(),
                cmdline: read("cmdline").replace('\0', " ").trim().to_string(),
                cgroup: read("cgroup"),
                netns: link("ns/net"),
                mntns: link("ns/mnt"),
            },
        );
    }
    all
}

fn mounts() -> Result<BTreeSet<String>> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").context("mountinfo")?;
    // "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw": without the ids and the
    // device number, the mount point first.
    Ok(text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let rest = f.get(5..).map(|r| r.join(" ")).unwrap_or_default();
            format!(
                "{} root={} {}",
                f.get(4).unwrap_or(&""),
                f.get(3).unwrap_or(&""),
                rest
            )
        })
        .collect())
}

fn cgroups() -> Result<BTreeSet<String>> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").context("mounts")?;
    let mut all = BTreeSet::new();
    for l in mounts.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() < 3 || !(f[2] == "cgroup" || f[2] == "cgroup2") {
            continue;
        }
        let root = PathBuf::from(f[1]);
        let mut stack = vec![root.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let p = e.path();
                    let rel = p.strip_prefix(&root).unwrap_or(&p).to_string_lossy();
                    all.insert(format!("{}:/{rel}", root.display()));
                    stack.push(p);
                }
            }
        }
    }
    Ok(all)
}

fn netfilter() -> Result<String> {
    let mut all = String::new();
    for (program, args) in [
        ("iptables-save", &[][..]),
        ("ip6tables-save", &[][..]),
        ("nft", &["list", "ruleset"][..]),
    ] {
        all.push_str(&format!("# {program}\n"));
        for l in output(program, args)?.lines() {
            if l.starts_with('#') {
                continue;
            }
            // ":INPUT ACCEPT [12:3456]": the chain's packet and byte counters change with traffic.
            let l = match l.rfind(" [") {
                Some(i) if l.starts_with(':') => &l[..i],
                _ => l,
            };
            all.push_str(l);
            all.push('\n');
        }
    }
    Ok(all)
}

/// The sysctls that change on their own (counters, random values), or with the load.
const VOLATILE: &[&str] = &[
    "fs/dentry-state",
    "fs/file-nr",
    "fs/inode-nr",
    "fs/inode-state",
    "fs/aio-nr",
    "fs/quota/",
    "kernel/ns_last_pid",
    "kernel/pty/nr",
    "kernel/random/",
    "kernel/perf_event_max_sample_rate",
    "net/netfilter/nf_conntrack_count",
];

fn sysctls() -> BTreeMap<String, String> {
    let mut all = BTreeMap::new();
    let root = Path::new("/proc/sys");
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let key = p
                .strip_prefix(root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            if VOLATILE.iter().any(|v| key.starts_with(v)) || per_link(&key) {
                continue;
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(p);
            } else if let Ok(v) = std::fs::read_to_string(&p) {
                all.insert(key, v.trim().to_string());
            }
        }
    }
    all
}

/// `net/ipv4/conf/<link>/…` and the like: they come and go with links, which the link check covers.
fn per_link(key: &str) -> bool {
    let parts: Vec<&str> = key.split('/').collect();
    matches!(
        parts.as_slice(),
        ["net", "ipv4" | "ipv6" | "mpls", "conf" | "neigh", name, ..] if *name != "all" && *name != "default"
    )
}
