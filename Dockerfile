# syntax=docker/dockerfile:1
# injector: the sidecar-injection webhook (`injector serve`), also `injector certs` and `injector kube-inject`.
#
# Build:  docker build -t ghcr.io/sidecar-inject/injector:0.1.0 .
# Run:    see deploy/ (non-root 65532, read-only root filesystem, all capabilities dropped).

# ---- build: a fully static binary, so the runtime image needs no libc ----
# Static glibc. The webhook's allocations go to mimalloc (the binary's global allocator), so the libc's
# malloc does not matter for speed. The injector resolves no host names, so static glibc's NSS limits
# do not apply.
FROM rust:1-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends file \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --locked --release --target x86_64-unknown-linux-gnu -p injector --bin injector \
 && cp target/x86_64-unknown-linux-gnu/release/injector /injector \
 && file /injector | grep -Eq 'statically linked|static-pie linked' \
 && /injector --version
# The runtime stage has no shell to make its users: distroless/static's /etc/passwd and /etc/group
# (root, nobody, nonroot 65532), made here and copied.
RUN printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' 'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
      'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' > /passwd \
 && printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'nonroot:x:65532:' > /group \
 && chmod 0644 /passwd /group

# ---- runtime: the binary and the users of distroless/static, non-root ----
# FROM scratch with what gcr.io/distroless/static-debian12:nonroot gave the injector: /etc/passwd and
# /etc/group with nonroot (65532) and the user 65532:65532. Its CA bundle is left out: the webhook reaches
# the API server only with --in-cluster, whose trust is the service account's ca.crt (kube-rs adds only
# that root), and it makes no other TLS connection; tzdata is unused too (it logs in UTC). The image can
# then be built where no registry is reachable (scripts/images.sh).
FROM scratch
LABEL org.opencontainers.image.title="injector" \
      org.opencontainers.image.description="sidecar-inject's sidecar-injection webhook"
COPY --from=build /passwd /etc/passwd
COPY --from=build /group /etc/group
COPY --from=build /injector /usr/local/bin/injector
USER 65532:65532
# mimalloc gives freed pages back at once, so RSS follows a burst of large bodies back down (README,
# "what fits in the Deployment's 128 Mi"); the Deployment sets the same, for images built elsewhere.
ENV MIMALLOC_ARENA_EAGER_COMMIT=0 MIMALLOC_PURGE_DELAY=0
# 15017: HTTPS webhook; 15014: plain-HTTP /metrics, /healthz, /readyz.
EXPOSE 15017 15014
ENTRYPOINT ["/usr/local/bin/injector"]
CMD ["serve", "--config-dir=/etc/istio/inject", "--tls-cert=/etc/sidecar-injector/tls/tls.crt", "--tls-key=/etc/sidecar-injector/tls/tls.key"]
