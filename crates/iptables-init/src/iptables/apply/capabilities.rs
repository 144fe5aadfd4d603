//! The capabilities an apply needs, checked before anything is touched.

use super::error::ApplyError;

/// Stops with the missing capability names unless both are in the effective set.
pub(super) fn check_capabilities() -> Result<(), ApplyError> {
    use caps::{CapSet, Capability};
    let mut missing = Vec::new();
    for cap in [Capability::CAP_NET_ADMIN, Capability::CAP_NET_RAW] {
        match caps::has_cap(None, CapSet::Effective, cap) {
            Ok(true) => {}
            Ok(false) => missing.push(cap.to_string()),
            Err(e) => return Err(ApplyError::Capabilities(e.to_string())),
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(ApplyError::MissingCapabilities { missing })
    }
}
