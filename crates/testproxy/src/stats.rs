//! The proxy's counters, as `GET 127.0.0.1:15000/stats` reports them:
//! `{"inbound": N, "outbound": M, "destinations": ["ip:port", …]}`.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How many recent original destinations `/stats` lists (oldest dropped first).
pub const MAX_DESTINATIONS: usize = 64;

/// Which listener accepted a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// 15001: the pod's own outbound connections.
    Outbound,
    /// 15006: connections to the pod.
    Inbound,
}

/// Counters of accepted, redirected connections and their recent original destinations.
#[derive(Debug, Default)]
pub struct Stats {
    inbound: AtomicU64,
    outbound: AtomicU64,
    destinations: Mutex<VecDeque<SocketAddr>>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats::default()
    }

    /// Counts one connection of `direction` to `destination`.
    pub fn record(&self, direction: Direction, destination: SocketAddr) {
        let counter = match direction {
            Direction::Inbound => &self.inbound,
            Direction::Outbound => &self.outbound,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        // A poisoned lock only means another thread panicked mid-push; the list is still a list.
        let mut list = self
            .destinations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if list.len() == MAX_DESTINATIONS {
            list.pop_front();
        }
        list.push_back(destination);
    }

    /// The `/stats` document.
    pub fn to_json(&self) -> serde_json::Value {
        let list = self
            .destinations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        serde_json::json!({
            "inbound": self.inbound.load(Ordering::Relaxed),
            "outbound": self.outbound.load(Ordering::Relaxed),
            "destinations": list.iter().map(ToString::to_string).collect::<Vec<_>>(),
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_direction_and_lists_destinations_in_order() {
        let s = Stats::new();
        s.record(Direction::Outbound, "10.0.0.1:80".parse().unwrap());
        s.record(Direction::Inbound, "[fd00::1]:8080".parse().unwrap());
        s.record(Direction::Outbound, "10.0.0.2:443".parse().unwrap());
        assert_eq!(
            s.to_json(),
            serde_json::json!({
                "inbound": 1,
                "outbound": 2,
                "destinations": ["10.0.0.1:80", "[fd00::1]:8080", "10.0.0.2:443"],
            })
        );
    }

    #[test]
    fn the_destination_list_is_bounded_and_keeps_the_most_recent() {
        let s = Stats::new();
        for port in 1..=(MAX_DESTINATIONS as u16 + 10) {
            s.record(Direction::Outbound, SocketAddr::from(([10, 0, 0, 1], port)));
        }
        let json = s.to_json();
        let list = json["destinations"].as_array().unwrap();
        assert_eq!(list.len(), MAX_DESTINATIONS);
        assert_eq!(list[0], "10.0.0.1:11");
        assert_eq!(
            list[MAX_DESTINATIONS - 1],
            format!("10.0.0.1:{}", MAX_DESTINATIONS + 10)
        );
        assert_eq!(json["outbound"], MAX_DESTINATIONS as u64 + 10);
    }
}
