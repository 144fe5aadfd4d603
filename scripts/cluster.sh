#!/usr/bin/env bash
# A real Kubernetes cluster on this machine for the tests and by hand, built from tools/k8s
# (the Go module pinning the release): etcd and kube-apiserver alone, or a whole cluster with nodes.
#
#   scripts/cluster.sh build                 build what is missing; print the folder of etcd, kube-apiserver
#                                            and kubectl, then helm's, then the nodes' (kubelet, kube-proxy,
#                                            kube-scheduler, kube-controller-manager and pause.tar)
#   scripts/cluster.sh up DIR [--nodes N]    start a cluster in DIR (below), wait until it is ready, write
#                                            DIR/kubeconfig and DIR/env
#   scripts/cluster.sh down DIR              stop everything `up` started, undo what it changed, remove DIR
#
# --nodes 0 (the default): etcd and kube-apiserver on 127.0.0.1 (free ports), nothing else, as the webhook
# tests need; ServiceAccount admission is off there (no controller creates the `default` ServiceAccount it
# requires, so pods name `serviceAccountName` themselves) and so is the `kubernetes` Service's endpoint
# reconciler (it would publish 127.0.0.1, which Endpoints validation refuses).
#
# --nodes N > 0 (root only): a real cluster's control plane and N nodes. The apiserver runs with the default
# admission chain plus NodeRestriction (ServiceAccount admission included) and Node,RBAC authorization;
# kube-controller-manager (all default controllers: service accounts and their tokens, EndpointSlices,
# node lifecycle, ...) and kube-scheduler run beside it, each with its own client certificate. Each node
# is what kind's node containers are, without a container engine:
#   - a network namespace, joined by a veth pair (`eth0` inside) to a bridge of the cluster's on the host;
#   - a mount namespace (`unshare --mount --propagation private`, then made rshared inside, as a node's root
#     is) in which the node has its own /run, /var/lib, /var/log and /opt (folders under DIR/nodeI/root
#     bound there), and /etc is an overlay of the host's /etc with its /etc/cni bound from DIR too. So the
#     standard paths work unchanged on every node: /opt/cni/bin and /etc/cni/net.d (the istio-cni chart's
#     hostPath defaults), /var/lib/kubelet, /var/lib/containerd, /run/containerd/containerd.sock,
#     /var/run/netns, /var/log/pods; the host's own folders are never written;
#   - a UTS namespace with the node's name as hostname;
#   - a holder process (`sleep infinity`, pid in DIR/nodeI/holder.pid) that keeps the namespaces, and in
#     them the node's containerd (Debian's, with Debian's runc), kubelet and kube-proxy (nftables mode).
# Why a network namespace per node: kubelet and kube-proxy program netfilter (KUBE-FIREWALL, kube-proxy's
# `table ip kube-proxy`) and need ip_forward; two nodes (or two clusters) in one network namespace would
# program the same tables and bind the same ports (10250, 10248, 10249, 10256). Inside its own namespace
# each node has all of that to itself, and the host's network namespace gets only the cluster's bridge,
# one veth end per node and one route per node's pod subnet (the apiserver dials pods for webhooks behind
# Services, with --enable-aggregator-routing, and kubelets at their node IPs). No netfilter rule and no
# sysctl of the host is changed: the kubelet's kernel tunables (vm.overcommit_memory, kernel.panic, ...;
# it would set kernel.panic_on_oops=1 on a shared machine) are files bound over /proc/sys/... inside the
# node's mount namespace holding the values it wants. `up` records the host's values anyway, and `down`
# checks and restores them.
# The nodes' cgroups live under one cgroup root per node (/sik<slot>-node<i>, in every hierarchy).
#
# Per cluster, a slot number K (0-31) is claimed atomically by creating the host bridge sik<K>; it keeps
# concurrent clusters apart: node network 10.250.K.0/24 (host 10.250.K.1, node i 10.250.K.(10+i)), pods
# 10.(200+K).0.0/16 (node i: 10.(200+K).i.0/24, the bridge CNI plugin with host-local IPAM, bridge `cni0`
# inside the node), Services 10.96.K.0/24, veths sik<K>n<i>, cgroup roots /sik<K>-node<i>. The apiserver
# listens on 10.250.K.1 (nodes and pods reach it there; in pods, the `kubernetes` Service leads to it) and
# etcd on 127.0.0.1, both on free ports; the controller manager and the scheduler serve no port.
# Pods can use the image registry.k8s.io/pause:3.10.2 (the sandbox image, built here from k8s.io/kubernetes'
# build/pause/linux/pause.c and imported into every node); no image is ever pulled.
#
# DIR/env (KEY=VALUE lines; `source` it in bash):
#   KUBECONFIG, KUBECTL, HELM          cluster-admin kubeconfig; kubectl and helm binaries
#   KUBE_SERVER, KUBE_CA, KUBE_CLIENT_CERT, KUBE_CLIENT_KEY   the apiserver URL, CA and admin certificate
#   KUBE_APISERVER, ETCD               the binaries
#   NODES                              the number of nodes (0: apiserver only)
# and with nodes:
#   NODE_NAMES                         "node1 node2 ..." (quoted)
#   POD_CIDR, SERVICE_CIDR             the cluster's pod and Service ranges
#   PAUSE_IMAGE                        registry.k8s.io/pause:3.10.2, present on every node
#   BRIDGE                             the host bridge of the node network
#   KUBELET, KUBE_PROXY, KUBE_SCHEDULER, KUBE_CONTROLLER_MANAGER   the binaries
#   and per node i (1..N), NODE<i>_...:
#     NAME          node<i> (the Node's name and the node's hostname)
#     IP            its InternalIP on the node network
#     POD_CIDR      its pod subnet
#     PID           the holder's pid: `nsenter -t $NODE1_PID -m -n -u CMD` runs CMD on the node
#     CONTAINERD_SOCK   the node's containerd socket, as a host path
#     CTR           "ctr -a <socket> -n k8s.io" (quoted): `$NODE1_CTR images import FILE` loads an image
#     CNI_BIN_DIR, CNI_CONF_DIR   the host folders the node sees at /opt/cni/bin and /etc/cni/net.d
#     KUBELET_LOG, CONTAINERD_LOG, KUBE_PROXY_LOG   log files
#     ROOT          the host folder behind the node's private /run, /var/lib, /var/log, /opt, /etc/cni
#
# The binaries are cached per hash of tools/k8s/go.mod, go.sum and the build recipe below, in
# ${SIDECAR_INJECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject}/k8s/<hash>/bin (etcd,
# kube-apiserver, kubectl) and .../k8s-node/<hash>/bin (kubelet, kube-proxy, kube-scheduler,
# kube-controller-manager, pause.tar), and helm (the chart's tests: lint, template, install) from tools/helm
# likewise in .../helm/<hash>/bin, so only a machine's first run pays for the Go builds (Go's own module
# and build caches are used as they are). The node binaries are a cache entry of their own, built by `up`
# only when it starts nodes: an apiserver-only run never waits for the kubelet's build (minutes);
# `build` builds all three (scripts/test.sh runs it before the tests).
# With CLUSTER_NO_BUILD set, `up` fails instead of building (the e2e tests: scripts/test.sh builds first).
# CLUSTER_APISERVER_EXTRA_ARGS (words split on blanks) are appended to kube-apiserver's flags, e.g.
# `--runtime-config=admissionregistration.k8s.io/v1beta1=true` (a beta API, off by default).
# With CLUSTER_OWNER_PID set, `up` also leaves a watchdog that runs `down` when that process is gone, so a
# test process that dies without its destructor leaves no cluster behind.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
self="$repo/scripts/cluster.sh"
# Go's official install location, for environments whose PATH lacks it.
PATH="$PATH:/usr/local/go/bin"
# The caches below (ours and Go's) live under HOME: take it from the user database where it is unset.
: "${HOME:=$(getent passwd "$(id -u)" | cut -d: -f6)}"
export HOME
module="$repo/tools/k8s"
# The version the binaries report (kubectl's skew warnings and the apiserver's /version read it); it
# must be the k8s.io/kubernetes version go.mod requires, which build() checks.
k8s_version=v1.36.3
recipe="go build -trimpath ldflags(version=$k8s_version)"
# The pause image's tag: build/pause/Makefile's TAG and kubeadm's PauseVersion at this release.
pause_tag=3.10.2
pause_image_name="registry.k8s.io/pause:$pause_tag"
node_recipe="node: $recipe; pause $pause_tag: gcc -Os -static, docker-archive v1"
# The most nodes a cluster may have (addresses 10.250.K.11-26) and the number of cluster slots.
max_nodes=16
slots=32

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}

cache_base="${SIDECAR_INJECT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sidecar-inject}"
k8s_cache="$cache_base/k8s"
node_cache="$cache_base/k8s-node"
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

# Whether every named file is in the folder (and executable, but for archives).
built() {
  local dir="$1" b
  shift
  for b in "$@"; do
    case "$b" in
      *.tar) [ -f "$dir/$b" ] || return 1 ;;
      *) [ -x "$dir/$b" ] || return 1 ;;
    esac
  done
}

# go_build WHAT MODULE BIN LDFLAGS "PACKAGES" NAMES...: builds PACKAGES (listed in MODULE's go.mod tool
# block, so its go.sum covers them) into the cache folder BIN unless NAMES are all there already, under a
# lock (two runs building at once would build twice; the second waits and finds the result), and prints
# BIN. The packages are built in one go invocation so that their shared packages compile once and in
# parallel. A binary named for the path element before a major version (go.etcd.io/etcd/server/v3's
# `server`) is renamed by rename_tools. A function named in $post_build (if set) runs on the temporary
# folder before it is moved into place (the pause image).
go_build() {
  local what="$1" module="$2" bin="$3" ldflags="$4" pkgs="$5" tmp lock start b
  shift 5
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
  # shellcheck disable=SC2086 # PACKAGES is a list
  (cd "$module" && go build -mod=readonly -buildvcs=false -trimpath -ldflags "$ldflags" -o "$tmp/" $pkgs) >&2 ||
    die "go build of $what failed"
  rename_tools "$tmp"
  if [ -n "${post_build:-}" ]; then
    "$post_build" "$tmp"
  fi
  for b in "$@"; do
    built "$tmp" "$b" || die "the build of $what produced no $b (got: $(ls "$tmp"))"
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

k8s_ldflags() {
  local ldflags pkg
  grep -Eq "^\s*k8s.io/kubernetes $k8s_version( |$)" "$module/go.mod" ||
    die "tools/k8s/go.mod does not require k8s.io/kubernetes $k8s_version (update k8s_version here)"
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1"
    ldflags+=" -X $pkg.gitMinor=$(echo "$k8s_version" | cut -d. -f2)"
  done
  echo "$ldflags"
}

# etcd, kube-apiserver and kubectl; prints their folder.
build_k8s() {
  local ldflags
  ldflags="$(k8s_ldflags)"
  go_build "etcd, kube-apiserver, kubectl ($k8s_version)" "$module" \
    "$(bin_dir "$module" "$recipe" "$k8s_cache")" "$ldflags" \
    "go.etcd.io/etcd/server/v3 k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl" \
    etcd kube-apiserver kubectl
}

# kubelet, kube-proxy, kube-scheduler, kube-controller-manager and the pause image; prints their folder.
build_node() {
  local ldflags c pkgs=""
  ldflags="$(k8s_ldflags)"
  for c in kubelet kube-proxy kube-scheduler kube-controller-manager; do
    pkgs+=" k8s.io/kubernetes/cmd/$c"
  done
  post_build=pause_image go_build "kubelet, kube-proxy, kube-scheduler, kube-controller-manager ($k8s_version)" \
    "$module" "$(bin_dir "$module" "$node_recipe" "$node_cache")" "$ldflags" "$pkgs" \
    kubelet kube-proxy kube-scheduler kube-controller-manager pause.tar
}

# pause_image DIR: writes DIR/pause.tar, the sandbox image every pod's namespaces are held by, as a
# docker-archive (`ctr images import` reads it): pause.c from the k8s.io/kubernetes module (the Makefile's
# flags: -Os -static), one layer holding /pause, the image config (entrypoint /pause, user 65535 as
# upstream's), and manifest.json naming it registry.k8s.io/pause:3.10.2. Reproducible: fixed names, modes,
# owners and mtimes, so the same source gives the same image ID.
pause_image() {
  local out="$1" src work arch layer config tarflags
  command -v gcc >/dev/null || die "the pause image needs gcc (and libc6-dev for -static)"
  src="$(cd "$module" && go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c"
  [ -f "$src" ] || die "no $src in the Go module cache"
  case "$(uname -m)" in
    x86_64) arch=amd64 ;;
    aarch64) arch=arm64 ;;
    *) arch="$(uname -m)" ;;
  esac
  work="$(mktemp -d)"
  mkdir -p "$work/rootfs" "$work/image"
  gcc -Os -Wall -Werror -static -DVERSION="v$pause_tag" -o "$work/rootfs/pause" "$src" ||
    die "gcc -static failed on $src (is libc6-dev installed?)"
  strip "$work/rootfs/pause"
  tarflags=(--sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=ustar)
  tar "${tarflags[@]}" --mode=0755 -C "$work/rootfs" -cf "$work/layer.tar" pause
  layer="$(sha256sum "$work/layer.tar" | cut -d' ' -f1)"
  mv "$work/layer.tar" "$work/image/$layer.tar"
  printf '{"architecture":"%s","os":"linux","config":{"User":"65535:65535","Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$arch" "$layer" >"$work/config.json"
  config="$(sha256sum "$work/config.json" | cut -d' ' -f1)"
  mv "$work/config.json" "$work/image/$config.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s.tar"]}]' "$config" "$pause_image_name" "$layer" \
    >"$work/image/manifest.json"
  tar "${tarflags[@]}" --mode=0644 -C "$work/image" -cf "$out/pause.tar" manifest.json "$config.json" "$layer.tar"
  rm -rf "$work"
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
    "$(bin_dir "$helm_module" "$helm_recipe" "$helm_cache")" "$ldflags" helm.sh/helm/v3/cmd/helm helm
}

build() {
  build_k8s
  build_helm
  build_node
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

# issue NAME SUBJECT EXTENSION...: NAME.key (EC P-256) and NAME.crt signed by ca.key, in the current folder.
issue() {
  local name="$1" subject="$2"
  shift 2
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subject" \
    -keyout "$name.key" -out "$name.csr" 2>/dev/null
  printf '%s\n' "$@" >"$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

# certs PKI SANS NODES: the CA, the apiserver's serving certificate for SANS, the cluster-admin client
# certificate and the service-account key; with NODES > 0 also the client certificates of the control
# plane's components (the users the bootstrap RBAC policy binds), of the apiserver to kubelets, and of each
# node's kubelet (system:node:<name> in system:nodes, for the Node authorizer).
certs() {
  local pki="$1" sans="$2" nodes="$3" client="extendedKeyUsage=clientAuth" usage="keyUsage=digitalSignature" i
  mkdir -p "$pki"
  (
    cd "$pki"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
      -subj "/CN=sidecar-inject-test-ca" -keyout ca.key -out ca.crt 2>/dev/null
    # kube-apiserver's serving certificate: the address the clients dial and the names in-cluster
    # clients would use.
    issue apiserver "/CN=kube-apiserver" "subjectAltName=$sans" "extendedKeyUsage=serverAuth" "$usage"
    # cluster-admin: the group system:masters is bound to cluster-admin by the bootstrap RBAC policy.
    issue admin "/O=system:masters/CN=admin" "$client" "$usage"
    if [ "$nodes" -gt 0 ]; then
      issue kube-controller-manager "/CN=system:kube-controller-manager" "$client" "$usage"
      issue kube-scheduler "/CN=system:kube-scheduler" "$client" "$usage"
      issue kube-proxy "/CN=system:kube-proxy" "$client" "$usage"
      issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client" "$usage"
      for i in $(seq 1 "$nodes"); do
        issue "kubelet-node$i" "/O=system:nodes/CN=system:node:node$i" "$client" "$usage"
      done
    fi
    # The service-account token signing key (the apiserver refuses to start without one).
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
    rm -f ca.srl
  ) || die "openssl failed to make the certificates in $pki"
}

# kubeconfig FILE NAME: a kubeconfig for $server authenticating with $dir/pki/NAME.crt.
kubeconfig() {
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: $server
    certificate-authority: $dir/pki/ca.crt
users:
- name: $2
  user:
    client-certificate: $dir/pki/$2.crt
    client-key: $dir/pki/$2.key
contexts:
- name: test
  context:
    cluster: test
    user: $2
current-context: test
EOF
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

# Starts etcd and kube-apiserver on fresh ports; sets $server. $api_address and the $api_flags array
# (set by up) are what differs between an apiserver alone and a cluster with nodes.
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
  server="https://$api_address:$api_port"
  # --enable-aggregator-routing: the webhook (and aggregated API) service resolver then picks an address
  # from the Service's EndpointSlices instead of dialling its cluster IP, which the host does not route
  # (cmd/kube-apiserver/app/server.go buildServiceResolver; see docs/test-cluster.md, "Webhooks in service mode").
  # shellcheck disable=SC2086 # CLUSTER_APISERVER_EXTRA_ARGS is split into words on purpose
  spawn "$dir/kube-apiserver.log" "$dir/kube-apiserver.pid" "$bin/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address="$api_address" --advertise-address="$api_address" --secure-port="$api_port" \
    --tls-cert-file="$dir/pki/apiserver.crt" --tls-private-key-file="$dir/pki/apiserver.key" \
    --client-ca-file="$dir/pki/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$dir/pki/sa.pub" --service-account-signing-key-file="$dir/pki/sa.key" \
    --allow-privileged=true \
    --enable-aggregator-routing=true \
    --audit-policy-file="$dir/audit-policy.yaml" --audit-log-path="$dir/audit.log" \
    "${api_flags[@]}" \
    --v=0 ${CLUSTER_APISERVER_EXTRA_ARGS:-}
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
        die "$p exited before the control plane was ready"
      fi
    done
    if [ "$(date +%s)" -gt "$deadline" ]; then
      tail -30 "$dir/kube-apiserver.log" >&2 || true
      die "kube-apiserver not ready within 60 s"
    fi
    sleep 0.1
  done
}

# --- nodes -------------------------------------------------------------------------------------------

# The host sysctls a node's components would change if the node's namespaces did not keep them apart:
# the kubelet's kernel tunables (setupKernelTunables in pkg/kubelet/cm/container_manager_linux.go, with
# the values it wants), then forwarding and bridge netfilter, which are per network namespace.
kubelet_tunables="vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1
kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000"
host_sysctls="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys
kernel/keys/root_maxbytes net/ipv4/ip_forward net/ipv6/conf/all/forwarding net/bridge/bridge-nf-call-iptables
net/bridge/bridge-nf-call-ip6tables"

# The mount points of the cgroup hierarchies (v1 controllers and the hybrid mode's unified one).
cgroup_mounts() {
  awk '($3 == "cgroup" || $3 == "cgroup2") && $2 ~ "^/sys/fs/cgroup" {print $2}' /proc/self/mounts
}

# Claims a free cluster slot by creating its host bridge (creation is atomic: of two `up`s racing for a
# slot one gets EEXIST and tries the next); sets $slot.
claim_slot() {
  local k
  for k in $(seq 0 $((slots - 1))); do
    if ip link add "sik$k" type bridge 2>/dev/null; then
      slot=$k
      return
    fi
  done
  die "all $slots cluster slots are taken (host bridges sik0-sik$((slots - 1)) exist); run down on the old DIRs"
}

# The commands a node needs, with the package that has them.
need_node_tools() {
  local missing=() c
  for c in containerd:containerd containerd-shim-runc-v2:containerd ctr:containerd runc:runc \
    nsenter:util-linux unshare:util-linux ip:iproute2 nft:nftables iptables:iptables; do
    command -v "${c%%:*}" >/dev/null || missing+=("${c#*:}")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "nodes need the Debian packages: $(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')(scripts/test.sh installs them)"
}

# _holder DIR I (run by `unshare --mount --net --uts --propagation private` as the node's holder): makes
# the node's file system view, then sleeps until down kills it.
holder() {
  local dir="$1" i="$2" nd d entry
  nd="$dir/node$i"
  hostname "node$i"
  # A sysfs of the node's own network namespace (/sys/class/net lists the node's links, as the CNI
  # plugins and the kubelet expect), with the host's cgroup hierarchies moved back under it.
  mount --rbind /sys/fs/cgroup "$nd/cgroup.mnt"
  mount -t sysfs sysfs /sys
  mount --move "$nd/cgroup.mnt" /sys/fs/cgroup
  mount -t overlay overlay -o "lowerdir=/etc,upperdir=$nd/etc/upper,workdir=$nd/etc/work" /etc
  mkdir -p /etc/cni
  mount --bind "$nd/root/etc/cni" /etc/cni
  for d in opt run var/lib var/log; do
    mount --bind "$nd/root/$d" "/$d"
  done
  for entry in $kubelet_tunables; do
    mount --bind "$nd/sysctl/${entry%%=*}" "/proc/sys/${entry%%=*}"
  done
  mount --make-rshared /
  touch "$nd/holder.ready"
  exec sleep infinity
}

# in_node I CMD...: CMD in node I's namespaces (network, mount, UTS).
in_node() {
  local i="$1"
  shift
  nsenter --target "$(cat "$dir/node$i/holder.pid")" --mount --net --uts -- "$@"
}

# The environment of a node's daemons: nothing of the caller's (a test's KUBECONFIG, proxies).
node_env=(env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root)

# prepare_node I: node I's folders, namespaces, network, containerd with the pause image and CNI
# configuration; everything but the kubelet and kube-proxy, which need the apiserver. Runs in the
# background while the control plane starts.
prepare_node() {
  local i="$1" nd holder entry mnt deadline j
  nd="$dir/node$i"
  mkdir -p "$nd"/{etc/upper,etc/work,cgroup.mnt,sysctl,root/etc/cni/net.d,root/opt/cni/bin,root/run/lock} \
    "$nd"/root/var/{lib,log}
  for entry in $kubelet_tunables; do
    mkdir -p "$(dirname "$nd/sysctl/${entry%%=*}")"
    echo "${entry#*=}" >"$nd/sysctl/${entry%%=*}"
  done
  # The kubelet's cgroup root, which it requires in every hierarchy; cpuset's needs its CPUs and memory
  # nodes, which a new v1 cpuset cgroup starts without.
  for mnt in "${cgroups[@]}"; do
    mkdir "$mnt/sik$slot-node$i"
    if [ -f "$mnt/cpuset.cpus" ]; then
      cat "$mnt/cpuset.cpus" >"$mnt/sik$slot-node$i/cpuset.cpus"
      cat "$mnt/cpuset.mems" >"$mnt/sik$slot-node$i/cpuset.mems"
    fi
  done
  spawn "$nd/holder.log" "$nd/holder.pid" unshare --mount --net --uts --propagation private \
    bash "$self" _holder "$dir" "$i"
  holder="$(cat "$nd/holder.pid")"
  deadline=$(($(date +%s) + 30))
  until [ -e "$nd/holder.ready" ]; do
    kill -0 "$holder" 2>/dev/null || { cat "$nd/holder.log" >&2; die "node$i: the namespace holder exited"; }
    [ "$(date +%s)" -le "$deadline" ] || die "node$i: the namespace holder not ready within 30 s"
    sleep 0.02
  done
  readlink "/proc/$holder/ns/net" >"$nd/netns"
  readlink "/proc/$holder/ns/mnt" >"$nd/mntns"

  # The node network: eth0 in the node, its peer on the cluster's bridge; routes to the other nodes'
  # pod subnets through them, and from the host to this node's.
  ip link add "sik${slot}n$i" type veth peer name eth0 netns "$holder"
  ip link set "sik${slot}n$i" master "sik$slot" up
  in_node "$i" sh -e -c "
    ip link set lo up
    ip addr add $(node_ip "$i")/24 dev eth0
    ip link set eth0 up
    ip route add default via 10.250.$slot.1
    echo 1 >/proc/sys/net/ipv4/ip_forward"
  for j in $(seq 1 "$nodes"); do
    [ "$j" -eq "$i" ] || in_node "$i" ip route add "$(pod_cidr "$j")" via "$(node_ip "$j")"
  done
  ip route add "$(pod_cidr "$i")" via "$(node_ip "$i")" dev "sik$slot"

  # CNI: the reference bridge plugin with host-local IPAM on the node's pod subnet (and loopback, which
  # containerd runs for every pod).
  for entry in bridge host-local loopback; do
    cp "$cni_bin/$entry" "$nd/root/opt/cni/bin/"
  done
  cat >"$nd/root/etc/cni/net.d/10-bridge.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$(pod_cidr "$i")"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    }
  ]
}
EOF

  # containerd with the CRI settings a VM without CAP_SYS_RESOURCE needs: runc may not lower
  # oom_score_adj (no CAP_SYS_RESOURCE), no AppArmor, cgroupfs; root and state at their defaults, which
  # are the node's own /var/lib/containerd and /run/containerd.
  cat >"$nd/containerd.toml" <<EOF
version = 2
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image_name"
  disable_apparmor = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/opt/cni/bin"
    conf_dir = "/etc/cni/net.d"
EOF
  spawn "$nd/containerd.log" "$nd/containerd.pid" \
    nsenter --target "$holder" --mount --net --uts -- "${node_env[@]}" containerd --config "$nd/containerd.toml"
  deadline=$(($(date +%s) + 30))
  until ctr -a "$(node_sock "$i")" version >/dev/null 2>&1; do
    alive "$nd/containerd.pid" || { tail -20 "$nd/containerd.log" >&2; die "node$i: containerd exited"; }
    [ "$(date +%s)" -le "$deadline" ] || { tail -20 "$nd/containerd.log" >&2; die "node$i: containerd not up within 30 s"; }
    sleep 0.05
  done
  ctr -a "$(node_sock "$i")" -n k8s.io images import "$node_bin/pause.tar" >/dev/null ||
    die "node$i: importing the pause image failed"
}

node_ip() { echo "10.250.$slot.$((10 + $1))"; }
pod_cidr() { echo "10.$((200 + slot)).$1.0/24"; }
node_sock() { echo "$dir/node$1/root/run/containerd/containerd.sock"; }

# start_node I: node I's kubelet and kube-proxy.
start_node() {
  local i="$1" nd holder
  nd="$dir/node$i"
  holder="$(cat "$nd/holder.pid")"
  kubeconfig "$nd/kubelet.kubeconfig" "kubelet-node$i"
  kubeconfig "$nd/kube-proxy.kubeconfig" kube-proxy
  # Beyond the traps of this machine (cgroup v1, cgroupfs): authentication by client certificate (the
  # apiserver's) and bearer token, authorization by the apiserver (SubjectAccessReview), as kubeadm sets
  # a kubelet up; images are never collected (none can be pulled back), and eviction is off: the disk and
  # memory it measures are the host's, filled by the builds beside the tests, not by the pods. With the
  # 1 % thresholds it had, a host with under 2.5 GB free put both nodes under DiskPressure, evicted the
  # injector's pods and tainted the nodes against their replacements (a CI run failed so; a kubelet
  # drops a "0%" threshold, pkg/kubelet/eviction/helpers.go parseThresholdStatement).
  cat >"$nd/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /sik$slot-node$i
failSwapOn: false
containerRuntimeEndpoint: unix:///run/containerd/containerd.sock
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $dir/pki/ca.crt}
authorization: {mode: Webhook}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "0%", nodefs.available: "0%", nodefs.inodesFree: "0%", imagefs.available: "0%", imagefs.inodesFree: "0%"}
serializeImagePulls: false
EOF
  spawn "$nd/kubelet.log" "$nd/kubelet.pid" nsenter --target "$holder" --mount --net --uts -- "${node_env[@]}" \
    "$node_bin/kubelet" --config="$nd/kubelet.yaml" --kubeconfig="$nd/kubelet.kubeconfig" \
    --hostname-override="node$i" --node-ip="$(node_ip "$i")" --v=0
  # conntrack zeros: leave the kernel's conntrack table size and timeouts alone (the size is global).
  cat >"$nd/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
clientConnection: {kubeconfig: $nd/kube-proxy.kubeconfig}
hostnameOverride: node$i
clusterCIDR: 10.$((200 + slot)).0.0/16
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  spawn "$nd/kube-proxy.log" "$nd/kube-proxy.pid" nsenter --target "$holder" --mount --net --uts -- \
    "${node_env[@]}" "$node_bin/kube-proxy" --config="$nd/kube-proxy.yaml" --v=0
}

# Prints the last lines of every log of the cluster's components (for a failure's message).
tail_logs() {
  local f
  for f in "$dir"/kube-controller-manager.log "$dir"/kube-scheduler.log "$dir"/node*/{containerd,kubelet,kube-proxy}.log; do
    [ -f "$f" ] || continue
    echo "--- $f (last 15 lines)" >&2
    tail -15 "$f" >&2 || true
  done
}

# Waits until every node is Ready and untainted (the node lifecycle controller removes the not-ready
# taint), kube-proxy has synced on every node, and the `default` ServiceAccount exists (without it
# ServiceAccount admission refuses every pod of the namespace).
wait_nodes() {
  local deadline ready i p
  deadline=$(($(date +%s) + 120))
  while :; do
    ready="$("$bin/kubectl" --kubeconfig "$dir/kubeconfig" get nodes -o go-template='{{range .items}}{{$n := .metadata.name}}{{if not .spec.taints}}{{range .status.conditions}}{{if and (eq .type "Ready") (eq .status "True")}}{{$n}} {{end}}{{end}}{{end}}{{end}}' 2>/dev/null || true)"
    if [ "$(echo "$ready" | wc -w)" -eq "$nodes" ] &&
      "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get serviceaccount default -n default >/dev/null 2>&1; then
      for i in $(seq 1 "$nodes"); do
        in_node "$i" curl -sf http://127.0.0.1:10256/healthz >/dev/null 2>&1 || continue 2
      done
      return
    fi
    for p in kube-controller-manager kube-scheduler node*/containerd node*/kubelet node*/kube-proxy; do
      for f in "$dir"/$p.pid; do
        alive "$f" || { tail_logs; die "${f%.pid} exited before the cluster was ready"; }
      done
    done
    if [ "$(date +%s)" -gt "$deadline" ]; then
      tail_logs
      "$bin/kubectl" --kubeconfig "$dir/kubeconfig" get nodes -o wide >&2 || true
      die "the nodes were not Ready within 120 s (ready and untainted: ${ready:-none})"
    fi
    sleep 0.2
  done
}

up() {
  local dir="$1" nodes="$2" bin helm_bin node_bin="" cni_bin="" start attempt rc server slot="" sans i
  local api_address api_flags entry cgroups=()
  start=$(date +%s%N)
  [[ $nodes =~ ^[0-9]+$ ]] && [ "$nodes" -le "$max_nodes" ] || die "--nodes must be a number from 0 to $max_nodes (got $nodes)"
  bin="$(build_k8s)"
  helm_bin="$(build_helm)"
  if [ "$nodes" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "nodes need root (network, mount namespaces and cgroups)"
    need_node_tools
    node_bin="$(build_node)"
    if [ -n "${CLUSTER_NO_BUILD:-}" ]; then
      cni_bin="$(bash "$repo/scripts/cni-tools.sh" path)" || die "the CNI plugins are not built: run \`bash scripts/cni-tools.sh build\`"
    else
      cni_bin="$(bash "$repo/scripts/cni-tools.sh" build)" || die "building the CNI plugins failed"
    fi
    cni_bin="$(dirname "$(echo "$cni_bin" | sed -n 's/^bridge=//p')")"
  fi
  command -v openssl >/dev/null || die "up needs openssl for the certificates"
  command -v curl >/dev/null || die "up needs curl for the readiness probe"
  mkdir -p "$dir"
  dir="$(cd "$dir" && pwd -P)"
  up_dir="$dir"
  [ ! -e "$dir/etcd.pid" ] || die "$dir already holds a control plane (run down first)"
  if [ "$nodes" -gt 0 ]; then
    # The nodes bind their own folders over these; DIR must stay visible under them.
    case "$dir/" in
      /run/* | /var/run/* | /var/lib/* | /var/log/* | /opt/* | /etc/* | /sys/* | /proc/*)
        die "DIR must not be under /run, /var/lib, /var/log, /opt, /etc (the nodes' own folders hide it)" ;;
    esac
    [ ${#dir} -le 60 ] || die "DIR is too long for the nodes' unix sockets (at most 60 characters): $dir"
  fi
  # From here on, a failure takes down what was started, once the nodes being prepared in the
  # background are through (so that none of them starts something after down).
  prepare_pids=()
  trap 'rc=$?; [ $rc -eq 0 ] || { [ ${#prepare_pids[@]} -eq 0 ] || wait "${prepare_pids[@]}" 2>/dev/null
    down "$up_dir" >/dev/null 2>&1; } || true' EXIT
  echo "$nodes" >"$dir/nodes"

  if [ "$nodes" -eq 0 ]; then
    api_address=127.0.0.1
    sans="IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
    # ServiceAccount admission off and no endpoint reconciler: see the header.
    api_flags=(--authorization-mode=RBAC --disable-admission-plugins=ServiceAccount
      --endpoint-reconciler-type=none --service-cluster-ip-range=10.0.0.0/24)
  else
    claim_slot
    echo "$slot" >"$dir/slot"
    mapfile -t cgroups < <(cgroup_mounts)
    for entry in $host_sysctls; do
      [ -f "/proc/sys/$entry" ] && echo "$entry=$(cat "/proc/sys/$entry")"
    done >"$dir/host-sysctls"
    ip addr add "10.250.$slot.1/24" dev "sik$slot"
    ip link set "sik$slot" up
    api_address="10.250.$slot.1"
    sans="IP:$api_address,IP:127.0.0.1,IP:10.96.$slot.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default"
    sans+=",DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
    # A real cluster's: the default admission plugins (ServiceAccount among them) and NodeRestriction,
    # the Node authorizer before RBAC; the apiserver reaches kubelets at their InternalIP (node names do
    # not resolve here) with a client certificate of its own.
    api_flags=(--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction
      --service-cluster-ip-range="10.96.$slot.0/24"
      --kubelet-client-certificate="$dir/pki/apiserver-kubelet-client.crt"
      --kubelet-client-key="$dir/pki/apiserver-kubelet-client.key"
      --kubelet-preferred-address-types=InternalIP,Hostname)
  fi
  certs "$dir/pki" "$sans" "$nodes"
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

  # The nodes' namespaces, network and containerd come up while the control plane starts.
  for i in $(seq 1 "$nodes"); do
    prepare_node "$i" 2>"$dir/node$i.prepare.log" &
    prepare_pids+=($!)
  done

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

  kubeconfig "$dir/kubeconfig" admin
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
NODES=$nodes
EOF

  if [ "$nodes" -gt 0 ]; then
    kubeconfig "$dir/kube-controller-manager.kubeconfig" kube-controller-manager
    kubeconfig "$dir/kube-scheduler.kubeconfig" kube-scheduler
    # No serving port (--secure-port=0): two clusters would share the default ones, and nothing here
    # scrapes them. One instance each, so no leader election. The node lifecycle controller looks at the
    # nodes every second rather than 5 (it takes a new node's not-ready taint off on that tick).
    spawn "$dir/kube-controller-manager.log" "$dir/kube-controller-manager.pid" \
      "$node_bin/kube-controller-manager" --kubeconfig="$dir/kube-controller-manager.kubeconfig" \
      --secure-port=0 --leader-elect=false --use-service-account-credentials=true --node-monitor-period=1s \
      --service-account-private-key-file="$dir/pki/sa.key" --root-ca-file="$dir/pki/ca.crt" \
      --cluster-signing-cert-file="$dir/pki/ca.crt" --cluster-signing-key-file="$dir/pki/ca.key" --v=0
    spawn "$dir/kube-scheduler.log" "$dir/kube-scheduler.pid" "$node_bin/kube-scheduler" \
      --kubeconfig="$dir/kube-scheduler.kubeconfig" --secure-port=0 --leader-elect=false --v=0
    for i in $(seq 1 "$nodes"); do
      wait "${prepare_pids[$((i - 1))]}" || { cat "$dir/node$i.prepare.log" >&2; die "preparing node$i failed"; }
      start_node "$i"
    done
    wait_nodes
    {
      echo "NODE_NAMES=\"$(seq -f 'node%g' -s ' ' 1 "$nodes")\""
      echo "POD_CIDR=10.$((200 + slot)).0.0/16"
      echo "SERVICE_CIDR=10.96.$slot.0/24"
      echo "PAUSE_IMAGE=$pause_image_name"
      echo "BRIDGE=sik$slot"
      echo "KUBELET=$node_bin/kubelet"
      echo "KUBE_PROXY=$node_bin/kube-proxy"
      echo "KUBE_SCHEDULER=$node_bin/kube-scheduler"
      echo "KUBE_CONTROLLER_MANAGER=$node_bin/kube-controller-manager"
      for i in $(seq 1 "$nodes"); do
        echo "NODE${i}_NAME=node$i"
        echo "NODE${i}_IP=$(node_ip "$i")"
        echo "NODE${i}_POD_CIDR=$(pod_cidr "$i")"
        echo "NODE${i}_PID=$(cat "$dir/node$i/holder.pid")"
        echo "NODE${i}_CONTAINERD_SOCK=$(node_sock "$i")"
        echo "NODE${i}_CTR=\"ctr -a $(node_sock "$i") -n k8s.io\""
        echo "NODE${i}_CNI_BIN_DIR=$dir/node$i/root/opt/cni/bin"
        echo "NODE${i}_CNI_CONF_DIR=$dir/node$i/root/etc/cni/net.d"
        echo "NODE${i}_KUBELET_LOG=$dir/node$i/kubelet.log"
        echo "NODE${i}_CONTAINERD_LOG=$dir/node$i/containerd.log"
        echo "NODE${i}_KUBE_PROXY_LOG=$dir/node$i/kube-proxy.log"
        echo "NODE${i}_ROOT=$dir/node$i/root"
      done
    } >>"$dir/env"
  fi

  if [ -n "${CLUSTER_OWNER_PID:-}" ]; then
    local owner="$CLUSTER_OWNER_PID"
    setsid bash -c 'while kill -0 "$1" 2>/dev/null && [ -e "$2/etcd.pid" ]; do sleep 1; done
      [ -e "$2/etcd.pid" ] && exec bash "$3" down "$2"' watchdog "$owner" "$dir" "$self" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/watchdog.pid"
  fi
  trap - EXIT
  if [ "$nodes" -gt 0 ]; then
    echo "cluster.sh: $server and $nodes node$([ "$nodes" -eq 1 ] || echo s) ready in $((($(date +%s%N) - start) / 1000000)) ms; source $dir/env" >&2
  else
    echo "cluster.sh: $server ready in $((($(date +%s%N) - start) / 1000000)) ms; source $dir/env" >&2
  fi
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

# node_pids DIR I: the processes of node I: those in its cgroup root (the pods' containers) and those in
# its mount namespace that see DIR's folders mounted (containerd, its shims, the holder; the check on
# mountinfo keeps a recycled namespace inode from naming a stranger's process).
# (Few forks: on a machine busy with builds each costs tens of milliseconds.)
node_pids() {
  local dir="$1" i="$2" slot mntns="" p roots=()
  read -r slot <"$dir/slot"
  [ -f "$dir/node$i/mntns" ] && read -r mntns <"$dir/node$i/mntns"
  for p in "${cgroups[@]}"; do
    [ -d "$p/sik$slot-node$i" ] && roots+=("$p/sik$slot-node$i")
  done
  [ ${#roots[@]} -eq 0 ] || find "${roots[@]}" -name cgroup.procs -exec cat {} + 2>/dev/null
  if [ -n "$mntns" ]; then
    # One stat for all processes (a readlink each would take seconds on a busy machine).
    mntns="${mntns#mnt:[}"
    for p in $(stat -L -c '%i %n' /proc/[0-9]*/ns/mnt 2>/dev/null | awk -v ns="${mntns%]}" '$1 == ns {print $2}'); do
      p="${p%/ns/mnt}"
      grep -qF "$dir/node$i/" "$p/mountinfo" 2>/dev/null && echo "${p#/proc/}"
    done
  fi
  true
}

# down_node DIR I: kills every process of node I, which frees its namespaces (and with them every mount,
# link, netfilter rule and sysctl inside), then deletes its veth and its cgroups.
down_node() {
  local dir="$1" i="$2" slot pids p roots start=$SECONDS
  read -r slot <"$dir/slot"
  while pids="$(node_pids "$dir" "$i")" && [ -n "$pids" ]; do
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $pids 2>/dev/null || true
    [ $((SECONDS - start)) -le 30 ] || { echo "cluster.sh: node$i: processes left: "$pids >&2; break; }
    sleep 0.05
  done
  ip link del "sik${slot}n$i" 2>/dev/null || true
  # A killed process leaves its cgroup a moment later.
  for _ in $(seq 1 100); do
    roots=()
    for p in "${cgroups[@]}"; do
      [ -d "$p/sik$slot-node$i" ] && roots+=("$p/sik$slot-node$i")
    done
    [ ${#roots[@]} -gt 0 ] || return 0
    find "${roots[@]}" -depth -type d -exec rmdir {} + 2>/dev/null || true
    sleep 0.05
  done
  echo "cluster.sh: node$i: cannot remove the cgroups ${roots[*]}" >&2
}

down() {
  local dir="$1" nodes=0 slot i entry now cgroups=()
  [ -d "$dir" ] || return 0
  [ -e "$dir/etcd.pid" ] || [ -e "$dir/kube-apiserver.pid" ] || [ -e "$dir/kubeconfig" ] ||
    [ -e "$dir/nodes" ] || die "$dir does not look like a cluster.sh directory; not removing it"
  dir="$(cd "$dir" && pwd -P)"
  # The watchdog, unless it is the caller.
  if [ -f "$dir/watchdog.pid" ] && [ "$(cat "$dir/watchdog.pid")" != "$$" ]; then
    stop "$dir/watchdog.pid"
  fi
  [ -f "$dir/nodes" ] && nodes="$(cat "$dir/nodes")"
  # The kubelets and kube-proxies first, so that nothing restarts what goes next; then the control
  # plane. Their state is thrown away with DIR, so there is nothing to shut down gracefully for (the
  # apiserver's graceful shutdown drains its watches for seconds).
  for i in $(seq 1 "$nodes"); do
    stop "$dir/node$i/kubelet.pid" KILL
    stop "$dir/node$i/kube-proxy.pid" KILL
  done
  stop "$dir/kube-controller-manager.pid" KILL
  stop "$dir/kube-scheduler.pid" KILL
  stop "$dir/kube-apiserver.pid" KILL
  stop "$dir/etcd.pid"
  if [ -f "$dir/slot" ]; then
    read -r slot <"$dir/slot"
    mapfile -t cgroups < <(cgroup_mounts)
    for i in $(seq 1 "$nodes"); do
      down_node "$dir" "$i"
    done
    # The bridge takes the pod subnets' routes with it, and frees the slot.
    ip link del "sik$slot" 2>/dev/null || true
    if [ -f "$dir/host-sysctls" ]; then
      while IFS= read -r entry; do
        now="$(cat "/proc/sys/${entry%%=*}" 2>/dev/null || true)"
        if [ "$now" != "${entry#*=}" ]; then
          echo "cluster.sh: restoring ${entry%%=*} to ${entry#*=} (was $now)" >&2
          echo "${entry#*=}" >"/proc/sys/${entry%%=*}" || true
        fi
      done <"$dir/host-sysctls"
    fi
  fi
  rm -rf "$dir"
}

case "${1:-}" in
  build)
    [ $# -eq 1 ] || die "usage: cluster.sh build"
    build
    ;;
  up)
    [ $# -eq 2 ] || { [ $# -eq 4 ] && [ "$3" = "--nodes" ]; } || die "usage: cluster.sh up DIR [--nodes N]"
    up "$2" "${4:-0}"
    ;;
  down)
    [ $# -eq 2 ] || die "usage: cluster.sh down DIR"
    down "$2"
    ;;
  _holder) holder "$2" "$3" ;;
  *) die "usage: cluster.sh build | up DIR [--nodes N] | down DIR" ;;
esac
