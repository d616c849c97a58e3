#!/usr/bin/env bash
# Release artifacts with GoReleaser (.goreleaser.yaml), and the mirror made
# from them. Called by the GNUmakefile, which pins GoReleaser (GORELEASER)
# and the version (VERSION):
#
#   scripts/release.sh snapshot [--single-target]
#       dist/ for VERSION from the work tree as it is, signed with
#       GPG_FINGERPRINT when set, else with a throwaway key made here and
#       forgotten afterwards (its fingerprint is kept in bin/snapshot-key.fpr
#       for `mirror`). --single-target builds the host's platform only
#       (the provider and the runner for it), with the same names and layout:
#       .goreleaser.yaml with its target lists cut to linux/<host arch>
#       (`goreleaser release` has no --single-target of its own).
#   scripts/release.sh release
#       dist/ for the tag vVERSION on HEAD, signed with GPG_FINGERPRINT,
#       which must be the release key pinned in releasekey/release-key.asc
#       (its secret half in the keyring, GNUPGHOME). Published as a GitHub
#       release when GITHUB_TOKEN is set; otherwise dist/ is left to upload.
#   scripts/release.sh mirror DIR [RUNNERS]
#       checks dist/ (the signature against the pinned release key, sums,
#       archives, the runners for RUNNERS, e.g. "amd64,arm64") and installs
#       it into the mirror DIR, for the version dist/ holds (a snapshot's is
#       not VERSION: the GNUmakefile builds it as SNAPSHOT_VERSION). Without
#       RUNNERS: the runners the last snapshot made here was built with, when
#       dist/ is that snapshot (its SHA256SUMS recorded in
#       bin/snapshot-runners), else amd64,arm64. With
#       MEEPA_TRUST_SNAPSHOT_KEY=1 the throwaway key of the last snapshot
#       made here is trusted too, and it says so. Writes the installed
#       version to bin/mirror.version.
#
# Every run leaves dist/signing-key.asc, the public half of the key that
# signed, for whoever looks at the release by hand. Nothing trusts it for
# that: a key shipped beside a release vouches for nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export VERSION=${VERSION:?set VERSION}
export COMMIT=${COMMIT:-}
GORELEASER=${GORELEASER:?set GORELEASER (the GNUmakefile pins it)}
# GoReleaser gives up after 1h by default, with its builds thrown away; a
# cold full snapshot on a busy 2-core machine took longer than that.
GORELEASER_TIMEOUT=${GORELEASER_TIMEOUT:-3h}
DIST="$ROOT/dist"
PREFIX="terraform-provider-meepa_${VERSION}"
# The release key, pinned in the repository (releasekey/README.md).
RELEASE_KEY="$ROOT/releasekey/release-key.asc"
# The throwaway key of the last snapshot made in this work tree: outside
# dist/, so that a dist/ brought from elsewhere cannot name its own key.
SNAPSHOT_KEY_RECORD="$ROOT/bin/snapshot-key.fpr"
# What the last snapshot made here built: "<sha256 of its SHA256SUMS> <runners>".
# Outside dist/ too: a dist/ from elsewhere is checked for every runner.
SNAPSHOT_RUNNERS_RECORD="$ROOT/bin/snapshot-runners"
# Every runner a full release carries.
ALL_RUNNERS=amd64,arm64

ensure_gpg() {
  command -v gpg >/dev/null && command -v gpgv >/dev/null && return
  echo "release: installing gnupg" >&2
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnupg >/dev/null
}

# throwaway_key: a fresh RSA signing key (the registry accepts RSA and DSA)
# in a keyring of its own; GNUPGHOME and GPG_FINGERPRINT point at it.
throwaway_key() {
  GNUPGHOME=$(mktemp -d)
  export GNUPGHOME
  trap 'gpgconf --kill gpg-agent >/dev/null 2>&1 || true; rm -rf "$GNUPGHOME"' EXIT
  gpg --batch --quiet --passphrase '' --quick-gen-key \
    "meepa snapshot, throwaway <snapshot@meepa.invalid>" rsa3072 sign 1d
  GPG_FINGERPRINT=$(gpg --batch --with-colons --list-secret-keys | awk -F: '$1 == "fpr" { print $10; exit }')
  export GPG_FINGERPRINT
  THROWAWAY=1
  echo "release: signing with throwaway key $GPG_FINGERPRINT" >&2
}

# pinned_fingerprint: the primary fingerprint of the pinned release key.
pinned_fingerprint() {
  gpg --batch --with-colons --import-options show-only --import "$RELEASE_KEY" 2>/dev/null |
    awk -F: '$1 == "fpr" { print $10; exit }'
}

# require_pinned_signer: GPG_FINGERPRINT must name exactly one secret key in
# the keyring, and that key must be the pinned release key; anything else
# would sign a release that `mirror` (and the registry) refuse.
require_pinned_signer() {
  local pinned listing n signer
  pinned=$(pinned_fingerprint)
  [ -n "$pinned" ] || { echo "release: cannot read the pinned release key $RELEASE_KEY" >&2; exit 1; }
  listing=$(gpg --batch --with-colons --list-secret-keys -- "$GPG_FINGERPRINT" 2>/dev/null) || true
  n=$(printf '%s\n' "$listing" | grep -c '^sec:' || true)
  if [ "$n" -ne 1 ]; then
    echo "release: GPG_FINGERPRINT=$GPG_FINGERPRINT names $n secret keys in ${GNUPGHOME:-~/.gnupg}, want the pinned release key $pinned" >&2
    exit 1
  fi
  signer=$(printf '%s\n' "$listing" | awk -F: '$1 == "fpr" { print $10; exit }')
  if [ "$signer" != "$pinned" ]; then
    echo "release: GPG_FINGERPRINT=$GPG_FINGERPRINT is key $signer, not the pinned release key $pinned ($RELEASE_KEY); make release signs with that key only (releasekey/README.md says how to replace it)" >&2
    exit 1
  fi
  echo "release: signing with the pinned release key $pinned" >&2
}

# finish: what GoReleaser does not put in dist/ itself.
finish() {
  # Hashed in SHA256SUMS by the checksum step, but not copied (only a
  # published release uploads it).
  cp terraform-registry-manifest.json "$DIST/${PREFIX}_manifest.json"
  gpg --batch --armor --export "$GPG_FINGERPRINT" >"$DIST/signing-key.asc"
  ls -l "$DIST"/"${PREFIX}"_* "$DIST/signing-key.asc" | awk '{ printf "%10d  %s\n", $5, $NF }'
}

# host_config FILE: .goreleaser.yaml for linux/<host arch> only, in FILE.
# Fails when the target lines it rewrites are not found as expected.
host_config() {
  local arch n
  arch=$(go env GOARCH)
  sed -e 's/^\(    goos: \)\[linux, darwin\]$/\1[linux]/' \
      -e "s/^\(    goarch: \)\[amd64, arm64\]\$/\1[$arch]/" .goreleaser.yaml >"$1"
  n=$(diff .goreleaser.yaml "$1" | grep -c '^>' || true)
  if [ "$n" -ne 3 ]; then
    echo "release: .goreleaser.yaml's goos/goarch lines changed; update host_config in $0" >&2
    exit 1
  fi
}

snapshot() {
  ensure_gpg
  rm -f "$SNAPSHOT_KEY_RECORD" "$SNAPSHOT_RUNNERS_RECORD"
  THROWAWAY=
  if [ -z "${GPG_FINGERPRINT:-}" ]; then throwaway_key; fi
  local -a cfg=()
  local runners=$ALL_RUNNERS
  if [ "${1:-}" = --single-target ]; then
    CFG_TMP=$(mktemp --suffix=.yaml)
    host_config "$CFG_TMP"
    cfg=(--config "$CFG_TMP")
    runners=$(go env GOARCH)
  fi
  # The version comes from VERSION, not from git tags (there may be none).
  local rc=0
  GORELEASER_CURRENT_TAG="v$VERSION" $GORELEASER release --snapshot --clean --timeout "$GORELEASER_TIMEOUT" "${cfg[@]}" || rc=$?
  rm -f "${CFG_TMP:-}"
  [ "$rc" -eq 0 ] || exit "$rc"
  finish
  mkdir -p "$(dirname "$SNAPSHOT_KEY_RECORD")"
  echo "$(sha256sum <"$DIST/${PREFIX}_SHA256SUMS" | cut -d' ' -f1) $runners" >"$SNAPSHOT_RUNNERS_RECORD"
  if [ -n "$THROWAWAY" ]; then
    echo "$GPG_FINGERPRINT" >"$SNAPSHOT_KEY_RECORD"
  fi
}

release() {
  ensure_gpg
  : "${GPG_FINGERPRINT:?set GPG_FINGERPRINT to the fingerprint of the release key (imported into GNUPGHOME)}"
  require_pinned_signer
  local -a skip=()
  [ -n "${GITHUB_TOKEN:-}" ] || skip=(--skip=publish)
  GORELEASER_CURRENT_TAG="v$VERSION" $GORELEASER release --clean --timeout "$GORELEASER_TIMEOUT" "${skip[@]}"
  finish
  # What was signed is checked as install-mirror will check it.
  go run ./cmd/meepa-mirror -dist "$DIST" -version "$VERSION" -check-only
}

# dist_version: the version of the one release in dist/ (GoReleaser's
# --clean leaves one). Taken from a file name, but only as a name: the
# signature, the sums and the binary names are all checked against it.
dist_version() {
  local -a found
  local v
  shopt -s nullglob
  found=("$DIST"/terraform-provider-meepa_*_SHA256SUMS)
  shopt -u nullglob
  case ${#found[@]} in
    1) v=${found[0]##*/terraform-provider-meepa_}; echo "${v%_SHA256SUMS}" ;;
    0) echo "release: no $DIST/terraform-provider-meepa_<version>_SHA256SUMS; run make release-snapshot first" >&2; exit 1 ;;
    *) echo "release: $DIST holds more than one release (${found[*]##*/}); make one afresh" >&2; exit 1 ;;
  esac
}

mirror() {
  local dir=${1:?mirror DIR [RUNNERS]} runners=${2:-}
  VERSION=$(dist_version)
  PREFIX="terraform-provider-meepa_${VERSION}"
  local sums="$DIST/${PREFIX}_SHA256SUMS"
  if [ -z "$runners" ]; then
    local rec_sum="" rec_runners=""
    [ -s "$SNAPSHOT_RUNNERS_RECORD" ] && read -r rec_sum rec_runners <"$SNAPSHOT_RUNNERS_RECORD"
    if [ -n "$rec_runners" ] && [ "$rec_sum" = "$(sha256sum <"$sums" | cut -d' ' -f1)" ]; then
      runners=$rec_runners
      echo "release: dist/ is the snapshot made here, built with the runners for $runners" >&2
    else
      runners=$ALL_RUNNERS
    fi
  fi
  # meepa-mirror checks the signature against the pinned release key; the
  # opt-in adds the throwaway key recorded by the last snapshot made here,
  # never one that dist/ names.
  local -a trust=()
  case "${MEEPA_TRUST_SNAPSHOT_KEY:-}" in
    "" | 0 | no | false) ;;
    *)
      if [ -s "$SNAPSHOT_KEY_RECORD" ]; then
        trust=(-trust-snapshot-key "$(cat "$SNAPSHOT_KEY_RECORD")")
      else
        echo "release: MEEPA_TRUST_SNAPSHOT_KEY is set, but no snapshot made here recorded a throwaway key ($SNAPSHOT_KEY_RECORD): only the pinned release key is trusted" >&2
      fi
      ;;
  esac
  go run ./cmd/meepa-mirror -dist "$DIST" -version "$VERSION" -runners "$runners" -dir "$dir" "${trust[@]}"
  mkdir -p "$ROOT/bin"
  echo "$VERSION" >"$ROOT/bin/mirror.version"
  case $VERSION in
    *-*) echo "release: $VERSION is a pre-release: Terraform and OpenTofu install it only when required_providers asks for it exactly: version = \"$VERSION\"" ;;
  esac
}

case "${1:-}" in
  snapshot) shift; snapshot "$@" ;;
  release) release ;;
  mirror) shift; mirror "$@" ;;
  *) echo "usage: $0 snapshot [--single-target] | release | mirror DIR [RUNNERS]" >&2; exit 2 ;;
esac
