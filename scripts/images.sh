#!/usr/bin/env bash
# The project's container images, built with no container engine, no daemon and no registry,
# from the repository's own Dockerfiles (scripts/images.py says how), written as docker-archive tars by
# scripts/image-archive.py.
#
#   scripts/images.sh build [NAME...]   build what changed (all by default); prints HUB=, TAG=, then for each
#                                       image NAME=REF and NAME_ARCHIVE=PATH (also kept in target/images/images.env)
#   scripts/images.sh load DIR [NAME...] import the built archives into every node of the cluster in DIR
#                                       (`scripts/cluster.sh up DIR --nodes N`): DIR/env's NODES=N and, per
#                                       node i, NODE<i>_CONTAINERD_SOCK (ctr -a SOCK -n k8s.io images import)
#   scripts/images.sh refs              print HUB=, TAG= and NAME=REF without building
#
# Images: injector (Dockerfile), iptables-init and iptables-init-native-nftables (Dockerfile.init, default and
# `native-nftables` targets), istio-cni (Dockerfile.cni), testproxy (Dockerfile.testproxy), and for the tests
# pause (the kubelet's sandbox image, from k8s.io/kubernetes' build/pause) and istio-pilot-agent (Istio's own
# pilot-agent from scripts/istio-peers.sh on the Debian base).
#
# References are `$IMAGES_HUB/NAME:$IMAGES_TAG`, by default localhost/sidecar-inject/NAME:dev: the charts' `hub`
# and `tag` values compose them (`<hub>/<image>:<tag>`), and with imagePullPolicy IfNotPresent or Never the
# kubelet uses the imported image. The Debian root file system is cached under
# ~/.cache/sidecar-inject/rootfs (IMAGES_CACHE) by a hash of its recipe; archives are rewritten only when
# their inputs changed. Needs root (debootstrap, and files owned by root in the layers), python3, gcc,
# debootstrap, and the packages the Dockerfiles' build stages install (file, musl-tools).
set -euo pipefail
exec python3 "$(dirname "$0")/images.py" "$@"
