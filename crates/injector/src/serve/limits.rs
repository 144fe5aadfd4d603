//! The server's bounds on the work it takes on: the injection slots (large bodies may hold only a
//! quarter of them), the global budget of request-body bytes, and the size limits of a review's body.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::shared::metrics::Metrics;

/// Istio's `MaxRequestBodyBytes` (`pkg/kube/util.go`): larger bodies are answered 400.
pub const MAX_BODY_BYTES: usize = 6 * 1024 * 1024;
/// After an oversized body, read (and discard) at most this much more so the client gets the 400 instead of
/// a connection reset from unread data; beyond it the connection is simply closed.
pub(super) const MAX_DRAIN_BYTES: usize = 32 * 1024 * 1024;
/// Bodies from this size on are "large": they may use only part of the injection slots and of the body
/// budget, so that a few huge pods cannot starve ordinary ones (a typical pod's review is 2–20 KiB).
pub const LARGE_BODY_BYTES: usize = 256 * 1024;
/// Reviews smaller than this get their cheap part (decode, decision, cache) on the I/O thread: about
/// 0.1 ms of parsing at most, less than a hand-off to the blocking pool costs a typical review.
pub const INLINE_BODY_BYTES: usize = 64 * 1024;

/// The default of `--max-body-bytes-in-flight`: five bodies at Istio's 6 MiB limit (see docs/operations.md,
/// "Memory").
pub const DEFAULT_BODY_BUDGET: u64 = 32 * 1024 * 1024;

/// The injection slots: every injection holds one of `all`; one with a large body also holds one of
/// `large` (at most a quarter of them), so that huge pods leave most slots to ordinary ones and their
/// working sets do not add up.
pub(super) struct Limiter {
    pub(super) all: Arc<Semaphore>,
    pub(super) large: Arc<Semaphore>,
}

/// The slots an injection holds until it ends, answered or not.
pub(super) struct Slots {
    pub(super) _all: OwnedSemaphorePermit,
    pub(super) _large: Option<OwnedSemaphorePermit>,
}

impl Limiter {
    pub(super) fn new(slots: usize, large: usize) -> Limiter {
        Limiter {
            all: Arc::new(Semaphore::new(slots.max(1))),
            large: Arc::new(Semaphore::new(large.min(slots / 4).max(1))),
        }
    }

    /// Waits for the slots of a review with a `body_len`-byte body (`None` only if closed, which never
    /// happens).
    pub(super) async fn acquire(&self, body_len: usize) -> Option<Slots> {
        let large = if body_len >= LARGE_BODY_BYTES {
            Some(self.large.clone().acquire_owned().await.ok()?)
        } else {
            None
        };
        let all = self.all.clone().acquire_owned().await.ok()?;
        Some(Slots {
            _all: all,
            _large: large,
        })
    }
}

/// The global budget of request-body bytes held across all connections.
#[derive(Debug)]
pub(super) struct BodyBudget {
    pub(super) limit: usize,
    /// What large bodies may use at most: the rest stays for ordinary reviews.
    pub(super) large_limit: usize,
    pub(super) used: AtomicUsize,
    pub(super) metrics: Arc<Metrics>,
}

/// Bytes reserved in a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
pub(super) struct Reservation {
    pub(super) budget: Arc<BodyBudget>,
    pub(super) bytes: usize,
}

impl BodyBudget {
    pub(super) fn new(limit: usize, metrics: Arc<Metrics>) -> BodyBudget {
        BodyBudget {
            limit,
            large_limit: limit - limit / 4,
            used: AtomicUsize::new(0),
            metrics,
        }
    }

    /// Takes `n` more bytes if they fit under the limit for a body that will be `total` bytes (large
    /// bodies fit under the lower limit).
    pub(super) fn take(&self, n: usize, total: usize) -> bool {
        let limit = if total >= LARGE_BODY_BYTES {
            self.large_limit
        } else {
            self.limit
        };
        let ok = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&u| u <= limit)
            })
            .is_ok();
        if ok {
            self.metrics.body_bytes_in_flight.inc_by(n as i64);
        }
        ok
    }

    pub(super) fn reserve(self: &Arc<Self>, n: usize) -> Option<Reservation> {
        self.take(n, n).then(|| Reservation {
            budget: self.clone(),
            bytes: n,
        })
    }
}

impl Reservation {
    /// Grows the reservation to `total` bytes; false (and unchanged) when over budget.
    pub(super) fn grow_to(&mut self, total: usize) -> bool {
        if total <= self.bytes {
            return true;
        }
        if !self.budget.take(total - self.bytes, total) {
            return false;
        }
        self.bytes = total;
        true
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Ordering::AcqRel);
        self.budget
            .metrics
            .body_bytes_in_flight
            .dec_by(self.bytes as i64);
    }
}

/// Counts an injection in `injector_injections_in_flight` while alive.
pub(super) struct Running(Arc<Metrics>);

impl Running {
    pub(super) fn new(m: Arc<Metrics>) -> Running {
        m.injections_in_flight.inc();
        Running(m)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.injections_in_flight.dec();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn body_budget_reserves_releases_and_keeps_room_for_small_bodies() {
        let metrics = Arc::new(Metrics::new());
        let budget = Arc::new(BodyBudget::new(8 << 20, metrics.clone()));
        // Large bodies may use three quarters (6 MiB) of the 8 MiB.
        let big = budget.reserve(5 << 20).unwrap();
        assert!(
            budget.reserve(2 << 20).is_none(),
            "over the large bodies' share"
        );
        let small = budget.reserve(100 << 10).unwrap();
        assert_eq!(metrics.body_bytes_in_flight.get(), (5 << 20) + (100 << 10));
        // A growing (chunked) body is held to the same limits.
        let mut chunked = budget.reserve(0).unwrap();
        assert!(chunked.grow_to(200 << 10));
        assert!(!chunked.grow_to(4 << 20), "grew past the budget");
        assert_eq!(chunked.bytes, 200 << 10);
        drop((big, small, chunked));
        assert_eq!(budget.used.load(Ordering::Acquire), 0);
        assert_eq!(metrics.body_bytes_in_flight.get(), 0);
        assert!(budget.reserve(6 << 20).is_some());
    }

    #[tokio::test]
    async fn large_bodies_hold_at_most_a_quarter_of_the_slots() {
        assert_eq!(Limiter::new(8, 1).large.available_permits(), 1);
        assert_eq!(Limiter::new(4, 3).large.available_permits(), 1);
        let limiter = Limiter::new(8, 4);
        let a = limiter.acquire(LARGE_BODY_BYTES).await.unwrap();
        let b = limiter.acquire(LARGE_BODY_BYTES).await.unwrap();
        let third =
            tokio::time::timeout(Duration::from_millis(50), limiter.acquire(LARGE_BODY_BYTES))
                .await;
        assert!(third.is_err(), "a third large body got a slot of 8");
        let small: Vec<Slots> = futures_small(&limiter, 6).await;
        assert_eq!(limiter.all.available_permits(), 0);
        drop((a, b, small));
        assert_eq!(limiter.all.available_permits(), 8);
    }

    async fn futures_small(limiter: &Limiter, n: usize) -> Vec<Slots> {
        let mut v = Vec::new();
        for _ in 0..n {
            v.push(limiter.acquire(100).await.unwrap());
        }
        v
    }
}
