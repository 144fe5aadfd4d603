#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for the tests and by hand (issue 20): etcd and kube-apiserver
# built from tools/k8s (the Go module pinning the release), no kubelet, no scheduler, no controllers.
#
#   scripts/cluster.sh build        build etcd, kube-apiserver, kubectl and helm if missing; print the folder
#                                   of the first three, then helm's
#   scripts/cluster.sh up DIR       build if missing, generate certificates, start etcd and kube-apiserver on
#                                   127.0.0.1 (free ports), wait for /readyz, write DIR/kubeconfig, DIR/env
#                                   (KUBECONFIG, KUBECTL, HELM, ...)
#   scripts/cluster.sh down DIR     stop both (pids in DIR) and remove DIR
#
# The binaries are cached per hash of tools/k8s/go.mod, go.sum and the build recipe below, in
# ${SIDECAR_INJECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject}/k8s/<hash>/bin, and helm (the
# chart's tests: lint, template, install) from tools/helm likewise in .../helm/<hash>/bin, so only a
# machine's first run pays for the Go builds (Go's own module and build caches are used as they are).
# With CLUSTER_NO_BUILD set, `up` fails instead of building (the e2e tests: scripts/test.sh builds first).
# With CLUSTER_OWNER_PID set, `up` also leaves a watchdog that runs `down` when that process is gone, so a
# test process that dies without its destructor leaves no server behind.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
# Go's official install location, for environments whose PATH lacks it.
PATH="$PATH:/usr/local/go/bin"
# The caches below (ours and Go's) live under HOME: take it from the user database where it is unset.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
module="$repo/tools/k8s"
# The version the binaries report (kubectl's skew warnings and the apiserver's /version read it); it
# must be the k8s.io/kubernetes version go.mod requires, which build() checks.
k8s_version=v1.35.4
recipe="go build -trimpath ldflags(version=$k8s_version)"

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

cache_base="${SIDECAR_INJECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject}"
k8s_cache="$cache_base/k8s"
# Helm, built from tools/helm (helm.sh/helm/v3 at the release go.mod requires, checked below). Its
# Makefile's ldflags: the version `helm version` prints, and the Kubernetes version `helm template` and
# `helm lint` assume without a cluster (chartutil's and lint's defaults, v1.20 unless set), ours.
helm_module="$repo/tools/helm"
helm_version=v3.20.2
helm_recipe="go build -trimpath ldflags(version=$helm_version,k8s=$k8s_version)"
helm_cache="$cache_base/helm"

# The cache folder of a module's binaries: keyed by its go.mod, go.sum and build recipe.
bin_dir() {
  local module="$1" recipe="$2" cache="$3" hash
  hash="$( (cat "$module/go.mod" "$module/go.sum"; echo "$recipe") | sha256sum | cut -c1-16)"
  echo "$cache/$hash/bin"
}

# Whether every named binary is in the folder.
built() {
  local dir="$1" b
  shift
  for b in "$@"; do
    [ -x "$dir/$b" ] || return 1
  done
}

# go_build WHAT MODULE BIN LDFLAGS NAMES...: builds MODULE's `tool` packages (its go.mod's tool block) into
# the cache folder BIN unless NAMES are all there already, under a lock (two test runs building at once
# would build twice; the second waits and finds the result), and prints BIN. The tools are built in one go
# invocation so that their shared packages compile once and in parallel. A binary named for the path
# element before a major version (go.etcd.io/etcd/server/v3's `server`) is renamed by rename_tools.
go_build() {
  local what="$1" module="$2" bin="$3" ldflags="$4" tmp lock start b
  shift 4
  if built "$bin" "$@"; then
    echo "$bin"
    return
  fi
  [ -z "${CLUSTER_NO_BUILD:-}" ] ||
    die "$what is not built ($bin missing): run \`bash scripts/cluster.sh build\` first (scripts/test.sh does)"
  command -v go >/dev/null || die "building $what needs Go (go.mod: $module/go.mod)"
  mkdir -p "$(dirname "$bin")"
  lock="$(dirname "$(dirname "$bin")")/build.lock"
  exec 9>"$lock"
  flock 9
  if built "$bin" "$@"; then
    exec 9>&-
    echo "$bin"
    return
  fi
  tmp="$(dirname "$bin")/bin.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  start=$(date +%s)
  echo "cluster.sh: building $what into $bin; the first build takes minutes" >&2
  (cd "$module" && go build -mod=readonly -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/" tool) >&2 ||
    die "go build of $what failed"
  rename_tools "$tmp"
  for b in "$@"; do
    [ -x "$tmp/$b" ] || die "go build produced no $b (got: $(ls "$tmp"))"
  done
  rm -rf "$bin"
  mv "$tmp" "$bin"
  exec 9>&-
  echo "cluster.sh: built $what in $(($(date +%s) - start)) s" >&2
  echo "$bin"
}

rename_tools() {
  if [ -x "$1/server" ]; then
    mv "$1/server" "$1/etcd"
  fi
}

# etcd, kube-apiserver and kubectl; prints their folder.
build_k8s() {
  local ldflags pkg
  grep -Eq "^\s*k8s.io/kubernetes $k8s_version( |$)" "$module/go.mod" ||
    die "tools/k8s/go.mod does not require k8s.io/kubernetes $k8s_version (update k8s_version here)"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(echo "$k8s_version" | cut -d. -f2)"
  done
  go_build "etcd, kube-apiserver, kubectl ($k8s_version)" "$module" \
    "$(bin_dir "$module" "$recipe" "$k8s_cache")" "$ldflags" etcd kube-apiserver kubectl
}

# helm; prints its folder.
build_helm() {
  local ldflags minor pkg
  grep -Eq "^\s*helm.sh/helm/v3 $helm_version( |$)" "$helm_module/go.mod" ||
    die "tools/helm/go.mod does not require helm.sh/helm/v3 $helm_version (update helm_version here)"
  minor="$(echo "$k8s_version" | cut -d. -f2)"
  ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
  done
  go_build "helm ($helm_version)" "$helm_module" \
    "$(bin_dir "$helm_module" "$helm_recipe" "$helm_cache")" "$ldflags" helm
}

build() {
  build_k8s
  build_helm
}

# A TCP port no socket uses now, below the kernel's ephemeral range (an outgoing connection's local
# port there would make the bind fail). A race with another process remains; `up` retries on it.
free_port() {
  local p low
  low="$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)"
  for _ in $(seq 1 100); do
    p=$((10000 + RANDOM % (low - 10000)))
    if ! ss -Htan "sport = :$p" | grep -q .; then
      echo "$p"
      return
    fi
  done
  die "no free port found"
}

certs() {
  local pki="$1"
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=sidecar-inject-test-ca" -keyout ca.key -out ca.crt 2>/dev/null
    # kube-apiserver's serving certificate: the address the clients dial and the names in-cluster
    # clients would use.
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=kube-apiserver" \
      -keyout apiserver.key -out apiserver.csr 2>/dev/null
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
      "extendedKeyUsage=serverAuth" "keyUsage=digitalSignature" >apiserver.ext
    openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile apiserver.ext -out apiserver.crt 2>/dev/null
    # cluster-admin: the group system:masters is bound to cluster-admin by the bootstrap RBAC policy.
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/O=system:masters/CN=admin" \
      -keyout admin.key -out admin.csr 2>/dev/null
    printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=digitalSignature" >admin.ext
    openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile admin.ext -out admin.crt 2>/dev/null
    # The service-account token signing key (the apiserver refuses to start without one).
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ./*.csr ./*.ext ca.srl
  ) || die "openssl failed to make the certificates in $pki"
}

# Starts "$@" in its own session (so the caller's job control and signals do not reach it), logging to
# $log, and records its pid in $pidfile.
spawn() {
  local log="$1" pidfile="$2"
  shift 2
  setsid "$@" </dev/null >"$log" 2>&1 &
  echo $! >"$pidfile"
}

alive() {
  [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# Starts etcd and kube-apiserver on fresh ports; sets $server.
start_servers() {
  local dir="$1" bin="$2" etcd_port peer_port api_port
  etcd_port=$(free_port)
  peer_port=$(free_port)
  # etcd on plain HTTP, loopback only: it is reached by the apiserver alone. No fsync: the data is thrown
  # away with DIR.
  spawn "$dir/etcd.log" "$dir/etcd.pid" "$bin/etcd" --name=test --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="test=http://127.0.0.1:$peer_port" --unsafe-no-fsync --log-level=warn \
    --listen-metrics-urls="" --quota-backend-bytes=$((1 << 30))

  api_port=$(free_port)
  server="https://127.0.0.1:$api_port"
  # --enable-aggregator-routing: the webhook (and aggregated API) service resolver then picks an address
  # from the Service's EndpointSlices instead of dialling its cluster IP, which nothing here routes
  # (cmd/kube-apiserver/app/server.go buildServiceResolver; see the README's cluster.sh section).
  # ServiceAccount admission is off: no controller manager creates the `default` ServiceAccount, and the
  # plugin would refuse every pod without one (so pods name their serviceAccountName themselves).
  # The endpoint reconciler of the `kubernetes` Service is off: it would publish 127.0.0.1, which
  # Endpoints validation refuses.
  spawn "$dir/kube-apiserver.log" "$dir/kube-apiserver.pid" "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --service-cluster-ip-range=10.0.0.0/24 \
    --authorization-mode=RBAC \
    --allow-privileged=true \
    --enable-aggregator-routing=true \
    --disable-admission-plugins=ServiceAccount \
    --endpoint-reconciler-type=none \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log" \
    --v=0
}

# Waits for /readyz. Returns 0 when ready, 2 when a server lost a race for its port (the caller retries),
# and dies on anything else.
wait_ready() {
  local dir="$1" deadline p
  deadline=$(($(date +%s) + 60))
  until curl -sf --cacert "$dir/pki/ca.crt" --cert "$dir/pki/admin.crt" --key "$dir/pki/admin.key" \
    "$server/readyz" >/dev/null 2>&1; do
    for p in etcd kube-apiserver; do
      if ! alive "$dir/$p.pid"; then
        if grep -q 'address already in use' "$dir/$p.log"; then
          return 2
        fi
        echo "--- $dir/$p.log (last 30 lines)" >&2
        tail -30 "$dir/$p.log" >&2 || true
        down "$dir" >/dev/null 2>&1 || true
        die "$p exited before the control plane was ready"
      fi
    done
    if [ "$(date +%s)" -gt "$deadline" ]; then
      tail -30 "$dir/kube-apiserver.log" >&2 || true
      down "$dir" >/dev/null 2>&1 || true
      die "kube-apiserver not ready within 60 s"
    fi
    sleep 0.1
  done
}

up() {
  local dir="$1" bin helm_bin start attempt rc server
  start=$(date +%s%N)
  bin="$(build_k8s)"
  helm_bin="$(build_helm)"
  command -v openssl >/dev/null || die "up needs openssl for the certificates"
  command -v curl >/dev/null || die "up needs curl for the readiness probe"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd)"
  [ ! -e "$dir/etcd.pid" ] || die "$dir already holds a control plane (run down first)"
  certs "$dir/pki"
  # Pod creates at Metadata level: their events carry the apiserver's own record of which webhooks it
  # called and whether each mutated (the mutation.webhook.admission.k8s.io/round_<r>_index_<i>
  # annotations), the tests' oracle for routing. The log backend's default mode writes each event before
  # the response.
  cat >"$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: "", resources: [pods]}]
  verbs: [create]
- level: None
EOF

  for attempt in 1 2 3 4 5; do
    start_servers "$dir" "$bin"
    rc=0
    wait_ready "$dir" || rc=$?
    [ "$rc" -eq 2 ] || break
    echo "cluster.sh: a port was taken meanwhile (attempt $attempt); starting again on other ports" >&2
    stop "$dir/kube-apiserver.pid" KILL
    stop "$dir/etcd.pid"
    rm -rf "$dir/etcd"
  done
  [ "$rc" -eq 0 ] || die "no free ports after 5 attempts"

  cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $server
    certificate-authority: $dir/pki/ca.crt
users:
- name: admin
  user:
    client-certificate: $dir/pki/admin.crt
    client-key: $dir/pki/admin.key
contexts:
- name: test
  context:
    cluster: test
    user: admin
current-context: test
EOF
  cat >"$dir/env" <<EOF
KUBECONFIG=$dir/kubeconfig
KUBECTL=$bin/kubectl
HELM=$helm_bin/helm
KUBE_APISERVER=$bin/kube-apiserver
ETCD=$bin/etcd
KUBE_SERVER=$server
KUBE_CA=$dir/pki/ca.crt
KUBE_CLIENT_CERT=$dir/pki/admin.crt
KUBE_CLIENT_KEY=$dir/pki/admin.key
EOF

  if [ -n "${CLUSTER_OWNER_PID:-}" ]; then
    local owner="$CLUSTER_OWNER_PID"
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -e "$2/etcd.pid" ]; do sleep 1; done
      [ -e "$2/etcd.pid" ] && exec bash "$3" down "$2"' watchdog "$owner" "$dir" "$0" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  echo "cluster.sh: $server ready in $((($(date +%s%N) - start) / 1000000)) ms; source $dir/env" >&2
}

# Whether pid runs (a zombie, killed and not yet reaped by whoever inherited it, does not).
running() {
  local state
  state="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}

stop() {
  local pidfile="$1" signal="${2:-TERM}" pid
  [ -f "$pidfile" ] || return 0
  pid="$(cat "$pidfile")"
  if running "$pid"; then
    # Each was started in its own session: signal the group, so that nothing it forked (the watchdog's
    # sleep) outlives it.
    kill "-$signal" -- "-$pid" 2>/dev/null || kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do
      running "$pid" || break
      sleep 0.1
    done
    if running "$pid"; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$pidfile"
}

down() {
  local dir="$1"
  [ -d "$dir" ] || return 0
  [ -e "$dir/etcd.pid" ] || [ -e "$dir/kube-apiserver.pid" ] || [ -e "$dir/kubeconfig" ] ||
    die "$dir does not look like a cluster.sh directory; not removing it"
  # The watchdog, unless it is the caller.
  if [ -f "$dir/watchdog.pid" ] && [ "$(cat "$dir/watchdog.pid")" != "$$" ]; then
    stop "$dir/watchdog.pid"
  fi
  # The apiserver's graceful shutdown drains its watches for seconds; its state lives in etcd, which is
  # thrown away with DIR, so there is nothing to drain for.
  stop "$dir/kube-apiserver.pid" KILL
  stop "$dir/etcd.pid"
  rm -rf "$dir"
}

case "${1:-}" in
  build) build ;;
  up)
    [ $# -eq 2 ] || die "usage: cluster.sh up DIR"
    up "$2"
    ;;
  down)
    [ $# -eq 2 ] || die "usage: cluster.sh down DIR"
    down "$2"
    ;;
  *) die "usage: cluster.sh build | up DIR | down DIR" ;;
esac
