//! User templates from the injector config's `templates` (and `values.sidecarInjectorWebhook.templates`):
//! the public user-template cases of `cases-templates.json` in both modes, and refusal at load in
//! kube-inject.

use std::process::Command;

use serde_json::Value;
use test_support::corpus::Case;

use crate::parity::{case_args, run_kube_inject, run_webhook, template_cases, TempDir};

/// The cases of `cases-templates.json` that exercise user templates.
fn user_template_cases() -> Vec<Case> {
    let cases: Vec<Case> = template_cases()
        .into_iter()
        .filter(|c| c.feature == "templates/user")
        .collect();
    let names: Vec<&str> = cases.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["custom-template", "sidecar-spire"]);
    cases
}

#[test]
fn user_template_cases_match_istio_in_both_modes() {
    for case in user_template_cases() {
        assert!(case.runs_in("kube-inject") && case.runs_in("webhook"));
        if let Err(e) = run_kube_inject(&case) {
            panic!("{} (kube-inject): {e}", case.name);
        }
        if let Err(e) = run_webhook(&case) {
            panic!("{} (webhook): {e}", case.name);
        }
    }
}

#[test]
fn kube_inject_refuses_an_unsupported_construct_naming_file_template_line_and_construct() {
    let mut case = user_template_cases().remove(0);
    case.values = Value::Null;
    case.injector_config = serde_json::json!({"templates": {
        "bad": "spec:\n  containers:\n  - name: {{ include \"name\" . }}\n"
    }});
    let dir = TempDir::new("user-template-refused");
    let args = case_args(&case, dir.path()).expect("args");
    let config = args.injector_config.expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_injector"))
        .arg("kube-inject")
        .arg("--valuesFile")
        .arg(args.values.expect("values"))
        .arg("--meshConfigFile")
        .arg(args.mesh_config.expect("mesh"))
        .arg("--injectConfigFile")
        .arg(&config)
        .arg("-f")
        .arg(test_support::corpus::inject_dir().join("hello.yaml"))
        .env_remove("ENABLE_NATIVE_SIDECARS")
        .output()
        .expect("run injector");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "kube-inject accepted it: {stderr}");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    for want in [
        config.display().to_string().as_str(),
        "templates.bad",
        "template \"bad\"",
        "line 3",
        "unsupported function \"include\"",
    ] {
        assert!(stderr.contains(want), "{want:?} not in {stderr}");
    }
}
