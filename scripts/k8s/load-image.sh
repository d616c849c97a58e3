#!/usr/bin/env bash
# Imports a docker-archive or OCI tarball (e.g. `docker save IMAGE`) into the
# test cluster's containerd, where pods use it with imagePullPolicy: Never.
#   load-image.sh FILE.tar     or     docker save IMAGE | load-image.sh -
set -euo pipefail
. "$(dirname "$0")/common.sh"
[ -S "$C/containerd.sock" ] || { echo "load-image: the test cluster is not up (no $C/containerd.sock)" >&2; exit 1; }
exec ctr -a "$C/containerd.sock" -n k8s.io images import "${1:--}"
