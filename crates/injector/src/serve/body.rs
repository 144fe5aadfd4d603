//! Reading a request's body within its size limit, its timeout and the global budget of body bytes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::body::{Body, Incoming};

use super::limits::{BodyBudget, Reservation, MAX_DRAIN_BYTES};

/// Why a body could not be read.
pub(super) enum BodyError {
    TooLarge,
    TimedOut,
    /// The global budget of body bytes in flight (`--max-body-bytes-in-flight`) would be passed.
    OverBudget,
    Broken(String),
}

/// Reads the body up to `limit` bytes within `timeout`, holding its bytes in `budget`: a declared length
/// is reserved (and allocated) up front, a body of unknown length (chunked, or HTTP/2 without the header)
/// as its buffer grows. An oversized body is drained (bounded, not kept) so that the client, still
/// writing, reads the 400 rather than a reset.
pub(super) async fn read_body(
    mut body: Incoming,
    limit: usize,
    timeout: Duration,
    budget: &Arc<BodyBudget>,
) -> Result<(Bytes, Reservation), BodyError> {
    let declared = body.size_hint().exact();
    let deadline = tokio::time::Instant::now() + timeout;
    let oversized = declared.is_some_and(|n| n > limit as u64);
    let initial = match declared {
        Some(n) if !oversized => n as usize,
        _ => 0,
    };
    let mut reservation = budget.reserve(initial).ok_or(BodyError::OverBudget)?;
    let mut buf = BytesMut::with_capacity(initial);
    let mut seen = 0usize;
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return Err(BodyError::TimedOut),
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(BodyError::Broken(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            seen = seen.saturating_add(data.len());
            if seen > limit || oversized {
                if seen > MAX_DRAIN_BYTES {
                    return Err(BodyError::TooLarge);
                }
                buf = BytesMut::new();
                continue;
            }
            if seen > buf.capacity() {
                // Unknown length: grow by doubling (at most to the limit), reserving before allocating.
                let want = seen.max(buf.capacity().saturating_mul(2)).min(limit);
                if !reservation.grow_to(want) {
                    return Err(BodyError::OverBudget);
                }
                buf.reserve(want - buf.len());
            }
            buf.extend_from_slice(&data);
        }
    }
    if seen > limit || oversized {
        return Err(BodyError::TooLarge);
    }
    Ok((buf.freeze(), reservation))
}
