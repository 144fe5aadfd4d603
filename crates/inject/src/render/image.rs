//! Proxy image names (`ProxyImage` / `ProxyInitImage` in Istio's `inject.go`, and the `image` of both
//! containers in its `injection-template.yaml`).

use std::borrow::Cow;

/// Tag with the image type applied: a trailing `-distroless`/`-debug` is removed first; type `default`
/// means the plain tag; any other non-empty type is appended as `-<type>`. An empty type keeps the tag.
pub(crate) fn tag_with_type<'a>(tag: &'a str, image_type: &str) -> Cow<'a, str> {
    if image_type.is_empty() {
        return Cow::Borrowed(tag);
    }
    let base = tag
        .strip_suffix("-distroless")
        .or_else(|| tag.strip_suffix("-debug"))
        .unwrap_or(tag);
    if image_type == "default" {
        Cow::Borrowed(base)
    } else {
        Cow::Owned(format!("{base}-{image_type}"))
    }
}

/// `<hub>/<name>:<tag[-type]>`.
pub(crate) fn image_url(hub: &str, name: &str, tag: &str, image_type: &str) -> String {
    format!("{hub}/{name}:{}", tag_with_type(tag, image_type))
}

/// The image a container gets: `requested` (the `sidecar.istio.io/proxyImage` annotation, else the values
/// image name) is used verbatim when it names a repository (contains `/`), else the computed image.
pub(crate) fn choose<'a>(requested: &'a str, computed: impl FnOnce() -> String) -> Cow<'a, str> {
    if requested.contains('/') {
        Cow::Borrowed(requested)
    } else {
        Cow::Owned(computed())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn image_types_as_istio_test_proxy_image() {
        assert_eq!(tag_with_type("1.12-debug", "distroless"), "1.12-distroless");
        assert_eq!(
            tag_with_type("1.11.2-asm.17-distroless", "default"),
            "1.11.2-asm.17"
        );
        assert_eq!(
            tag_with_type("1.12-this-is-unusual-tag", "distroless"),
            "1.12-this-is-unusual-tag-distroless"
        );
        assert_eq!(tag_with_type("1.12-debug", ""), "1.12-debug");
        assert_eq!(tag_with_type("11", "debug"), "11-debug");
        assert_eq!(
            image_url("registry.istio.io/testing", "proxyv2", "latest", ""),
            "registry.istio.io/testing/proxyv2:latest"
        );
    }

    #[test]
    fn verbatim_only_with_slash() {
        assert_eq!(choose("a/b:c", || "x".into()), "a/b:c");
        assert_eq!(
            choose("proxyTest", || "hub/proxyTest:t".into()),
            "hub/proxyTest:t"
        );
    }
}
