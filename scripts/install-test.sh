#!/usr/bin/env bash
# install-test.sh: the install path as an operator walks it after
# `make demo` (or `make mirror-host`), with both CLIs:
#
#   1. `make install-mirror` on the host-only snapshot: refused without
#      MEEPA_TRUST_SNAPSHOT_KEY=1 (a throwaway key signed it), and with it,
#      installed with the runner that snapshot has (not every architecture).
#   2. The snapshot's version names its commit, so a lock file written for
#      one build is never matched against another commit's checksums.
#   3. Terraform, then OpenTofu: `init` from bin/mirror.tfrc, the lock file's
#      h1: checksum equal to the one the mirror publishes, `providers lock
#      -fs-mirror` (what the README says to run for "Incomplete lock file
#      information"), and a plan of a small config that uses the provider.
#   4. The guide's air-gapped base image: a root file system tarball
#      imported with `docker import`, an isolation image applied on it with
#      pull = "never", its runner run, all destroyed again.
#
# Needs the snapshot in dist/ that mirror-host built (`make mirror-host`
# first when there is none). OpenTofu comes from scripts/tools.sh; with
# MEEPA_TOFU_BUILD_BUDGET=<seconds> (CI sets it) a tofu not yet built on this
# machine is built for at most that long, and the OpenTofu leg is skipped,
# saying so, when that is not enough. Without it, the build takes what it
# takes (cold: see the README).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
[ -f "${TF_CLI_CONFIG_FILE:-}" ] || unset TF_CLI_CONFIG_FILE
MIRROR_DIR=$ROOT/bin/mirror
platform="$(go env GOOS)_$(go env GOARCH)"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

say() { printf '\n==> install-test: %s\n' "$*"; }
fail() { echo "install-test: FAIL: $*" >&2; exit 1; }

commit=$(git rev-parse --short HEAD)
# A snapshot's version names its commit (checked below); one from an
# earlier commit is rebuilt, as is a dist/ not made here.
if ! ls dist/terraform-provider-meepa_*.g"${commit}"_SHA256SUMS >/dev/null 2>&1 || [ ! -s bin/snapshot-key.fpr ]; then
  say "no snapshot of $commit made here in dist/: make mirror-host"
  make --no-print-directory mirror-host
fi

say "make install-mirror (no MEEPA_TRUST_SNAPSHOT_KEY): refused, with the way out"
if make --no-print-directory install-mirror >"$WORK/plain.log" 2>&1; then
  cat "$WORK/plain.log"
  fail "install-mirror trusted a snapshot's throwaway key without MEEPA_TRUST_SNAPSHOT_KEY=1"
fi
grep -F "make install-mirror MEEPA_TRUST_SNAPSHOT_KEY=1" "$WORK/plain.log" ||
  { cat "$WORK/plain.log"; fail "the refusal does not say how to trust the snapshot key"; }

say "make install-mirror MEEPA_TRUST_SNAPSHOT_KEY=1 (RUNNERS unset): what the snapshot has"
make --no-print-directory install-mirror MEEPA_TRUST_SNAPSHOT_KEY=1 2>&1 | tee "$WORK/trusted.log" ||
  fail "install-mirror refused the snapshot made here"
version=$(cat bin/mirror.version)

say "the snapshot's version names its commit: $version"
case $version in
  *-dev.*.g"$commit") ;;
  *) fail "the snapshot is version $version, which does not name commit $commit: a rebuild at another commit would reuse it" ;;
esac

for host in registry.terraform.io registry.opentofu.org; do
  idx=$MIRROR_DIR/$host/bogpad/meepa
  [ -f "$idx/terraform-provider-meepa_${version}_${platform}.zip" ] && jq -e --arg v "$version" '.versions | has($v)' "$idx/index.json" >/dev/null ||
    fail "the mirror does not serve bogpad/meepa $version under $host ($idx)"
done
index_h1=$(jq -r --arg p "$platform" '.archives[$p].hashes[] | select(startswith("h1:"))' \
  "$MIRROR_DIR/registry.terraform.io/bogpad/meepa/$version.json")

# check CLI HOST: init, lock file, providers lock and a plan with one CLI.
check() {
  local cli=$1 host=$2 dir rc=0
  local name
  name=$(basename "$cli")
  dir=$WORK/$name
  mkdir -p "$dir/state"
  # A small config that needs the provider: one host-mode agent on the
  # offline model; its plan talks to no daemon.
  cat >"$dir/main.tf" <<EOF
terraform {
  required_providers {
    meepa = {
      source  = "bogpad/meepa"
      version = "$version"
    }
  }
}

provider "meepa" {
  state_dir = "$dir/state"
}

resource "meepa_agent" "check" {
  agent_id       = "install-check"
  llm            = { provider = "offline" }
  container_mode = { enabled = false, image = "meepa-install-check:none" }
}
EOF
  say "$name init (TF_CLI_CONFIG_FILE=bin/mirror.tfrc)"
  TF_CLI_CONFIG_FILE=$ROOT/bin/mirror.tfrc "$cli" -chdir="$dir" init -input=false -no-color 2>&1 | tee "$dir/init.log" ||
    fail "$name init from the mirror failed"
  grep -F "Installed bogpad/meepa v$version" "$dir/init.log" >/dev/null || fail "$name init did not install bogpad/meepa $version"
  grep -F "provider \"$host/bogpad/meepa\"" "$dir/.terraform.lock.hcl" >/dev/null ||
    fail "$name's lock file has no $host/bogpad/meepa"
  grep -F "version     = \"$version\"" "$dir/.terraform.lock.hcl" >/dev/null || fail "$name's lock file does not pin $version"
  grep -F "\"$index_h1\"" "$dir/.terraform.lock.hcl" >/dev/null ||
    { cat "$dir/.terraform.lock.hcl"; fail "$name's lock file does not hold the mirror's $index_h1 for $platform"; }

  say "$name providers lock -fs-mirror=bin/mirror -platform=$platform"
  "$cli" -chdir="$dir" providers lock -no-color -fs-mirror="$MIRROR_DIR" -platform="$platform" 2>&1 ||
    fail "$name providers lock -fs-mirror failed"
  TF_CLI_CONFIG_FILE=$ROOT/bin/mirror.tfrc "$cli" -chdir="$dir" init -input=false -no-color >"$dir/init2.log" 2>&1 ||
    { cat "$dir/init2.log"; fail "$name init after providers lock failed"; }
  if grep -F "Incomplete lock file information" "$dir/init2.log"; then
    fail "$name still warns of an incomplete lock file after providers lock"
  fi

  say "$name plan (one agent to create)"
  "$cli" -chdir="$dir" plan -input=false -no-color -detailed-exitcode 2>&1 | tee "$dir/plan.log" || rc=$?
  # With pipefail, rc is plan's own code: 2 is "changes", 0 none, 1 error.
  [ "$rc" -eq 2 ] || fail "$name plan exited $rc, want 2 (one resource to add)"
  grep -F "meepa_agent.check will be created" "$dir/plan.log" >/dev/null || fail "$name plan does not create meepa_agent.check"
  grep -F "Plan: 1 to add, 0 to change, 0 to destroy." "$dir/plan.log" >/dev/null || fail "$name plan is not 1 to add"
}

# offline_base CLI: the guide's air-gapped base image (docs/guides/installing.md,
# "A base image with no registry", way 2) made with its commands, then an
# isolation image applied on it with pull = "never" by the provider from the
# mirror, its runner run, and destroyed.
offline_base() {
  local cli=$1 dir=$WORK/offline base=meepa-install-check/busybox:offline rc=0
  mkdir -p "$dir/state"
  say "an air-gapped base image: a busybox root file system imported with docker import"
  (
    cd "$dir"
    mkdir -p rootfs/bin rootfs/etc rootfs/tmp && cp /bin/busybox rootfs/bin/
    for a in $(rootfs/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "rootfs/bin/$a"; done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >rootfs/etc/passwd
    chmod 1777 rootfs/tmp
    tar --numeric-owner -C rootfs -cf base.tar .
    docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' base.tar "$base"
  ) || fail "the guide's docker import of a rootfs tarball failed"
  cat >"$dir/main.tf" <<EOF
terraform {
  required_providers {
    meepa = {
      source  = "bogpad/meepa"
      version = "$version"
    }
  }
}

provider "meepa" {
  state_dir = "$dir/state"
}

resource "meepa_isolation_image" "offline" {
  base_image      = "$base"
  pull            = "never"
  package_manager = "none"
  env_vars        = { LANG = "C.UTF-8" }
}

output "isolated_image" {
  value = meepa_isolation_image.offline.isolated_image
}
EOF
  TF_CLI_CONFIG_FILE=$ROOT/bin/mirror.tfrc "$cli" -chdir="$dir" init -input=false -no-color >"$dir/init.log" 2>&1 ||
    { cat "$dir/init.log"; docker rmi "$base" >/dev/null; fail "init for the offline base failed"; }
  "$cli" -chdir="$dir" apply -auto-approve -input=false -no-color 2>&1 | tail -5 || rc=$?
  if [ "$rc" -eq 0 ]; then
    local img
    img=$("$cli" -chdir="$dir" output -raw isolated_image)
    docker run --rm --network none "$img" agent-runner version || rc=$?
  fi
  "$cli" -chdir="$dir" destroy -auto-approve -input=false -no-color 2>&1 | tail -1 || rc=$?
  docker rmi "$base" >/dev/null || true
  [ "$rc" -eq 0 ] || fail "an isolation image on the imported base did not apply, run or destroy (exit $rc)"
}

check "$(command -v terraform)" registry.terraform.io
offline_base "$(command -v terraform)"

# Cached, or built within MEEPA_TOFU_BUILD_BUDGET seconds (unset: as long
# as it takes); tools.sh logs why when the leg is skipped.
rc=0
tofu=$(scripts/tools.sh within "${MEEPA_TOFU_BUILD_BUDGET:-86400}" tofu) || rc=$?
case $rc in
  0) ;;
  3) echo "install-test: SKIPPED the OpenTofu leg (above: why)"; tofu="" ;;
  *) fail "building OpenTofu failed (exit $rc)" ;;
esac
if [ -n "$tofu" ]; then
  "$tofu" version | head -1
  check "$tofu" registry.opentofu.org
fi

say "passed"
