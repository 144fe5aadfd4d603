# Shared by bench/iptables-apply.sh and bench/nftables-apply.sh (sourced, not run): the checks, the
# binary under test, Istio's injected arguments, fresh network namespaces removed on exit, timing a
# command inside a namespace, medians and peak RSS.
#
# The sourcing script has `set -euo pipefail` and runs from the repository root; it calls
# `bench_setup <its name> <namespace prefix>` first.

bench_setup() { # $1: the script's name, for messages; $2: the prefix of its namespaces' names
  bench_name=$1
  ns_prefix="$2-$$"
  # 61 rounds: this VM's speed drifts by 10-25% from one second to the next; with 21 rounds the ratio
  # of the medians varied from 1.11 to 1.43 between back-to-back runs of the same binaries, with 61 by
  # ~0.01.
  rounds=${ROUNDS:-61}
  # By default the binary the image ships: static, so no dynamic loader at start-up
  # (scripts/check-static-init.sh builds it when missing).
  bin=${BIN:-target/x86_64-unknown-linux-musl/release/iptables-init}
  if [ "$(id -u)" -ne 0 ]; then echo "$bench_name: needs root (network namespaces)" >&2; exit 1; fi
  if [ ! -x "$bin" ] && [ -z "${BIN:-}" ]; then scripts/check-static-init.sh; fi
  bin=$(realpath "$bin")
  [ -x /usr/bin/time ] || { echo "needs GNU time (/usr/bin/time, Debian package 'time')" >&2; exit 1; }
  restore=$(command -v iptables-restore)
  # The arguments Istio's injector writes for a default pod, IPv4 only.
  args=(istio-iptables -p 15001 -z 15006 -u 1337 -m REDIRECT -i '*' -x "" -b '*' -d 15090,15021,15020 --ipv6 false)
  bench_files=()
  trap bench_cleanup EXIT
}

# Removes the scratch files and every namespace of this run.
bench_cleanup() {
  if [ ${#bench_files[@]} -gt 0 ]; then rm -f "${bench_files[@]}"; fi
  for n in $(ip netns list | awk -v p="$ns_prefix-" 'index($1, p) == 1 {print $1}'); do ip netns del "$n"; done
}

# A scratch file removed on exit; its path goes to the variable named $1.
scratch() {
  local f; f=$(mktemp); bench_files+=("$f"); printf -v "$1" '%s' "$f"
}

fresh() { ip netns add "$1"; ip netns exec "$1" ip link set lo up; }

# Runs "$@" in a namespace made for it and removed after: a BIN under test that ignored --dry-run
# would otherwise change this machine's own rules.
throwaway() {
  local ns="$ns_prefix-dry"
  fresh "$ns"; ip netns exec "$ns" "$@"; ip netns del "$ns"
}

# Times one command inside a namespace with bash's clock: the command is started directly by a shell
# that already runs in the namespace, so `ip netns exec` is outside the timed part. Prints microseconds.
timed() { # $1: namespace, $2: stdin, rest: command
  local ns=$1 stdin=$2; shift 2
  ip netns exec "$ns" bash -c '
    stdin=$1; shift
    t0=${EPOCHREALTIME/./}; "$@" >/dev/null 2>&1 <"$stdin"; rc=$?; t1=${EPOCHREALTIME/./}
    [ $rc -eq 0 ] || { echo "failed: $* (rc $rc)" >&2; exit 1; }
    echo $((t1 - t0))' _ "$stdin" "$@"
}

median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : int((v[NR/2]+v[NR/2+1])/2)}'; }

# The peak RSS in KiB of one run of a command in a fresh namespace (GNU time -v).
rss_once() { # $1: namespace, $2: stdin, rest: command
  local ns=$1 stdin=$2; shift 2
  fresh "$ns"
  ip netns exec "$ns" /usr/bin/time -v "$@" 2>&1 >/dev/null <"$stdin" |
    awk -F': ' '/Maximum resident set size/ {print $2}'
  ip netns del "$ns"
}
