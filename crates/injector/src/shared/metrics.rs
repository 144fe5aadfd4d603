//! Prometheus metrics of `injector serve`, with Istio's names (`sidecar_injection_*`, Istio's `monitoring.go`) plus the
//! operational ones Istio lacks: configuration and certificate reloads, certificate expiry, open connections.
//! Served as text on a separate plain-HTTP port (`--metrics-listen`), so scraping needs no TLS setup.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::shared::cache::CacheCounters;

/// A label set with one fixed label (`type` or `result`).
type Labels = Vec<(&'static str, &'static str)>;

/// Why a request counted in `sidecar_injection_failure_total` failed (its `type` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureType {
    /// The body could not be read: too large, timed out, or the connection broke.
    BodyRead,
    /// No body.
    EmptyBody,
    /// `Content-Type` is not `application/json`.
    ContentType,
    /// The body is not an AdmissionReview (answered `allowed: false`).
    Decode,
    /// Injection failed for a decoded review (answered `allowed: false`).
    Inject,
    /// No injection slot before the review's deadline, or the injection ran past it (answered
    /// `allowed: false`; see `--review-deadline-ms`).
    Deadline,
    /// The budget of request-body bytes in flight was spent (answered 503 with `Retry-After`).
    Overloaded,
}

impl FailureType {
    pub fn label(self) -> &'static str {
        match self {
            FailureType::BodyRead => "body_read",
            FailureType::EmptyBody => "empty_body",
            FailureType::ContentType => "content_type",
            FailureType::Decode => "decode",
            FailureType::Inject => "inject",
            FailureType::Deadline => "deadline",
            FailureType::Overloaded => "overloaded",
        }
    }
}

/// Outcome of a reload attempt (the `result` label of the reload counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    Success,
    Failure,
}

impl ReloadResult {
    fn label(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Failure => "failure",
        }
    }
}

/// All metrics of the server; shared as `Arc<Metrics>`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    pub requests: Counter,
    pub success: Counter,
    failure: Family<Labels, Counter>,
    pub skip: Counter,
    pub time: Histogram,
    config_reloads: Family<Labels, Counter>,
    pub config_last_success: Gauge<f64, AtomicU64>,
    cert_reloads: Family<Labels, Counter>,
    pub cert_last_success: Gauge<f64, AtomicU64>,
    pub cert_expiry_seconds: Gauge<i64>,
    pub connections: Gauge<i64>,
    /// Idle connections closed to make room for a new one at `--max-connections`.
    pub connections_closed_idle: Counter,
    /// Injections running, including those whose review was already answered past its deadline.
    pub injections_in_flight: Gauge<i64>,
    /// Bytes of request bodies reserved in the global budget (`--max-body-bytes-in-flight`).
    pub body_bytes_in_flight: Gauge<i64>,
    /// The webhook's cache of finished patches (`serve::admission::Webhook`).
    pub patch_cache: CacheCounters,
    /// Pods injected, by template and render path (`compiled`, `evaluated`).
    template_renders: Family<Vec<(&'static str, String)>, Counter>,
    /// Failed list or watch calls of `serve --kubeconfig`, by resource (`cluster_watch`, `ca_bundle_patch`).
    cluster_watch_errors: Family<Labels, Counter>,
    /// Objects each watch of `serve --kubeconfig` holds, by resource, and the cluster states handed to
    /// the engine (`cluster_watch`: one engine rebuild each).
    cluster_watch_objects: Family<Labels, Gauge<i64>>,
    pub cluster_state_rebuilds: Counter,
    /// caBundle patches sent to our webhook configurations, and those that failed (`ca_bundle_patch`).
    pub webhook_patch_attempts: Counter,
    pub webhook_patch_failures: Counter,
    /// caBundle patches refused with 409 Conflict (another writer came first), also counted as failures.
    pub webhook_patch_conflicts: Counter,
    /// Writes of the policy's params object by result (`policy_params`).
    policy_params_writes: Family<Labels, Counter>,
    /// 1 while the configuration cannot be compiled into the policy and its params inject no pod.
    pub policy_params_refused: Gauge<i64>,
    /// Configurations compiled into the params (one per burst of engine swaps).
    pub policy_params_compiles: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            requests: Counter::default(),
            success: Counter::default(),
            failure: Family::<Labels, Counter>::default(),
            skip: Counter::default(),
            // Istio's buckets (.1 … 60 s) say nothing about a webhook that answers in well under a
            // millisecond, so finer buckets come first; Istio's bounds are all kept.
            time: Histogram::new([
                0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 1.0, 3.0,
                5.0, 10.0, 20.0, 30.0, 60.0,
            ]),
            config_reloads: Family::<Labels, Counter>::default(),
            config_last_success: Gauge::<f64, AtomicU64>::default(),
            cert_reloads: Family::<Labels, Counter>::default(),
            cert_last_success: Gauge::<f64, AtomicU64>::default(),
            cert_expiry_seconds: Gauge::<i64>::default(),
            connections: Gauge::<i64>::default(),
            connections_closed_idle: Counter::default(),
            injections_in_flight: Gauge::<i64>::default(),
            body_bytes_in_flight: Gauge::<i64>::default(),
            patch_cache: CacheCounters::default(),
            template_renders: Family::default(),
            cluster_watch_errors: Family::<Labels, Counter>::default(),
            cluster_watch_objects: Family::<Labels, Gauge<i64>>::default(),
            cluster_state_rebuilds: Counter::default(),
            webhook_patch_attempts: Counter::default(),
            webhook_patch_failures: Counter::default(),
            webhook_patch_conflicts: Counter::default(),
            policy_params_writes: Family::<Labels, Counter>::default(),
            policy_params_refused: Gauge::<i64>::default(),
            policy_params_compiles: Counter::default(),
        };
        // Registered in this order, which is the order of the text served.
        m.register_requests();
        m.register_operations();
        m.register_cluster();
        m.register_patch_cache();
        m
    }

    /// Istio's request metrics (`sidecar_injection_*`, Istio's `monitoring.go`).
    fn register_requests(&mut self) {
        // prometheus-client appends `_total` to counters.
        self.registry.register(
            "sidecar_injection_requests",
            "Total number of sidecar injection requests",
            self.requests.clone(),
        );
        self.registry.register(
            "sidecar_injection_success",
            "Total number of injection requests answered with a review (including allowed: false)",
            self.success.clone(),
        );
        self.registry.register(
            "sidecar_injection_failure",
            "Total number of failed injection requests, by type",
            self.failure.clone(),
        );
        self.registry.register(
            "sidecar_injection_skip",
            "Total number of skipped injection requests",
            self.skip.clone(),
        );
        self.registry.register(
            "sidecar_injection_time_seconds",
            "Time taken to handle an injection request",
            self.time.clone(),
        );
        self.registry.register(
            "injector_template_renders",
            "Pods injected, by template and how it rendered: compiled (the compiled template: no text \
             configured, or the text it was built from) or evaluated (the configured text)",
            self.template_renders.clone(),
        );
    }

    /// Counts one injected pod's templates by render path.
    pub fn rendered(&self, render_paths: &[(String, &'static str)]) {
        for (template, path) in render_paths {
            self.template_renders
                .get_or_create(&vec![
                    ("template", template.clone()),
                    ("path", path.to_string()),
                ])
                .inc();
        }
    }

    /// Reloads, certificate expiry, connections and what is in flight.
    fn register_operations(&mut self) {
        self.registry.register(
            "injector_config_reloads",
            "Configuration reload attempts, by result",
            self.config_reloads.clone(),
        );
        self.registry.register(
            "injector_config_last_reload_success_timestamp_seconds",
            "Unix time of the last successful configuration load",
            self.config_last_success.clone(),
        );
        self.registry.register(
            "injector_cert_reloads",
            "Serving certificate reload attempts, by result",
            self.cert_reloads.clone(),
        );
        self.registry.register(
            "injector_cert_last_reload_success_timestamp_seconds",
            "Unix time of the last successful serving certificate load",
            self.cert_last_success.clone(),
        );
        self.registry.register(
            "injector_cert_expiry_seconds",
            "Seconds until the serving certificate's notAfter (negative once expired)",
            self.cert_expiry_seconds.clone(),
        );
        self.registry.register(
            "injector_open_connections",
            "Open HTTPS connections",
            self.connections.clone(),
        );
        self.registry.register(
            "injector_connections_closed_idle",
            "Idle HTTPS connections closed to make room for a new one at the connection cap",
            self.connections_closed_idle.clone(),
        );
        self.registry.register(
            "injector_injections_in_flight",
            "Injections running, including those already answered past their deadline",
            self.injections_in_flight.clone(),
        );
        self.registry.register(
            "injector_body_bytes_in_flight",
            "Bytes of request bodies held across all connections",
            self.body_bytes_in_flight.clone(),
        );
    }

    /// The cluster watches and the caBundle patches.
    fn register_cluster(&mut self) {
        self.registry.register(
            "injector_cluster_watch_errors",
            "Failed list or watch calls to the API server, by resource (the last state is kept)",
            self.cluster_watch_errors.clone(),
        );
        self.registry.register(
            "injector_cluster_watch_objects",
            "Objects the cluster watches hold, by resource (ProxyConfigs the webhook can use, Namespaces, Nodes)",
            self.cluster_watch_objects.clone(),
        );
        self.registry.register(
            "injector_cluster_state_rebuilds",
            "Cluster states handed to the engine by the watches (one engine rebuild each)",
            self.cluster_state_rebuilds.clone(),
        );
        // Istio's names (`pkg/webhooks/monitoring.go`).
        self.registry.register(
            "webhook_patch_attempts",
            "caBundle patches sent to the revision's webhook configurations",
            self.webhook_patch_attempts.clone(),
        );
        self.registry.register(
            "webhook_patch_failures",
            "caBundle patches that failed (retried)",
            self.webhook_patch_failures.clone(),
        );
        self.registry.register(
            "webhook_patch_conflicts",
            "caBundle patches refused with 409 Conflict, another writer having changed the configuration (retried with backoff)",
            self.webhook_patch_conflicts.clone(),
        );
        self.registry.register(
            "injector_policy_params_writes",
            "Writes of the MutatingAdmissionPolicy's params object (--own-policy-params), by result (success, conflict, failure; retried with backoff)",
            self.policy_params_writes.clone(),
        );
        self.registry.register(
            "injector_policy_params_refused",
            "1 while the configuration cannot be compiled into the MutatingAdmissionPolicy: its params inject no pod and every pod goes to the webhook",
            self.policy_params_refused.clone(),
        );
        self.registry.register(
            "injector_policy_params_compiles",
            "Configurations compiled into the MutatingAdmissionPolicy's params (one per burst of configuration, ProxyConfig or node changes; written only when the spec differs)",
            self.policy_params_compiles.clone(),
        );
    }

    /// The cache of finished patches.
    fn register_patch_cache(&mut self) {
        // The family keeps its historical name (`render_memo`, from when the cache held rendered
        // templates) so that dashboards and alerts on it go on working.
        for (name, help, counter) in [
            (
                "sidecar_injection_render_memo_hits",
                "Injections answered from the cache of finished patches (replicas of a workload)",
                &self.patch_cache.hits,
            ),
            (
                "sidecar_injection_render_memo_misses",
                "Injections not in the cache of finished patches",
                &self.patch_cache.misses,
            ),
            (
                "sidecar_injection_render_memo_stored",
                "Patches stored in the cache (a pod's second sighting)",
                &self.patch_cache.stored,
            ),
            (
                "sidecar_injection_render_memo_evicted",
                "Patch cache entries dropped to make room",
                &self.patch_cache.evicted,
            ),
        ] {
            self.registry.register(name, help, counter.clone());
        }
        self.registry.register(
            "sidecar_injection_render_memo_entries",
            "Entries in the cache of finished patches",
            self.patch_cache.entries.clone(),
        );
    }

    /// Counts one write of the policy's params object with `result`.
    pub fn policy_params_write(&self, result: &'static str) {
        self.policy_params_writes
            .get_or_create(&vec![("result", result)])
            .inc();
    }

    /// Counts one failed list or watch of `resource` (its plural name).
    pub fn cluster_watch_error(&self, resource: &'static str) {
        self.cluster_watch_errors
            .get_or_create(&vec![("resource", resource)])
            .inc();
    }

    /// Sets how many objects the watch of `resource` holds.
    pub fn cluster_watch_objects(&self, resource: &'static str, n: usize) {
        self.cluster_watch_objects
            .get_or_create(&vec![("resource", resource)])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub fn failure(&self, kind: FailureType) {
        self.failure
            .get_or_create(&vec![("type", kind.label())])
            .inc();
    }

    pub fn config_reload(&self, result: ReloadResult) {
        count_reload(&self.config_reloads, &self.config_last_success, result);
    }

    pub fn cert_reload(&self, result: ReloadResult) {
        count_reload(&self.cert_reloads, &self.cert_last_success, result);
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; an error here would be a bug in an encoder, and then an empty
        // scrape is the better answer than a crash.
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Counts one reload by result; a success also stamps its time.
fn count_reload(
    reloads: &Family<Labels, Counter>,
    last_success: &Gauge<f64, AtomicU64>,
    result: ReloadResult,
) {
    reloads
        .get_or_create(&vec![("result", result.label())])
        .inc();
    if result == ReloadResult::Success {
        last_success.set(unix_now());
    }
}

fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Every metric `injector serve` exports, as a fresh registry encodes them, with one sample of each
/// labelled family (the encoder leaves an empty family out): docs/reference/metrics.md is generated from
/// it (`cargo run -p xtask -- docs`).
pub fn exposition() -> String {
    let metrics = Metrics::new();
    metrics.failure(FailureType::Inject);
    metrics.config_reload(ReloadResult::Success);
    metrics.cert_reload(ReloadResult::Success);
    metrics.cluster_watch_error("proxyconfigs");
    metrics.cluster_watch_objects("proxyconfigs", 0);
    metrics.rendered(&[("sidecar".to_string(), "compiled")]);
    metrics.policy_params_write("success");
    metrics.encode()
}
