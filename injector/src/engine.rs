//! The injection engine shared by the webhook and `kube-inject`. (Contract only; the engine engineer
//! fills it in.)

use crate::config::Settings;

/// A loaded engine: configuration parsed and everything that does not depend on the pod precomputed.
/// Cheap to share (`Arc<Engine>`); replaced whole on configuration reload.
#[derive(Debug)]
pub struct Engine {
    pub settings: Settings,
}

impl Engine {
    /// Builds an engine from loaded settings.
    pub fn new(settings: Settings) -> Engine {
        Engine { settings }
    }
}
