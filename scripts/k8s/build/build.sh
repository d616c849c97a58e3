#!/usr/bin/env bash
# Builds the test cluster's binaries into $1 (default: ../bin beside this
# folder) in one `go build`, so the seven commands share one compile graph:
# the Kubernetes v1.37.2 control plane, kubelet and kubectl from the
# k8s.io/kubernetes module (its staging modules replaced by v0.37.2 in
# go.mod), etcd at the version Kubernetes pins, and a small pause. Go's own
# GOCACHE/GOMODCACHE are used, so a second build only links.
set -euo pipefail
cd "$(dirname "$0")"
out=${1:-../bin}
v=v1.37.2
ver="-X k8s.io/component-base/version.gitVersion=$v -X k8s.io/component-base/version.gitMajor=1"
ver="$ver -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"
ver="$ver -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"
ver="$ver -X k8s.io/client-go/pkg/version.gitVersion=$v -X k8s.io/client-go/pkg/version.gitMajor=1"
ver="$ver -X k8s.io/client-go/pkg/version.gitMinor=37"
mkdir -p "$out"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w $ver" -o "$out/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubelet \
  k8s.io/kubernetes/cmd/kubectl \
  ./cmd/etcd ./cmd/pause
