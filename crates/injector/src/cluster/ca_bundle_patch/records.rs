//! Liveness records: which replica serves with which CA. Each replica keeps one annotation on every
//! configuration it patches. The key is [`PREFIX`] followed by a hash of the replica's identity. The value
//! is a JSON [`Record`]: the replica, the SHA-256 fingerprints of its CA certificates, and when it last
//! renewed. A replica renews its record every [`RENEW`] and removes it on a graceful shutdown.
//!
//! Another replica treats a record as live while its value has changed within the last [`TTL`], timed by
//! the observer's own clock. client-go's leader election judges a Lease the same way
//! (`observedTime`), so clock skew between replicas does not matter. A replica that crashed stops
//! renewing, and its CA leaves the bundle at most [`TTL`] after the survivors last saw its record change.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The annotation prefix of the records.
pub const PREFIX: &str = "ca-bundle.sidecar-inject.io/";
/// How often a replica renews its record.
pub const RENEW: Duration = Duration::from_secs(30);
/// How long a record stays live without a change, seen from another replica: three missed renewals.
pub const TTL: Duration = Duration::from_secs(90);
/// At most this many records are read per configuration. Records past it (in key order), and records
/// that do not parse, are removed by the next write.
pub const MAX_RECORDS: usize = 64;
/// The largest value read as a record.
const MAX_VALUE_BYTES: usize = 4096;
/// The longest replica identity kept in a record.
const MAX_REPLICA_BYTES: usize = 256;

/// One replica's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The replica's identity (see [`replica_id`]), for people reading the annotation.
    pub replica: String,
    /// The SHA-256 fingerprints (lowercase hex) of its CA certificates, sorted.
    pub ca: Vec<String>,
    /// Unix seconds of its last renewal, by its own clock.
    pub renewed: u64,
}

impl Record {
    /// The annotation value.
    pub fn value(&self) -> String {
        // A struct of strings and numbers always serializes.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Reads a record, or None when it is too large or not a record (such a record is garbage).
    pub fn parse(value: &str) -> Option<Record> {
        if value.len() > MAX_VALUE_BYTES {
            return None;
        }
        let r: Record = serde_json::from_str(value).ok()?;
        let fingerprint = |f: &String| {
            f.len() == 64
                && f.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        let ok = r.replica.len() <= MAX_REPLICA_BYTES
            && !r.ca.is_empty()
            && r.ca.len() <= super::bundle::MAX_CERTS
            && r.ca.iter().all(fingerprint);
        ok.then_some(r)
    }
}

/// This process's identity among the replicas: the host name (a pod's name) and the process id, so that
/// two processes on one host differ too.
pub fn replica_id() -> String {
    let host = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}/{}", std::process::id())
}

/// The annotation key of a replica's record: [`PREFIX`] and the first 16 hex digits of the SHA-256 of
/// its identity. That fits the 63 characters of an annotation name, whatever the host name is.
pub fn key_of(replica: &str) -> String {
    let hex = super::bundle::sha256_hex(replica.as_bytes());
    format!("{PREFIX}{}", &hex[..16])
}

/// The records among `annotations` (key and value), in key order.
pub fn records(
    annotations: Option<&BTreeMap<String, String>>,
) -> impl Iterator<Item = (&String, &String)> {
    annotations
        .into_iter()
        .flat_map(|a| a.range::<str, _>((Bound::Included(PREFIX), Bound::Unbounded)))
        .take_while(|(k, _)| k.starts_with(PREFIX))
}

/// What this replica has seen of one configuration's records: each record's value and when it was first
/// seen with that value.
#[derive(Debug, Default)]
pub struct Seen {
    values: BTreeMap<String, (String, Instant)>,
}

impl Seen {
    /// Takes in a new version of the configuration's annotations, seen at `now`.
    pub fn observe(&mut self, annotations: Option<&BTreeMap<String, String>>, now: Instant) {
        let mut next = BTreeMap::new();
        for (key, value) in records(annotations).take(MAX_RECORDS + 1) {
            let since = match self.values.get(key) {
                Some((v, since)) if v == value => *since,
                _ => now,
            };
            next.insert(key.clone(), (value.clone(), since));
        }
        self.values = next;
    }

    /// Until when the record `key` with `value` is live (first seen with it + [`TTL`]). A record never
    /// observed counts as seen now.
    pub fn live_until(&self, key: &str, value: &str, now: Instant) -> Instant {
        let since = match self.values.get(key) {
            Some((v, since)) if v == value => *since,
            _ => now,
        };
        since + TTL
    }
}

/// Unix seconds now, by this host's clock.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// When our own record written at `renewed` is due for renewal, seen at `now` (Unix seconds `wall`): None
/// when it is due already (also when `renewed` lies in the future, a clock that jumped back).
pub fn renewal_due(renewed: u64, wall: u64, now: Instant) -> Option<Instant> {
    let age = Duration::from_secs(wall.checked_sub(renewed)?);
    RENEW
        .checked_sub(age)
        .filter(|left| !left.is_zero())
        .map(|left| now + left)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn fp(c: char) -> String {
        std::iter::repeat_n(c, 64).collect()
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let r = Record {
            replica: "injector-abc/1".into(),
            ca: vec![fp('a'), fp('0')],
            renewed: 1_700_000_000,
        };
        assert_eq!(Record::parse(&r.value()), Some(r.clone()));
        for bad in [
            "".to_string(),
            "not json".to_string(),
            r#"{"replica":"x","ca":[],"renewed":1}"#.to_string(),
            r#"{"replica":"x","ca":["ABC"],"renewed":1}"#.to_string(),
            format!(r#"{{"replica":"x","ca":["{}"],"renewed":-1}}"#, fp('a')),
            format!(
                r#"{{"replica":"x","ca":[{}],"renewed":1}}"#,
                vec![format!("\"{}\"", fp('a')); 33].join(",")
            ),
            format!(
                r#"{{"replica":"{}","ca":["{}"],"renewed":1}}"#,
                "x".repeat(5000),
                fp('a')
            ),
        ] {
            assert_eq!(Record::parse(&bad), None, "{bad:.80}");
        }
        let key = key_of(&replica_id());
        assert!(key.starts_with(PREFIX) && key.len() == PREFIX.len() + 16);
        assert_ne!(key_of("a/1"), key_of("a/2"));
    }

    #[test]
    fn a_record_is_live_for_ttl_after_its_value_last_changed() {
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let k = format!("{PREFIX}0000000000000001");
        let ann = |v: &str| BTreeMap::from([(k.clone(), v.to_string())]);
        seen.observe(Some(&ann("v1")), t0);
        // The same value seen again later does not extend it...
        seen.observe(Some(&ann("v1")), t0 + Duration::from_secs(60));
        assert_eq!(
            seen.live_until(&k, "v1", t0 + Duration::from_secs(60)),
            t0 + TTL
        );
        // ...a renewal (a new value) does.
        let t1 = t0 + Duration::from_secs(80);
        seen.observe(Some(&ann("v2")), t1);
        assert_eq!(seen.live_until(&k, "v2", t1), t1 + TTL);
        // Gone and back: seen anew.
        seen.observe(None, t1);
        assert_eq!(seen.live_until(&k, "v2", t1 + TTL), t1 + TTL + TTL);
        // Other annotations are no records.
        let other = BTreeMap::from([("ca-bundle.sidecar-inject.iox".to_string(), "v".to_string())]);
        assert_eq!(records(Some(&other)).count(), 0);
    }

    #[test]
    fn our_record_is_renewed_every_renew_period() {
        let now = Instant::now();
        assert_eq!(renewal_due(100, 100, now), Some(now + RENEW));
        assert_eq!(
            renewal_due(100, 110, now),
            Some(now + RENEW - Duration::from_secs(10))
        );
        assert_eq!(renewal_due(100, 130, now), None);
        assert_eq!(renewal_due(200, 100, now), None, "a clock that went back");
    }
}
