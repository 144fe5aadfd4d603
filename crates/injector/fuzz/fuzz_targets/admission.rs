//! Fuzz target over the webhook's request handler: arbitrary bytes as the AdmissionReview body and as
//! the URL path parameters (everything the network controls once TLS and HTTP framing are done).
//!
//! Input layout: bytes before the first NUL are a path suffix (`/inject/<suffix>`, percent-decoded as the
//! server does), the rest is the body; without a NUL, the whole input is the body sent to `/inject`.
//! Invariants beyond "no panic, no hang": the answer is JSON with a boolean `response.allowed`, a
//! patch, when present, is base64 of a JSON array, and the same input answered four times gets the same
//! bytes each time (the webhook's patch cache stores an injected pod's patch on its second sighting and
//! answers from the third on).
#![no_main]

use std::sync::OnceLock;

use base64::Engine as _;
use injector::Webhook;
use inject::{ConfigArgs, Engine, Settings};
use libfuzzer_sys::fuzz_target;

static ENGINE: OnceLock<Engine> = OnceLock::new();
static WEBHOOK: OnceLock<Webhook> = OnceLock::new();

fn engine() -> &'static Engine {
    ENGINE.get_or_init(|| {
        // The built-in (Istio chart default) configuration, optionally overridden like the server.
        let mut args = ConfigArgs::default();
        args.config_dir = std::env::var_os("FUZZ_CONFIG_DIR").map(Into::into);
        Engine::new(Settings::load(&args).expect("fuzz configuration loads"))
    })
}

fuzz_target!(|data: &[u8]| {
    let (path, body) = match data.iter().position(|&b| b == 0) {
        Some(i) => (
            format!("/inject/{}", String::from_utf8_lossy(&data[..i])),
            &data[i + 1..],
        ),
        None => ("/inject".to_string(), data),
    };
    let path = injector::serve::percent_decode(&path);
    let webhook = WEBHOOK.get_or_init(|| Webhook::new(Default::default()));
    let out = webhook.handle(engine(), 0, body, &path);
    for _ in 0..3 {
        let again = webhook.handle(engine(), 0, body, &path);
        assert!(
            again.response == out.response,
            "a repeated review got another answer:\n{}\n{}",
            String::from_utf8_lossy(&out.response),
            String::from_utf8_lossy(&again.response)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.response).expect("the answer is JSON");
    assert!(
        v["response"]["allowed"].is_boolean(),
        "no response.allowed in {v}"
    );
    if let Some(p) = v["response"]["patch"].as_str() {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p)
            .expect("patch is base64");
        let patch: serde_json::Value = serde_json::from_slice(&bytes).expect("patch is JSON");
        assert!(patch.is_array(), "patch is not a JSON array");
    }
});
