#!/usr/bin/env bash
# tools.sh: Go-built tools the release and install path need, pinned, built
# once per machine from the Go module proxy and cached by version, as
# k8s-up.sh caches the test cluster's binaries.
#
#   scripts/tools.sh path NAME         prints the binary's path, building it first if needed
#   scripts/tools.sh cached NAME       prints it only when already built; else says so, exits 1
#   scripts/tools.sh exec NAME ARGS... runs it (building it first if needed)
#   scripts/tools.sh within SECONDS NAME
#                                      prints the path when cached, or when a
#                                      build finishes within SECONDS (0: no
#                                      build); else logs why and exits 3, so
#                                      CI skips that leg, saying so, rather
#                                      than run past its time
#
# NAME is one of:
#   goreleaser  github.com/goreleaser/goreleaser/v2, GORELEASER_VERSION (the
#               GNUmakefile pins it). `go run pkg@version` keeps the binary in
#               Go's build cache too, but that cache is trimmed and shared,
#               and each run re-hashes the whole build graph (14 s on a busy
#               2-core machine); a cached binary starts at once.
#   tofu        OpenTofu's CLI, MEEPA_TOFU_VERSION (default below, the newest
#               1.12 the proxy served when this was written). Its go.mod has
#               a replace directive (its own fork of hcl), which
#               `go install ...@version` refuses, so it is built from its
#               module source (fetched into the module cache, read-only
#               there) in a writable copy, with the release's -X flag so that
#               it reports its version without "-dev".
#   terraform   Terraform's CLI, MEEPA_TERRAFORM_VERSION (default below, the
#               newest the proxy served when this was written), for tests
#               of what the machine's pinned minimum (terraform on PATH,
#               1.11) lacks: resource identity, query, actions.
#   runsc       gVisor's OCI runtime, gvisor.dev/gvisor/runsc at
#               MEEPA_RUNSC_VERSION (default below: the go branch's pseudo-
#               version seen to work here; the module publishes no tags), and
#               beside it, from the same module and version, containerd's
#               shim for it (containerd-shim-runsc-v1), which a cluster node's
#               containerd needs. One `go install` builds both; the shim is
#               moved into place before runsc, so a runsc binary means both
#               are there. scripts/runsc.sh registers them.
#
# Binaries go to $MEEPA_TOOLS_DIR/<name>-<version>/<name> (default
# /var/tmp/meepa-tools, beside the cluster's /var/tmp/meepa-k8s). A build is
# written beside it and renamed into place, so a killed build (CI's time
# budget) leaves nothing half-made; Go's build cache keeps what it compiled,
# so the next attempt continues from there.
set -euo pipefail
TOOLS=${MEEPA_TOOLS_DIR:-/var/tmp/meepa-tools}

log() { printf '[tools %s] %s\n' "$(date +%T)" "$*" >&2; }

# tool NAME: sets TOOL_VERSION, TOOL_DIR, TOOL_BIN for NAME.
tool() {
  case $1 in
    goreleaser) TOOL_VERSION=${GORELEASER_VERSION:-v2.15.1} ;;
    tofu) TOOL_VERSION=${MEEPA_TOFU_VERSION:-v1.12.6} ;;
    terraform) TOOL_VERSION=${MEEPA_TERRAFORM_VERSION:-v1.16.0} ;;
    runsc) TOOL_VERSION=${MEEPA_RUNSC_VERSION:-v0.0.0-20260905035102-160fafc42237} ;;
    *) echo "tools.sh: unknown tool '$1' (goreleaser, tofu, terraform, runsc)" >&2; exit 2 ;;
  esac
  TOOL_DIR=$TOOLS/$1-$TOOL_VERSION
  TOOL_BIN=$TOOL_DIR/$1
}

build_goreleaser() {
  GOBIN=$1 CGO_ENABLED=0 go install "github.com/goreleaser/goreleaser/v2@$TOOL_VERSION"
  mv "$1/goreleaser" "$2"
}

build_tofu() {
  local src
  src=$(go mod download -json "github.com/opentofu/opentofu@$TOOL_VERSION" | jq -r '.Dir // empty')
  [ -n "$src" ] && [ -f "$src/go.mod" ] || { echo "tools.sh: go mod download github.com/opentofu/opentofu@$TOOL_VERSION gave no source" >&2; exit 1; }
  cp -R "$src/." "$1/"
  chmod -R u+w "$1"
  (cd "$1" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" -o "$2" ./cmd/tofu)
  # (A CLI configuration that is not there makes it print warnings first.)
  local out
  out=$(env -u TF_CLI_CONFIG_FILE "$2" version 2>&1)
  grep -qx "OpenTofu $TOOL_VERSION" <<<"$out" ||
    { echo "tools.sh: the built tofu reports '$out', not OpenTofu $TOOL_VERSION" >&2; exit 1; }
}

build_terraform() {
  # Like OpenTofu's, Terraform's go.mod has replace directives, so it is built
  # from its module source. Its remote-state backends other than local,
  # http and inmem (azurerm, consul, cos, gcs, kubernetes, oci, oss, pg, s3)
  # are modules of their own inside the repository that no module zip
  # carries and the proxy does not serve; the build leaves them out (the
  # tests keep their state locally), and says so in `terraform version`'s
  # place: nowhere else does it differ from the release.
  local src
  src=$(go mod download -json "github.com/hashicorp/terraform@$TOOL_VERSION" | jq -r '.Dir // empty')
  [ -n "$src" ] && [ -f "$src/go.mod" ] || { echo "tools.sh: go mod download github.com/hashicorp/terraform@$TOOL_VERSION gave no source" >&2; exit 1; }
  cp -R "$src/." "$1/"
  chmod -R u+w "$1"
  local gone='azure|consul|cos|gcs|kubernetes|oci|oss|pg|s3'
  sed -i -E "\#internal/backend/remote-state/($gone)[ /]|internal/legacy[ ]#d" "$1/go.mod"
  sed -i -E "\#backend(Azure|Consul|Cos|GCS|Kubernetes|OCI|OSS|Pg|S3)[ .]#d" "$1/internal/backend/init/init.go"
  (cd "$1" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-s -w -X github.com/hashicorp/terraform/version.dev=no" -o "$2" .)
  local out
  out=$(env -u TF_CLI_CONFIG_FILE "$2" version 2>&1 | head -1)
  [ "$out" = "Terraform $TOOL_VERSION" ] ||
    { echo "tools.sh: the built terraform reports '$out', not Terraform $TOOL_VERSION" >&2; exit 1; }
}

build_runsc() {
  # The -X gives `runsc --version` the module version instead of
  # VERSION_MISSING (gVisor's own release build sets it the same way).
  GOBIN=$1 CGO_ENABLED=0 go install -trimpath -ldflags "-X gvisor.dev/gvisor/runsc/version.version=$TOOL_VERSION" \
    "gvisor.dev/gvisor/runsc@$TOOL_VERSION" "gvisor.dev/gvisor/shim@$TOOL_VERSION"
  # The module's shim package is named by its directory; containerd finds a
  # shim by this name on its PATH (runtime type io.containerd.runsc.v1).
  mv "$1/shim" "$TOOL_DIR/containerd-shim-runsc-v1"
  mv "$1/runsc" "$2"
  local out
  out=$("$2" --version)
  grep -qF "version $TOOL_VERSION" <<<"$out" ||
    { echo "tools.sh: the built runsc reports '$out', not $TOOL_VERSION" >&2; exit 1; }
}

# ensure NAME: builds NAME unless it is cached.
ensure() {
  [ -x "$TOOL_BIN" ] && return
  mkdir -p "$TOOL_DIR"
  # One build at a time; whoever waited finds it built.
  exec 9>"$TOOL_DIR/.lock"
  flock 9
  if [ -x "$TOOL_BIN" ]; then exec 9>&-; return; fi
  local t0=$SECONDS work
  log "building $1 $TOOL_VERSION into $TOOL_DIR (first use on this machine; cold on 2 busy cores: many minutes)"
  work=$(mktemp -d "$TOOL_DIR/.build.XXXXXX")
  # (Expanded now: the trap runs after ensure's locals are gone.)
  trap "rm -rf '$work'" EXIT
  "build_$1" "$work" "$work/$1.built"
  mv "$work/$1.built" "$TOOL_BIN"
  rm -rf "$work"
  trap - EXIT
  exec 9>&-
  log "$1 $TOOL_VERSION built in $((SECONDS - t0)) s"
}

cmd=${1:-} name=${2:-}
if [ "$cmd" = within ]; then
  budget=$name name=${3:-}
  [[ $budget =~ ^[0-9]+$ ]] && [ -n "$name" ] || { echo "usage: $0 within SECONDS NAME" >&2; exit 2; }
fi
[ -n "$name" ] || { echo "usage: $0 path|cached|exec NAME [ARGS...] | within SECONDS NAME" >&2; exit 2; }
tool "$name"
case $cmd in
  path) ensure "$name"; echo "$TOOL_BIN" ;;
  cached)
    if [ -x "$TOOL_BIN" ]; then echo "$TOOL_BIN"; exit 0; fi
    log "$name $TOOL_VERSION is not built on this machine yet ($TOOL_BIN)"
    exit 1
    ;;
  exec) shift 2; ensure "$name"; exec "$TOOL_BIN" "$@" ;;
  within)
    if [ -x "$TOOL_BIN" ]; then echo "$TOOL_BIN"; exit 0; fi
    if [ "$budget" -eq 0 ]; then
      log "SKIPPED: $name $TOOL_VERSION is not built on this machine and its build budget is 0 s (scripts/tools.sh path $name builds it)"
      exit 3
    fi
    log "$name $TOOL_VERSION is not built on this machine: building it for at most $budget s"
    rc=0
    timeout --kill-after=10 "$budget" "$0" path "$name" >/dev/null || rc=$?
    if [ "$rc" -eq 0 ]; then echo "$TOOL_BIN"; exit 0; fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      log "SKIPPED: building $name took longer than $budget s; Go's build cache keeps what was compiled, so a later run gets further"
      exit 3
    fi
    log "building $name failed (exit $rc)"
    exit 1
    ;;
  *) echo "usage: $0 path|cached|exec NAME [ARGS...]" >&2; exit 2 ;;
esac
