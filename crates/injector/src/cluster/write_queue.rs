//! The queue that every write of `injector serve` to the API server goes through: `ca_bundle_patch`'s
//! caBundle patches and `policy_params`' params object, and the one error type of those writes. It is client-go's controller work queue as Istio's
//! `pkg/kube/controllers/queue.go` `Queue` uses it. Keys deduplicate: a burst of events for one object
//! is one look at it. The writes those looks decide on have two limits:
//! - **per key**, exponential backoff (client-go's `ItemExponentialFailureRateLimiter`). It doubles with
//!   each write in a row that did not leave the key settled: a failure, or a success that the next look
//!   found undone (a war with another writer). A look that finds nothing to write forgets the backoff
//!   (client-go's `Forget`).
//! - **overall**, a token bucket (client-go's `BucketRateLimiter` in `DefaultControllerRateLimiter`).
//!
//! The queue holds no clock of its own: every call is given `now`, so the limits can be tested without
//! sleeping.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

/// The longest a single write request may take before it counts as failed (and is retried).
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a write was not applied (retried with backoff).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The object or patch could not be encoded (cannot happen for the values written).
    #[error("encoding the write: {0}")]
    Encode(#[source] serde_json::Error),
    /// The HTTP request could not be built (cannot happen for a valid object name).
    #[error("building the request: {0}")]
    Request(#[source] hyper::http::Error),
    /// No answer within [`WRITE_TIMEOUT`].
    #[error("no answer from the API server within {WRITE_TIMEOUT:?}")]
    Timeout,
    /// The API server refused it or could not be reached. A concurrent change (or an object created
    /// meanwhile) fails with 409 Conflict; the next look sees the newer object.
    #[error("{0}")]
    Api(#[source] kube::Error),
}

impl WriteError {
    /// A 409 Conflict: another writer changed the object since we read it.
    pub fn is_conflict(&self) -> bool {
        matches!(self, WriteError::Api(kube::Error::Api(s)) if s.code == 409)
    }
}

/// The rates of a [`WriteQueue`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Writes per second across all keys, on average.
    pub per_second: u32,
    /// Writes allowed back to back after a quiet spell.
    pub burst: u32,
    /// A key's backoff after its first unsettled write, doubled with each further one.
    pub base_delay: Duration,
    /// The longest backoff of a key.
    pub max_delay: Duration,
}

/// The limits of `serve`'s writes. Five per second and replica keeps the two replicas of a rolling
/// update within 10 writes a second together, the rate Istio's patcher queue allows. The burst covers
/// one CA change across a revision and its tags. The backoff starts where Istio's `newWebhookPatcherQueue`
/// retries do (100 ms) and ends at its slow rate (one a minute).
pub const LIMITS: Limits = Limits {
    per_second: 5,
    burst: 5,
    base_delay: Duration::from_millis(100),
    max_delay: Duration::from_secs(60),
};

/// A token bucket: `burst` tokens, refilled at `per_second`.
#[derive(Debug)]
struct Bucket {
    tokens: f64,
    at: Instant,
    per_second: f64,
    burst: f64,
}

impl Bucket {
    fn new(limits: &Limits, now: Instant) -> Bucket {
        let burst = f64::from(limits.burst.max(1));
        Bucket {
            tokens: burst,
            at: now,
            per_second: f64::from(limits.per_second.max(1)),
            burst,
        }
    }

    /// Takes a token when there is one; else the instant when there will be one.
    fn take(&mut self, now: Instant) -> Result<(), Instant> {
        if now > self.at {
            let refill = now.duration_since(self.at).as_secs_f64() * self.per_second;
            self.tokens = (self.tokens + refill).min(self.burst);
            self.at = now;
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - self.tokens) / self.per_second;
            Err(self.at + Duration::from_secs_f64(wait))
        }
    }
}

/// One key's place in the queue.
#[derive(Debug, Default)]
struct Key {
    /// When it is to be looked at (None: not queued).
    due: Option<Instant>,
    /// Writes in a row that did not settle it.
    streak: u32,
    /// No write before this instant (its backoff).
    not_before: Option<Instant>,
}

/// The rate-limited queue of keys (see the module's documentation).
#[derive(Debug)]
pub struct WriteQueue<K> {
    keys: BTreeMap<K, Key>,
    bucket: Bucket,
    limits: Limits,
}

impl<K: Ord + Clone> WriteQueue<K> {
    pub fn new(limits: Limits, now: Instant) -> WriteQueue<K> {
        WriteQueue {
            keys: BTreeMap::new(),
            bucket: Bucket::new(&limits, now),
            limits,
        }
    }

    /// Queues a look at `key` at `at`, or keeps the earlier look already queued (a burst of events is one
    /// look).
    pub fn schedule(&mut self, key: K, at: Instant) {
        let k = self.keys.entry(key).or_default();
        k.due = Some(k.due.map_or(at, |d| d.min(at)));
    }

    /// Drops `key` and its backoff (its object is gone).
    pub fn forget(&mut self, key: &K) {
        self.keys.remove(key);
    }

    /// When the next look is due.
    pub fn next_due(&self) -> Option<Instant> {
        self.keys.values().filter_map(|k| k.due).min()
    }

    /// Takes the keys due at `now` out of the queue, in key order.
    pub fn take_due(&mut self, now: Instant) -> Vec<K> {
        let mut due = Vec::new();
        for (key, k) in &mut self.keys {
            if k.due.is_some_and(|d| d <= now) {
                k.due = None;
                due.push(key.clone());
            }
        }
        due
    }

    /// A look at `key` found nothing to write: its backoff is forgotten.
    pub fn settled(&mut self, key: &K) {
        if let Some(k) = self.keys.get_mut(key) {
            k.streak = 0;
            k.not_before = None;
            if k.due.is_none() {
                self.keys.remove(key);
            }
        }
    }

    /// A look at `key` wants to write. `Ok` when the write may go now (the caller then reports it with
    /// [`WriteQueue::wrote`]). Otherwise the key is queued again for when its backoff or the bucket allows
    /// it, and that instant is returned.
    pub fn permit(&mut self, key: &K, now: Instant) -> Result<(), Instant> {
        let not_before = self.keys.get(key).and_then(|k| k.not_before);
        let at = match not_before {
            Some(nb) if nb > now => nb,
            _ => match self.bucket.take(now) {
                Ok(()) => return Ok(()),
                Err(at) => at,
            },
        };
        self.schedule(key.clone(), at);
        Err(at)
    }

    /// A write of `key` was sent (`ok`: the API server took it). The key's backoff grows either way, so
    /// that a write undone at once by another writer is not repeated at full speed. A failed write is
    /// queued again after the backoff, which is returned.
    pub fn wrote(&mut self, key: &K, ok: bool, now: Instant) -> Duration {
        let k = self.keys.entry(key.clone()).or_default();
        k.streak = k.streak.saturating_add(1);
        let delay = backoff(&self.limits, k.streak);
        k.not_before = Some(now + delay);
        if !ok {
            self.schedule(key.clone(), now + delay);
        }
        delay
    }
}

/// The backoff after `streak` unsettled writes: `base_delay` doubled `streak - 1` times, at most
/// `max_delay`.
fn backoff(limits: &Limits, streak: u32) -> Duration {
    let factor = 1u32
        .checked_shl(streak.saturating_sub(1))
        .unwrap_or(u32::MAX);
    limits
        .base_delay
        .saturating_mul(factor)
        .min(limits.max_delay)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// Every key wants a write at every look, 1 ms apart, for `secs` seconds: the writes sent. Each key
    /// settles right after its write (a look found it as wanted), so only the bucket limits them.
    fn writes_in(limits: Limits, keys: u32, secs: u64) -> usize {
        let start = Instant::now();
        let mut q = WriteQueue::new(limits, start);
        let mut sent = 0;
        for ms in 0..secs * 1000 {
            let now = start + Duration::from_millis(ms);
            for key in 0..keys {
                q.schedule(key, now);
            }
            for key in q.take_due(now) {
                if q.permit(&key, now).is_ok() {
                    q.wrote(&key, true, now);
                    sent += 1;
                    q.settled(&key);
                }
            }
        }
        sent
    }

    #[test]
    fn the_bucket_holds_all_keys_to_its_rate_after_the_burst() {
        // 50 configurations asking for a write every millisecond for 10 s: 5 a second plus the burst.
        let sent = writes_in(LIMITS, 50, 10);
        assert!(
            (50..=55).contains(&sent),
            "{sent} writes in 10 s, want 5/s + a burst of 5"
        );
        // A quiet spell refills the burst, and no more than the burst.
        let start = Instant::now();
        let mut q = WriteQueue::new(LIMITS, start);
        let later = start + Duration::from_secs(3600);
        let burst = (0..20).filter(|k| q.permit(k, later).is_ok()).count();
        assert_eq!(burst, 5);
    }

    #[test]
    fn a_key_that_never_settles_backs_off_exponentially() {
        // One key that keeps wanting a write (another writer undoes each one), looked at every
        // millisecond for ten minutes: 100 ms, 200 ms, ... then once a minute.
        let start = Instant::now();
        let mut q = WriteQueue::new(LIMITS, start);
        let mut sent = Vec::new();
        for ms in 0..600_000u64 {
            let now = start + Duration::from_millis(ms);
            q.schedule("mwc", now);
            for key in q.take_due(now) {
                if q.permit(&key, now).is_ok() {
                    q.wrote(&key, ms % 2 == 0, now);
                    sent.push(ms);
                }
            }
        }
        // 100 ms .. 51.2 s doubling is 10 writes after the first; then one a minute for the rest.
        assert!(
            (15..=22).contains(&sent.len()),
            "{} writes in 10 minutes: {sent:?}",
            sent.len()
        );
        let gaps: Vec<u64> = sent.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(&gaps[..4], &[100, 200, 400, 800]);
        assert!(gaps.iter().all(|g| *g <= 60_000), "{gaps:?}");
        assert_eq!(*gaps.last().unwrap(), 60_000);
        // A look that finds the key settled forgets the backoff: the next write goes at once.
        let now = start + Duration::from_millis(600_000);
        q.settled(&"mwc");
        assert!(q.permit(&"mwc", now).is_ok());
    }

    #[test]
    fn a_failed_write_is_queued_again_after_its_backoff_and_keys_deduplicate() {
        let start = Instant::now();
        let mut q = WriteQueue::new(LIMITS, start);
        for _ in 0..100 {
            q.schedule("a", start);
        }
        q.schedule("b", start + Duration::from_secs(1));
        assert_eq!(q.take_due(start), vec!["a"]);
        assert_eq!(q.take_due(start), Vec::<&str>::new());
        assert!(q.permit(&"a", start).is_ok());
        assert_eq!(q.wrote(&"a", false, start), Duration::from_millis(100));
        assert_eq!(q.next_due(), Some(start + Duration::from_millis(100)));
        // Looked at again earlier (an event), the write waits for the backoff.
        let soon = start + Duration::from_millis(10);
        assert_eq!(
            q.permit(&"a", soon),
            Err(start + Duration::from_millis(100))
        );
        q.forget(&"a");
        assert_eq!(q.next_due(), Some(start + Duration::from_secs(1)));
        assert_eq!(backoff(&LIMITS, u32::MAX), LIMITS.max_delay);
    }
}
