//! The caBundle of our own MutatingWebhookConfigurations kept trusting our serving CA (`serve
//! --kubeconfig` / `--in-cluster` with `--ca-bundle`), as Istio's `pkg/webhooks/webhookpatch.go`
//! `WebhookCertPatcher` does. Every configuration labelled with our revision (`istio.io/rev`) is looked
//! at on start, whenever the CA file changes, and whenever the configuration changes (someone wrote
//! another caBundle). Each entry whose name ends with Istio's webhook name (`sidecar-injector.istio.io`)
//! gets the CA. Another revision's configuration is never read (the watch selects our label) nor written
//! (the label is checked again before each patch).
//!
//! Unlike Istio's patcher, replicas holding different CAs do not overwrite each other. Istio's replicas
//! set the bundle to their own CA, so during a CA rotation two of them overwrite each other for as long
//! as both run, and each overwrite fails every call to the other. Here each replica makes sure that its
//! own CA is *in* the bundle, and keeps the CAs that other live replicas name in their liveness records
//! (`records`). Only CAs that no live replica names are pruned. During a rolling update that changes the CA, the bundle therefore
//! holds both CAs while both replicas serve, so the API server verifies whichever replica it calls.
//! After the old replica is gone, the bundle holds only the new CA:
//! - On a graceful shutdown, the old replica removes its record and its CA once its listener is closed.
//! - After a crash, its record expires [`records::TTL`] after it last changed, and the survivors prune
//!   it.
//!
//! So an old CA stays trusted only while a replica serves with it, or for at most `TTL` after that
//! replica died, never for good. A single replica ends with exactly its own CA file, as with Istio.
//! Every write goes through the rate-limited [`WriteQueue`], and the set is written in one canonical
//! form (`bundle`), so replicas that agree on it write the same bytes: after one write per replica the
//! configuration is settled.

mod bundle;
mod records;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::ByteString;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Resource, ResourceExt};
use serde_json::{json, Value};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::cluster::write_queue::{WriteError, WriteQueue, LIMITS, WRITE_TIMEOUT};
use crate::shared::metrics::Metrics;
use crate::shared::webhook_config::ENTRY_SUFFIX;
pub use bundle::OwnCaError;
use bundle::{Cert, OwnCa};
use records::{Record, Seen};

/// The revision label of the configurations (Istio's `label.IoIstioRev`).
const REV_LABEL: &str = "istio.io/rev";
/// The `resource` label of the watch's errors.
const RESOURCE: &str = "mutatingwebhookconfigurations";

/// The label value of `--revision` (empty means the default revision, labelled `default`).
pub fn revision_label(revision: &str) -> &str {
    if revision.is_empty() {
        "default"
    } else {
        revision
    }
}

/// Whether this replica serves (keeps its CA and record in) or is leaving (removes them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Serve,
    Release,
}

/// This replica: its record's key, its identity and its CA.
#[derive(Debug)]
struct Me<'a> {
    key: &'a str,
    replica: &'a str,
    ca: &'a OwnCa,
}

/// What one look at a configuration decided.
#[derive(Debug, PartialEq)]
enum Plan {
    /// Not ours (another revision, or no label): left alone (Istio's `errWrongRevision`).
    NotOurs,
    /// No entry with our webhook name (Istio's `errNoWebhookWithName`): nothing to patch, no retry.
    NoEntry,
    /// Nothing to write.
    Settled,
    /// The JSON patch to write, guarded by the resourceVersion it was computed from.
    Patch(Value),
}

/// A look at one configuration: the plan, whether our CA is in every entry of ours (readiness), and when
/// to look again without an event (our record's renewal, another record's expiry).
#[derive(Debug)]
struct Look {
    plan: Plan,
    ready: bool,
    next: Option<Instant>,
}

/// A JSON pointer token (RFC 6901).
fn pointer_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Decides what `config` needs from replica `me` at `now` (Unix seconds `wall`), having seen its records'
/// history in `seen`. Istio's `patchMutatingWebhookConfig`, with the CA added instead of set:
/// - Serve: each entry of ours holds our CA plus the certificates in it that another live record names.
///   Our record is written or renewed.
/// - Release: our record is removed. If another replica is live, the certificates that no live record
///   names (ours, unless another replica shares it) leave the entries. A bundle is never emptied.
///
/// Records that are expired, do not parse, or are past [`records::MAX_RECORDS`] are removed.
fn look(
    config: &MutatingWebhookConfiguration,
    revision: &str,
    me: &Me,
    seen: &Seen,
    mode: Mode,
    now: Instant,
    wall: u64,
) -> Look {
    let idle = |plan| Look {
        plan,
        ready: true,
        next: None,
    };
    if config.labels().get(REV_LABEL).map(String::as_str) != Some(revision) {
        return idle(Plan::NotOurs);
    }
    let entries: Vec<(usize, &_)> = config
        .webhooks
        .iter()
        .flatten()
        .enumerate()
        .filter(|(_, wh)| wh.name.ends_with(ENTRY_SUFFIX))
        .collect();
    if entries.is_empty() {
        return idle(Plan::NoEntry);
    }
    let mut next: Option<Instant> = None;
    let mut soonest = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));

    // The other replicas' records: the fingerprints the live ones name, and the keys to remove.
    let annotations = config.metadata.annotations.as_ref();
    let mut live: BTreeSet<String> = BTreeSet::new();
    let mut stale: Vec<&str> = Vec::new();
    let mut ours: Option<&str> = None;
    let mut others = 0;
    for (key, value) in records::records(annotations) {
        if key == me.key {
            ours = Some(value);
            continue;
        }
        // Room for ours among the records read.
        let record = (others < records::MAX_RECORDS - 1)
            .then(|| Record::parse(value))
            .flatten();
        others += 1;
        let until = seen.live_until(key, value, now);
        match record {
            Some(r) if until > now => {
                live.extend(r.ca);
                soonest(until);
            }
            _ => stale.push(key),
        }
    }

    // The resourceVersion makes a concurrent writer's change a 409 Conflict, retried on the newer
    // object (Istio's Update has the same optimistic check).
    let mut ops = vec![json!({
        "op": "add",
        "path": "/metadata/resourceVersion",
        "value": config.resource_version(),
    })];
    let mut ready = true;
    for (i, wh) in entries {
        let current: &[u8] = wh
            .client_config
            .ca_bundle
            .as_ref()
            .map_or(&[], |b| b.0.as_slice());
        let certs = bundle::read(current);
        ready &= me
            .ca
            .certs
            .iter()
            .all(|o| certs.iter().any(|c| c.fingerprint == o.fingerprint));
        let want = match mode {
            Mode::Serve => {
                let others: Vec<&Cert> = certs
                    .iter()
                    .filter(|c| live.contains(&c.fingerprint) && !me.ca.has(&c.fingerprint))
                    .collect();
                Some(me.ca.with(&others)).filter(|w| w.as_slice() != current)
            }
            Mode::Release => {
                let keep: Vec<&Cert> = certs
                    .iter()
                    .filter(|c| live.contains(&c.fingerprint))
                    .collect();
                (!keep.is_empty() && keep.len() != certs.len()).then(|| bundle::canonical(keep))
            }
        };
        if let Some(want) = want {
            ops.push(json!({
                "op": "add",
                "path": format!("/webhooks/{i}/clientConfig/caBundle"),
                "value": ByteString(want),
            }));
        }
    }

    let path = |key: &str| format!("/metadata/annotations/{}", pointer_token(key));
    for key in stale {
        ops.push(json!({"op": "remove", "path": path(key)}));
    }
    match mode {
        Mode::Serve => {
            let fingerprints = me.ca.fingerprints();
            let renewal = ours
                .and_then(Record::parse)
                .filter(|r| r.replica == me.replica && r.ca == fingerprints)
                .and_then(|r| records::renewal_due(r.renewed, wall, now));
            match renewal {
                Some(at) => soonest(at),
                None => {
                    let value = Record {
                        replica: me.replica.to_string(),
                        ca: fingerprints,
                        renewed: wall,
                    }
                    .value();
                    ops.push(match annotations {
                        Some(_) => json!({"op": "add", "path": path(me.key), "value": value}),
                        None => json!({
                            "op": "add",
                            "path": "/metadata/annotations",
                            "value": {me.key: value},
                        }),
                    });
                }
            }
        }
        Mode::Release => {
            if ours.is_some() {
                ops.push(json!({"op": "remove", "path": path(me.key)}));
            }
        }
    }
    Look {
        plan: if ops.len() > 1 {
            Plan::Patch(Value::Array(ops))
        } else {
            Plan::Settled
        },
        ready,
        next: if mode == Mode::Serve { next } else { None },
    }
}

/// The running patcher, as `serve` holds it: readiness, and the release on shutdown.
#[derive(Debug, Clone)]
pub struct Patcher {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Every watch listed once and every configuration of ours carries our CA.
    ready: AtomicBool,
    /// Asks the task to release (remove our record and CA).
    release: Notify,
    /// Set by the task once every configuration is released.
    released: watch::Sender<bool>,
}

impl Patcher {
    /// Whether the API server trusts our serving CA in every configuration of ours: until then a call
    /// routed to this replica would fail, so `/readyz` fails too.
    pub fn ready(&self) -> bool {
        self.shared.ready.load(Ordering::SeqCst)
    }

    /// On shutdown, once no new connection is accepted: removes our record and, when another replica is
    /// live, our CA (unless it shares it), within `deadline`. Returns whether every configuration was
    /// released. Whatever is left behind expires with our record.
    pub async fn release(&self, deadline: Duration) -> bool {
        let mut released = self.shared.released.subscribe();
        self.shared.release.notify_one();
        tokio::time::timeout(deadline, released.wait_for(|r| *r))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Starts the patcher on the current tokio runtime: configurations labelled `istio.io/rev=<revision>`
/// (the label value, see [`revision_label`]) get the CA `ca` holds, now and after each change of either.
/// With `names` (`--webhook-config-names`), only those configurations are watched, each by a
/// `metadata.name` field selector, which RBAC that grants list/watch by `resourceNames` allows; without,
/// one watch selects the label across the cluster. Fails when the CA is not a bundle we may write.
pub fn start(
    client: kube::Client,
    revision: String,
    names: Vec<String>,
    ca: watch::Receiver<Arc<Vec<u8>>>,
    metrics: Arc<Metrics>,
) -> Result<Patcher, OwnCaError> {
    let own = OwnCa::new(&ca.borrow())?;
    let shared = Arc::new(Shared {
        ready: AtomicBool::new(false),
        release: Notify::new(),
        released: watch::channel(false).0,
    });
    let replica = records::replica_id();
    let task = Task {
        key: records::key_of(&replica),
        replica,
        own,
        watches: names.len().max(1),
        listed: BTreeSet::new(),
        configs: BTreeMap::new(),
        seen: BTreeMap::new(),
        ready: BTreeMap::new(),
        queue: WriteQueue::new(LIMITS, Instant::now()),
        mode: Mode::Serve,
        unreleased: BTreeSet::new(),
        client,
        revision,
        metrics,
        shared: shared.clone(),
    };
    tracing::info!(
        replica = task.replica,
        record = task.key,
        "keeping our CA in the webhook configurations' caBundle"
    );
    tokio::spawn(task.run(names, ca));
    Ok(Patcher { shared })
}

/// `--webhook-config-names`, taken by `serve`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct WebhookConfigNamesArgs {
    /// The MutatingWebhookConfigurations whose caBundle `serve --kubeconfig` / `--in-cluster` keeps
    /// (comma-separated), watched by name so that the service account needs list/watch/patch on those
    /// names only (the chart's RBAC); they must still carry our revision label. Without it, every
    /// configuration labelled with our revision.
    #[arg(
        long = "webhook-config-names",
        value_name = "NAME,...",
        value_delimiter = ','
    )]
    pub webhook_config_names: Vec<String>,
}

/// One watch's events, tagged with the watch's index.
type Tagged = futures::stream::BoxStream<
    'static,
    (
        usize,
        Result<Event<MutatingWebhookConfiguration>, watcher::Error>,
    ),
>;

/// The watches of [`start`]: one per name, or one for the label; each event tagged with its watch's
/// index in `names` (0 for the label's).
fn watches(
    client: &kube::Client,
    selector: &str,
    names: &[String],
) -> futures::stream::SelectAll<Tagged> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let configs: Vec<watcher::Config> = if names.is_empty() {
        vec![watcher::Config::default().labels(selector)]
    } else {
        names
            .iter()
            .map(|n| {
                watcher::Config::default()
                    .labels(selector)
                    .fields(&format!("metadata.name={n}"))
            })
            .collect()
    };
    futures::stream::select_all(configs.into_iter().enumerate().map(|(i, config)| {
        watcher::watcher(api.clone(), config)
            .default_backoff()
            .map(move |e| (i, e))
            .boxed()
    }))
}

/// The patcher's state, owned by its task.
struct Task {
    client: kube::Client,
    revision: String,
    metrics: Arc<Metrics>,
    shared: Arc<Shared>,
    /// Our record's annotation key and our identity.
    key: String,
    replica: String,
    own: OwnCa,
    /// How many watches there are, and which have listed once.
    watches: usize,
    listed: BTreeSet<usize>,
    configs: BTreeMap<String, MutatingWebhookConfiguration>,
    /// Per configuration, the history of its records.
    seen: BTreeMap<String, Seen>,
    /// Per configuration, whether our CA is in every entry of ours.
    ready: BTreeMap<String, bool>,
    queue: WriteQueue<String>,
    mode: Mode,
    /// On release, the configurations not yet released.
    unreleased: BTreeSet<String>,
}

impl Task {
    async fn run(mut self, names: Vec<String>, mut ca: watch::Receiver<Arc<Vec<u8>>>) {
        let selector = format!("{REV_LABEL}={}", self.revision);
        let mut stream = watches(&self.client, &selector, &names);
        // Whether watch `i` lists `name`: a relist replaces just what its own watch can see.
        let owns = |i: usize, name: &str| names.get(i).is_none_or(|n| n == name);
        let mut relisting: BTreeMap<usize, BTreeMap<String, MutatingWebhookConfiguration>> =
            BTreeMap::new();
        let shared = self.shared.clone();
        loop {
            let next = self.queue.next_due();
            tokio::select! {
                event = stream.next() => match event {
                    None => return,
                    Some((_, Err(e))) => {
                        self.metrics.cluster_watch_error(RESOURCE);
                        tracing::warn!(resource = RESOURCE, error = %e, "webhook configuration watch failed; retrying with backoff");
                    }
                    Some((i, Ok(Event::Init))) => {
                        relisting.insert(i, BTreeMap::new());
                    }
                    Some((i, Ok(Event::InitApply(c)))) => {
                        if let Some(set) = relisting.get_mut(&i) {
                            set.insert(c.name_any(), c);
                        }
                    }
                    Some((i, Ok(Event::InitDone))) => {
                        // What the relist no longer holds is gone; what it holds keeps its records'
                        // history, so that a relist does not make a dead replica's record live again.
                        let listed = relisting.remove(&i).unwrap_or_default();
                        let gone: Vec<String> = self
                            .configs
                            .keys()
                            .filter(|n| owns(i, n) && !listed.contains_key(*n))
                            .cloned()
                            .collect();
                        for name in gone {
                            self.remove(&name);
                        }
                        let now = Instant::now();
                        for (_, c) in listed {
                            self.apply(c, now);
                        }
                        self.listed.insert(i);
                    }
                    Some((_, Ok(Event::Apply(c)))) => self.apply(c, Instant::now()),
                    Some((_, Ok(Event::Delete(c)))) => self.remove(&c.name_any()),
                },
                changed = ca.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    let pem = ca.borrow_and_update().clone();
                    match OwnCa::new(&pem) {
                        Ok(own) => {
                            tracing::info!("serving CA changed; patching the webhook configurations");
                            self.own = own;
                            self.look_at_all(Instant::now());
                        }
                        Err(e) => tracing::error!(error = %e, "the changed --ca-bundle is not written; keeping the previous CA"),
                    }
                }
                _ = shared.release.notified(), if self.mode == Mode::Serve => {
                    self.mode = Mode::Release;
                    self.unreleased = self.configs.keys().cloned().collect();
                    self.look_at_all(Instant::now());
                }
                _ = sleep_until(next) => {}
            }
            self.look_at_due().await;
            let ready = self.listed.len() == self.watches && self.ready.values().all(|r| *r);
            self.shared.ready.store(ready, Ordering::SeqCst);
            if self.mode == Mode::Release && self.unreleased.is_empty() {
                self.shared.released.send_replace(true);
            }
        }
    }

    /// A configuration as listed or changed: a look at it now, whatever backoff it has (the write it
    /// decides on still waits for its backoff).
    fn apply(&mut self, config: MutatingWebhookConfiguration, now: Instant) {
        let name = config.name_any();
        self.seen
            .entry(name.clone())
            .or_default()
            .observe(config.metadata.annotations.as_ref(), now);
        self.configs.insert(name.clone(), config);
        self.queue.schedule(name, now);
    }

    fn remove(&mut self, name: &str) {
        self.configs.remove(name);
        self.seen.remove(name);
        self.ready.remove(name);
        self.unreleased.remove(name);
        self.queue.forget(&name.to_string());
    }

    fn look_at_all(&mut self, now: Instant) {
        for name in self.configs.keys() {
            self.queue.schedule(name.clone(), now);
        }
    }

    /// Looks at every configuration due, and writes what they need as far as the queue allows.
    async fn look_at_due(&mut self) {
        for name in self.queue.take_due(Instant::now()) {
            let Some(config) = self.configs.get(&name) else {
                self.queue.forget(&name);
                continue;
            };
            let now = Instant::now();
            let me = Me {
                key: &self.key,
                replica: &self.replica,
                ca: &self.own,
            };
            let seen = self.seen.get(&name);
            let look = look(
                config,
                &self.revision,
                &me,
                seen.unwrap_or(&Seen::default()),
                self.mode,
                now,
                records::unix_now(),
            );
            self.ready.insert(name.clone(), look.ready);
            if let Some(at) = look.next {
                self.queue.schedule(name.clone(), at);
            }
            let ops = match look.plan {
                Plan::Patch(ops) => ops,
                Plan::NotOurs | Plan::NoEntry | Plan::Settled => {
                    self.queue.settled(&name);
                    self.unreleased.remove(&name);
                    continue;
                }
            };
            if self.queue.permit(&name, now).is_err() {
                // Queued again for when its backoff or the overall rate allows.
                continue;
            }
            self.metrics.webhook_patch_attempts.inc();
            let result = patch(&self.client, &name, &ops).await;
            let backoff = self.queue.wrote(&name, result.is_ok(), Instant::now());
            match result {
                Ok(()) => {
                    self.unreleased.remove(&name);
                    tracing::info!(
                        webhook_config = name,
                        release = self.mode == Mode::Release,
                        "caBundle patched"
                    );
                }
                Err(e) => {
                    self.metrics.webhook_patch_failures.inc();
                    if e.is_conflict() {
                        self.metrics.webhook_patch_conflicts.inc();
                    }
                    tracing::warn!(
                        webhook_config = name,
                        conflict = e.is_conflict(),
                        retry_in_ms = backoff.as_millis() as u64,
                        error = %e,
                        "patching the caBundle failed; retrying with backoff"
                    );
                }
            }
        }
    }
}

/// Sleeps until `at`, forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Sends one JSON patch to configuration `name`, bounded by [`WRITE_TIMEOUT`].
async fn patch(client: &kube::Client, name: &str, ops: &Value) -> Result<(), WriteError> {
    let url = format!(
        "{}/{name}",
        MutatingWebhookConfiguration::url_path(&(), None)
    );
    let request = hyper::Request::patch(url)
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(ops).map_err(WriteError::Encode)?)
        .map_err(WriteError::Request)?;
    tokio::time::timeout(
        WRITE_TIMEOUT,
        client.request::<MutatingWebhookConfiguration>(request),
    )
    .await
    .map_err(|_| WriteError::Timeout)?
    .map_err(WriteError::Api)?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::bundle::tests::ca_pem;
    use super::*;

    const SUFFIX_A: &str = "a.namespace.sidecar-injector.istio.io";
    const SUFFIX_B: &str = "b.object.sidecar-injector.istio.io";

    fn config_json(rev: Option<&str>, entries: &[(&str, Option<&[u8]>)]) -> Value {
        let labels = rev.map(|r| json!({REV_LABEL: r})).unwrap_or(json!({}));
        let webhooks: Vec<Value> = entries
            .iter()
            .map(|(name, ca)| {
                let mut cc = json!({"url": "https://x/inject"});
                if let Some(ca) = ca {
                    cc["caBundle"] = serde_json::to_value(ByteString(ca.to_vec())).unwrap();
                }
                json!({"name": name, "clientConfig": cc, "sideEffects": "None",
                       "admissionReviewVersions": ["v1"]})
            })
            .collect();
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "c", "resourceVersion": "7", "labels": labels},
            "webhooks": webhooks,
        })
    }

    /// A replica as its task sees the world: its record key, identity, CA and what it has seen.
    struct Replica {
        key: String,
        replica: String,
        ca: OwnCa,
        seen: Seen,
    }

    impl Replica {
        fn new(name: &str, pem: &[u8]) -> Replica {
            Replica {
                key: records::key_of(name),
                replica: name.to_string(),
                ca: OwnCa::new(pem).unwrap(),
                seen: Seen::default(),
            }
        }

        /// Observes the stored configuration at `now` and looks at it.
        fn look(&mut self, server: &Server, mode: Mode, now: Instant, wall: u64) -> Look {
            let config = server.get();
            self.seen.observe(config.metadata.annotations.as_ref(), now);
            let me = Me {
                key: &self.key,
                replica: &self.replica,
                ca: &self.ca,
            };
            look(&config, "default", &me, &self.seen, mode, now, wall)
        }

        /// Looks, and writes what the look decided: whether it wrote.
        fn step(&mut self, server: &mut Server, mode: Mode, now: Instant, wall: u64) -> bool {
            match self.look(server, mode, now, wall).plan {
                Plan::Patch(ops) => {
                    server.patch(&ops).unwrap();
                    true
                }
                _ => false,
            }
        }
    }

    /// The API server's side of a JSON patch guarded by the resourceVersion.
    struct Server {
        object: Value,
        rv: u64,
    }

    impl Server {
        fn new(object: Value) -> Server {
            Server { object, rv: 7 }
        }

        fn get(&self) -> MutatingWebhookConfiguration {
            serde_json::from_value(self.object.clone()).unwrap()
        }

        fn patch(&mut self, ops: &Value) -> Result<(), u16> {
            if ops[0]["path"] != "/metadata/resourceVersion"
                || ops[0]["value"].as_str().and_then(|v| v.parse().ok()) != Some(self.rv)
            {
                return Err(409);
            }
            let ops: Vec<json_patch::PatchOperation> = serde_json::from_value(ops.clone()).unwrap();
            json_patch::patch(&mut self.object, &ops).map_err(|_| 422u16)?;
            self.rv += 1;
            self.object["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            Ok(())
        }

        /// The certificates' fingerprints of each entry's bundle, and the record keys.
        fn state(&self) -> (Vec<BTreeSet<String>>, BTreeSet<String>) {
            let config = self.get();
            let bundles = config
                .webhooks
                .iter()
                .flatten()
                .map(|wh| {
                    let b = wh
                        .client_config
                        .ca_bundle
                        .as_ref()
                        .map_or(&[][..], |b| &b.0[..]);
                    bundle::read(b).into_iter().map(|c| c.fingerprint).collect()
                })
                .collect();
            let keys = records::records(config.metadata.annotations.as_ref())
                .map(|(k, _)| k.clone())
                .collect();
            (bundles, keys)
        }

        fn bundle(&self, entry: usize) -> Vec<u8> {
            self.get().webhooks.unwrap()[entry]
                .client_config
                .ca_bundle
                .clone()
                .unwrap()
                .0
        }
    }

    fn fingerprints(r: &Replica) -> BTreeSet<String> {
        r.ca.fingerprints().into_iter().collect()
    }

    /// Both replicas look in turn until neither writes (at most `rounds` rounds): the writes.
    fn settle(
        a: &mut Replica,
        b: &mut Replica,
        server: &mut Server,
        now: Instant,
        wall: u64,
    ) -> usize {
        let mut writes = 0;
        for _ in 0..10 {
            let wrote = [
                a.step(server, Mode::Serve, now, wall),
                b.step(server, Mode::Serve, now, wall),
            ];
            writes += wrote.iter().filter(|w| **w).count();
            if wrote == [false, false] {
                return writes;
            }
        }
        panic!("two replicas did not settle: {:?}", server.state());
    }

    #[test]
    fn only_our_revisions_entries_with_our_webhook_name_are_looked_at() {
        let pem = ca_pem("ours");
        let mut me = Replica::new("me/1", &pem);
        let t = Instant::now();
        let server = |c| Server::new(config_json(c, &[(SUFFIX_A, None)]));
        let look = me.look(&server(Some("canary")), Mode::Serve, t, 100);
        assert_eq!((look.plan, look.ready), (Plan::NotOurs, true));
        assert_eq!(
            me.look(&server(None), Mode::Serve, t, 100).plan,
            Plan::NotOurs
        );
        let other = Server::new(config_json(Some("default"), &[("other.example.com", None)]));
        assert_eq!(me.look(&other, Mode::Serve, t, 100).plan, Plan::NoEntry);

        let mut s = Server::new(config_json(
            Some("default"),
            &[
                (SUFFIX_A, Some(b"old")),
                ("other.example.com", Some(b"old")),
                (SUFFIX_B, Some(&pem)),
            ],
        ));
        let look = me.look(&s, Mode::Serve, t, 100);
        assert!(!look.ready, "our CA is not in entry 0 yet");
        let Plan::Patch(ops) = look.plan else {
            panic!("no patch")
        };
        let paths: Vec<&str> = ops
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            [
                "/metadata/resourceVersion",
                "/webhooks/0/clientConfig/caBundle",
                "/metadata/annotations"
            ]
        );
        assert_eq!(ops[0]["value"], "7");
        s.patch(&ops).unwrap();
        // Alone: exactly our CA file, as Istio's patcher writes it; the other entry untouched.
        assert_eq!(s.bundle(0), pem);
        assert_eq!(s.bundle(1), b"old");
        let look = me.look(&s, Mode::Serve, t, 100);
        assert_eq!((look.plan, look.ready), (Plan::Settled, true));
        assert_eq!(look.next, Some(t + records::RENEW), "our record's renewal");
        // Renewed once due: a new value.
        let later = t + records::RENEW;
        assert!(me.step(&mut s, Mode::Serve, later, 130));
        assert_eq!(me.look(&s, Mode::Serve, later, 130).plan, Plan::Settled);
    }

    #[test]
    fn a_rotation_across_two_replicas_keeps_both_cas_while_both_serve_then_only_the_survivors() {
        let (pa, pb) = (ca_pem("a"), ca_pem("b"));
        let mut s = Server::new(config_json(
            Some("default"),
            &[(SUFFIX_A, Some(&pa)), (SUFFIX_B, Some(&pa))],
        ));
        let (mut a, mut b) = (Replica::new("a/1", &pa), Replica::new("b/1", &pb));
        let t = Instant::now();
        assert!(a.step(&mut s, Mode::Serve, t, 100), "a writes its record");
        assert!(!a.step(&mut s, Mode::Serve, t, 100));

        // b starts (a rolling update with a new CA): one write of b's, none of a's.
        let writes = settle(&mut a, &mut b, &mut s, t, 101);
        assert_eq!(writes, 1, "{:?}", s.state());
        let both: BTreeSet<String> = fingerprints(&a).union(&fingerprints(&b)).cloned().collect();
        let (bundles, keys) = s.state();
        assert!(bundles.iter().all(|f| *f == both), "{bundles:?}");
        assert_eq!(keys.len(), 2);
        assert!(a.look(&s, Mode::Serve, t, 101).ready && b.look(&s, Mode::Serve, t, 101).ready);
        // Both keep renewing: still both CAs, nothing else written.
        for i in 1..=5u32 {
            let now = t + records::RENEW * i;
            let wall = 101 + 30 * u64::from(i);
            assert_eq!(
                settle(&mut a, &mut b, &mut s, now, wall),
                2,
                "one renewal each"
            );
            assert!(s.state().0.iter().all(|f| *f == both));
        }

        // a shuts down gracefully: its record and its CA leave; b then writes its own file alone.
        let now = t + records::RENEW * 6;
        assert!(a.step(&mut s, Mode::Release, now, 300));
        assert!(!a.step(&mut s, Mode::Release, now, 300), "released once");
        b.step(&mut s, Mode::Serve, now, 300);
        assert!(!b.step(&mut s, Mode::Serve, now, 300));
        let (bundles, keys) = s.state();
        assert!(
            bundles.iter().all(|f| *f == fingerprints(&b)),
            "{bundles:?}"
        );
        assert_eq!(keys, BTreeSet::from([b.key.clone()]));
        assert_eq!(s.bundle(0), pb, "the survivor's CA file, exactly");
    }

    #[test]
    fn a_crashed_replicas_ca_is_pruned_once_its_record_expires() {
        let (pa, pb) = (ca_pem("a"), ca_pem("b"));
        let mut s = Server::new(config_json(Some("default"), &[(SUFFIX_A, Some(&pa))]));
        let (mut a, mut b) = (Replica::new("a/1", &pa), Replica::new("b/1", &pb));
        let t = Instant::now();
        a.step(&mut s, Mode::Serve, t, 100);
        settle(&mut a, &mut b, &mut s, t, 100);
        assert_eq!(s.state().0[0].len(), 2);
        // a is killed: it neither renews nor releases. b keeps looking (its renewals, the expiry it
        // scheduled); a's CA stays until a's record has not changed for TTL, then goes.
        let mut when_pruned = None;
        for secs in 1..=200 {
            let now = t + Duration::from_secs(secs);
            let look = b.look(&s, Mode::Serve, now, 100 + secs);
            if let Plan::Patch(ops) = look.plan {
                s.patch(&ops).unwrap();
            }
            if when_pruned.is_none() && s.state().0[0] == fingerprints(&b) {
                when_pruned = Some(secs);
            }
        }
        assert_eq!(when_pruned, Some(records::TTL.as_secs()));
        assert_eq!(s.state().1, BTreeSet::from([b.key.clone()]));
        assert_eq!(s.bundle(0), pb);
    }

    #[test]
    fn a_replica_alone_that_releases_leaves_its_ca_and_replicas_sharing_a_ca_keep_it() {
        let pa = ca_pem("a");
        let mut s = Server::new(config_json(Some("default"), &[(SUFFIX_A, Some(&pa))]));
        let (mut a, mut a2) = (Replica::new("a/1", &pa), Replica::new("a/2", &pa));
        let t = Instant::now();
        assert_eq!(
            settle(&mut a, &mut a2, &mut s, t, 100),
            2,
            "one record each"
        );
        assert!(a.step(&mut s, Mode::Release, t, 100));
        assert_eq!(s.bundle(0), pa, "the other replica serves with the same CA");
        assert!(a2.step(&mut s, Mode::Release, t, 100));
        assert_eq!(
            s.bundle(0),
            pa,
            "the last one leaves its CA: the API server must trust something"
        );
        assert!(s.state().1.is_empty());
        // The CA file changes under a single replica: exactly the new file.
        let mut a = Replica::new("a/1", &pa);
        a.step(&mut s, Mode::Serve, t, 100);
        let rotated = ca_pem("rotated");
        a.ca = OwnCa::new(&rotated).unwrap();
        assert!(a.step(&mut s, Mode::Serve, t, 101));
        assert_eq!(s.bundle(0), rotated);
    }

    #[test]
    fn garbage_in_bundles_and_records_is_dropped_without_a_fight() {
        let pem = ca_pem("ours");
        let mut object = config_json(
            Some("default"),
            &[
                (SUFFIX_A, Some(b"not a CA")),
                (SUFFIX_B, Some(&vec![b'-'; 3 << 20])),
            ],
        );
        let mut annotations = serde_json::Map::new();
        annotations.insert("unrelated".into(), json!("kept"));
        annotations.insert(
            format!("{}{}", records::PREFIX, "garbage"),
            json!("{not json"),
        );
        let live = Record {
            replica: "x".into(),
            ca: vec!["0".repeat(64)],
            renewed: 1,
        };
        for i in 0..100 {
            annotations.insert(format!("{}{i:016}", records::PREFIX), json!(live.value()));
        }
        object["metadata"]["annotations"] = Value::Object(annotations);
        let mut s = Server::new(object);
        let mut me = Replica::new("me/1", &pem);
        let t = Instant::now();
        assert!(me.step(&mut s, Mode::Serve, t, 100));
        assert!(
            !me.step(&mut s, Mode::Serve, t, 100),
            "settled after one write"
        );
        assert_eq!(s.bundle(0), pem);
        assert_eq!(s.bundle(1), pem);
        let annotations = s.get().metadata.annotations.unwrap();
        assert_eq!(annotations["unrelated"], "kept");
        let kept = records::records(Some(&annotations)).count();
        assert_eq!(
            kept,
            records::MAX_RECORDS,
            "the garbage and the records past the bound removed"
        );
    }

    #[test]
    fn conflicts_are_told_apart() {
        let status = |code| {
            WriteError::Api(kube::Error::Api(
                kube::core::Status::failure("m", "r")
                    .with_code(code)
                    .boxed(),
            ))
        };
        assert!(status(409).is_conflict());
        assert!(!status(422).is_conflict());
        assert!(!WriteError::Timeout.is_conflict());
        assert_eq!(revision_label(""), "default");
        assert_eq!(revision_label("canary"), "canary");
    }
}
