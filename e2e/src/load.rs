//! Tests that load the machine on purpose (a flood of thousands of objects) and tests whose assertions
//! are wall-clock bounds of about a second must not overlap: the flood takes both cores of a small CI
//! machine, and a one-second bound measured beside it measures the flood, not the injector. A load test
//! holds [`alone`] for its whole run, a timed test holds [`timed`]; timed tests still run beside each
//! other and beside everything else.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static LOAD: RwLock<()> = RwLock::new(());

/// Held by a test that loads the machine: no [`timed`] test runs while it is held.
pub fn alone() -> RwLockWriteGuard<'static, ()> {
    // A poisoned lock only means another test failed while holding it; the exclusion still holds.
    LOAD.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by a test that asserts a wall-clock bound of about a second: it waits for a running load test.
pub fn timed() -> RwLockReadGuard<'static, ()> {
    LOAD.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}
