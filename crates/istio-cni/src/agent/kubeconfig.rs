//! The kubeconfig the plugin reads the API server with: the agent's service-account token and CA, and
//! the API server's address, in the layout Istio's `cni/pkg/install/kubeconfig.go` `createKubeConfig`
//! writes (client-go's v1 `Config` through `sigs.k8s.io/yaml`: keys sorted, names `local`, `istio-cni`
//! and `istio-cni-context`).

use std::path::{Path, PathBuf};

use base64::Engine as _;

/// What the kubeconfig is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The API server's URL, `https://host:port`.
    pub server: String,
    /// The service-account folder holding `token` (and `ca.crt`).
    pub service_account_dir: PathBuf,
    /// The CA file; `<service_account_dir>/ca.crt` when unset (Istio's `KUBE_CA_FILE`).
    pub ca_file: Option<PathBuf>,
    /// Trust any server certificate instead (Istio's `SKIP_TLS_VERIFY`).
    pub skip_tls_verify: bool,
}

/// Why the kubeconfig cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigError {
    /// The token or the CA cannot be read.
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Source {
    fn ca_path(&self) -> PathBuf {
        self.ca_file
            .clone()
            .unwrap_or_else(|| self.service_account_dir.join("ca.crt"))
    }

    /// The files the kubeconfig is made from, which the agent watches for a rotated token or CA.
    pub fn inputs(&self) -> Vec<PathBuf> {
        let mut files = vec![self.service_account_dir.join("token")];
        if !self.skip_tls_verify {
            files.push(self.ca_path());
        }
        files
    }

    /// Reads the token and the CA and renders the kubeconfig.
    pub fn render(&self) -> Result<String, KubeconfigError> {
        let read = |path: PathBuf| {
            super::bounded_read::read(&path, super::bounded_read::Links::Follow)
                .map_err(|source| KubeconfigError::Read { path, source })
        };
        let ca = if self.skip_tls_verify {
            None
        } else {
            Some(read(self.ca_path())?)
        };
        let token = read(self.service_account_dir.join("token"))?;
        Ok(render(
            &self.server,
            ca.as_deref(),
            &String::from_utf8_lossy(&token),
        ))
    }
}

/// A YAML scalar: plain when it cannot be read as anything else, double-quoted (JSON's escaping, which
/// YAML reads alike) otherwise, as `sigs.k8s.io/yaml` quotes a string only when it must.
fn scalar(s: &str) -> String {
    let plain = s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-/:+=".contains(c))
        && !s.contains(": ")
        && !["true", "false", "null", "yes", "no", "on", "off"]
            .contains(&s.to_ascii_lowercase().as_str())
        && s.parse::<f64>().is_err();
    if plain {
        s.to_string()
    } else {
        serde_json::Value::String(s.to_string()).to_string()
    }
}

/// The kubeconfig's text: one cluster `local` (the CA inline as `certificate-authority-data`, or
/// `insecure-skip-tls-verify`), one user `istio-cni` with the token, one context.
pub fn render(server: &str, ca: Option<&[u8]>, token: &str) -> String {
    let trust = match ca {
        Some(ca) => format!(
            "certificate-authority-data: {}",
            base64::engine::general_purpose::STANDARD.encode(ca)
        ),
        None => "insecure-skip-tls-verify: true".to_string(),
    };
    format!(
        "apiVersion: v1\n\
         clusters:\n\
         - cluster:\n    {trust}\n    server: {server}\n  name: local\n\
         contexts:\n\
         - context:\n    cluster: local\n    user: istio-cni\n  name: istio-cni-context\n\
         current-context: istio-cni-context\n\
         kind: Config\n\
         preferences: {{}}\n\
         users:\n\
         - name: istio-cni\n  user:\n    token: {token}\n",
        server = scalar(server),
        token = scalar(token),
    )
}

/// The kubeconfig's path in the run dir (the plugin's `conf::KUBECONFIG_NAME`).
pub fn path_in(run_dir: &Path) -> PathBuf {
    run_dir.join(crate::plugin::conf::KUBECONFIG_NAME)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_istio_s() {
        let text = render("https://10.96.0.1:443", Some(b"CA"), "eyJhbGciOi.x_y-z");
        assert_eq!(
            text,
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: Q0E=\n    \
             server: https://10.96.0.1:443\n  name: local\ncontexts:\n- context:\n    cluster: local\n    \
             user: istio-cni\n  name: istio-cni-context\ncurrent-context: istio-cni-context\nkind: Config\n\
             preferences: {}\nusers:\n- name: istio-cni\n  user:\n    token: eyJhbGciOi.x_y-z\n"
        );
    }

    #[test]
    fn odd_values_are_quoted_and_skip_tls_is_written() {
        let text = render("https://[fd00::1]:6443", None, "tok\n");
        assert!(
            text.contains("server: \"https://[fd00::1]:6443\"\n"),
            "{text}"
        );
        assert!(text.contains("token: \"tok\\n\"\n"), "{text}");
        assert!(text.contains("insecure-skip-tls-verify: true\n"), "{text}");
    }

    #[test]
    fn a_missing_token_is_named() {
        let source = Source {
            server: "https://a:1".into(),
            service_account_dir: PathBuf::from("/nonexistent-sa"),
            ca_file: None,
            skip_tls_verify: true,
        };
        let e = source.render().unwrap_err().to_string();
        assert!(e.starts_with("reading /nonexistent-sa/token: "), "{e}");
    }
}
