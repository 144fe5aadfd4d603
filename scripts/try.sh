#!/usr/bin/env bash
# Try the whole product on this machine in one command: a local cluster with one node
# (scripts/cluster.sh), the project's images built and imported into it (scripts/images.sh), both charts
# installed with helm as a user installs them, examples/hello.yaml deployed into a namespace labelled for
# injection, requests sent from one hello pod to the hello Service until the other pod answers, and what
# came of it printed: the injected pod's containers and each proxy's counters. `testproxy` (Dockerfile.testproxy) stands in for
# Envoy as `istio-proxy` and is the hello app too.
#
#   bash scripts/try.sh [--cni] [DIR]      DIR: the cluster's folder (default /tmp/sidecar-inject-try)
#   bash scripts/cluster.sh down DIR       takes it all down again
#
# --cni: the injector in CNI mode (its chart's cni.enabled): istio-cni programs the pods and they get the
# unprivileged istio-validation instead of istio-init.
#
# Root only (the node's namespaces, containerd, the images' root-owned files); needs Rust (cargo, rustup)
# and Go. The first run builds Kubernetes and helm from tools/ with Go, a Debian root file system and the
# release binaries (many minutes); later runs reuse them. Missing Debian packages are installed with
# apt-get. Build and install output goes to DIR.log.
set -euo pipefail
cd "$(dirname "$0")/.."

cni=false
if [ "${1:-}" = "--cni" ]; then
  cni=true
  shift
fi
dir="${1:-/tmp/sidecar-inject-try}"
[ $# -le 1 ] || { echo "usage: scripts/try.sh [--cni] [DIR]" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "try.sh: needs root (the node's namespaces and containerd)" >&2; exit 1; }
[ ! -e "$dir" ] || { echo "try.sh: $dir exists; take it down first: bash scripts/cluster.sh down $dir" >&2; exit 1; }
log="$dir.log"
: >"$log"
t0=$SECONDS
say() { printf '[%4ss] %s\n' "$((SECONDS - t0))" "$*"; }
# run WHAT CMD...: CMD with its output in the log; the log's tail when it fails.
run() {
  local what="$1"
  shift
  if ! "$@" >>"$log" 2>&1; then
    tail -30 "$log" >&2
    echo "try.sh: $what failed (the whole log: $log)" >&2
    exit 1
  fi
}

for tool in cargo rustup; do
  command -v "$tool" >/dev/null || { echo "try.sh: $tool not found: the images' binaries are built with Rust (https://rustup.rs)" >&2; exit 1; }
done
command -v go >/dev/null || [ -x /usr/local/go/bin/go ] ||
  { echo "try.sh: go not found: Kubernetes and helm are built from tools/ with Go (https://go.dev/dl)" >&2; exit 1; }

need=()
for c in containerd:containerd runc:runc ctr:containerd nsenter:util-linux ip:iproute2 nft:nftables \
  iptables:iptables openssl:openssl curl:curl gcc:gcc debootstrap:debootstrap musl-gcc:musl-tools \
  file:file python3:python3 column:bsdextrautils; do
  command -v "${c%%:*}" >/dev/null || need+=("${c#*:}")
done
[ -e /usr/lib/x86_64-linux-gnu/libc.a ] || [ -e /usr/lib/aarch64-linux-gnu/libc.a ] || need+=(libc6-dev)
if [ ${#need[@]} -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  run "apt-get install" apt-get update -qq
  run "apt-get install" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
fi
rustup target list --installed 2>/dev/null | grep -q x86_64-unknown-linux-musl ||
  run "rustup target add" rustup target add x86_64-unknown-linux-musl

say "building the images (scripts/images.sh build; the first time takes many minutes)"
run "scripts/images.sh build" bash scripts/images.sh build injector iptables-init istio-cni testproxy
images="${IMAGES_OUT:-target/images}/images.env"
hub="$(sed -n 's/^HUB=//p' "$images")"
tag="$(sed -n 's/^TAG=//p' "$images")"
# `injector certs` from the very binary the injector image holds (Dockerfile's build stage).
injector=target/x86_64-unknown-linux-gnu/release/injector

say "building Kubernetes and helm (scripts/cluster.sh build; cached after the first time)"
run "scripts/cluster.sh build" bash scripts/cluster.sh build
say "starting a cluster with one node in $dir (scripts/cluster.sh up)"
run "scripts/cluster.sh up" bash scripts/cluster.sh up "$dir" --nodes 1
# shellcheck disable=SC1091
. "$dir/env"
export KUBECONFIG
run "scripts/images.sh load" bash scripts/images.sh load "$dir" injector iptables-init istio-cni testproxy
k() { "$KUBECTL" "$@"; }

say "helm install istio-cni charts/istio-cni"
run "helm install istio-cni" "$HELM" install istio-cni charts/istio-cni -n istio-system --create-namespace \
  --set global.hub="$hub" --set global.tag="$tag" --wait
say "helm install sidecar-injector charts/sidecar-injector$($cni && echo ' (cni.enabled=true)')"
run "injector certs" "$injector" certs --out-dir "$dir/certs"
run "helm install sidecar-injector" "$HELM" install sidecar-injector charts/sidecar-injector \
  -n sidecar-injector --create-namespace \
  --set hub="$hub" --set tag="$tag" --set global.hub="$hub" --set global.tag="$tag" \
  --set global.proxy.image=testproxy --set global.proxy_init.image="$hub/iptables-init:$tag" \
  --set cni.enabled="$cni" \
  --set-file tls.cert="$dir/certs/tls.crt" --set-file tls.key="$dir/certs/tls.key" \
  --set-file tls.caBundle="$dir/certs/ca.crt" --wait

say "kubectl apply -f examples/hello.yaml (namespace demo, labelled istio-injection=enabled)"
run "kubectl create namespace" k create namespace demo
run "kubectl label namespace" k label namespace demo istio-injection=enabled
# The injected pods mount the mesh's root certificate from the ConfigMap istio-ca-root-cert, which istiod
# publishes into every namespace (pilot/pkg/serviceregistry/kube/controller/namespacecontroller.go,
# NamespaceController); there is no istiod here, so it holds the cluster's CA. The pods cannot start
# without it.
run "kubectl create configmap" k -n demo create configmap istio-ca-root-cert --from-file=root-cert.pem="$dir/pki/ca.crt"
run "kubectl apply" k apply -f examples/hello.yaml
run "kubectl rollout status" k -n demo rollout status deployment/hello --timeout=180s
# Both pods behind the Service (the EndpointSlice follows readiness a moment later), and in kube-proxy's
# rules on the node (its `table ip kube-proxy`: one endpoint chain per pod), which follow the
# EndpointSlice a few seconds later.
run "kubectl wait endpointslice" k -n demo wait endpointslice -l kubernetes.io/service-name=hello \
  --for=jsonpath='{.endpoints[1].conditions.ready}'=true --timeout=60s
for i in $(seq 1 120); do
  n="$(nsenter -t "$NODE1_PID" -n nft list table ip kube-proxy 2>/dev/null | grep -c 'chain endpoint-.*-demo/hello/tcp/http__' || true)"
  [ "$n" -ge 2 ] && break
  [ "$i" -lt 120 ] || { echo "try.sh: kube-proxy on node1 has $n of 2 hello endpoints after 60 s (log: $NODE1_KUBE_PROXY_LOG)" >&2; exit 1; }
  sleep 0.5
done

read -r -a pods <<<"$(k -n demo get pods -l app=hello -o jsonpath='{.items[*].metadata.name}')"
svc="$(k -n demo get service hello -o jsonpath='{.spec.clusterIP}')"
# Requests from the first hello pod to the hello Service (kube-proxy picks either pod) until the other
# pod answers, so both proxies have something to count: the client's outbound, the server's inbound.
for _ in $(seq 1 10); do
  echo
  echo "\$ kubectl -n demo exec ${pods[0]} -c hello -- testproxy get http://$svc/    # the hello Service"
  answer="$(k -n demo exec "${pods[0]}" -c hello -- testproxy get "http://$svc/")"
  echo "$answer"
  [ "$answer" = "${pods[0]}" ] || break
done
echo
echo "\$ kubectl -n demo get pod ${pods[0]}    # its containers"
k -n demo get pod "${pods[0]}" -o go-template='{{range .status.initContainerStatuses}}init  {{.name}}	{{.image}}	{{range $k, $v := .state}}{{$k}}{{if $v.exitCode}} exit {{$v.exitCode}}{{else if eq $k "terminated"}} exit 0{{end}}{{end}}
{{end}}{{range .status.containerStatuses}}      {{.name}}	{{.image}}	{{range $k, $v := .state}}{{$k}}{{end}}
{{end}}' | column -t -s $'\t'
for p in "${pods[@]}"; do
  echo
  echo "\$ kubectl -n demo exec $p -c istio-proxy -- testproxy request GET stats    # the proxy's counters"
  k -n demo exec "$p" -c istio-proxy -- testproxy request GET stats
  echo
done
echo
say "done. The cluster keeps running: . $dir/env && export KUBECONFIG && \$KUBECTL get pods -A"
echo "Take it down: bash scripts/cluster.sh down $dir"
