#!/usr/bin/env bash
# The quickstart, end to end, on this machine:
#   scripts/demo.sh up     build the local base image if missing, install the
#                          provider with `terraform init` from the mirror,
#                          apply examples/quickstart, show what it made, prove
#                          a second plan is empty, print timings
#   scripts/demo.sh down   destroy what `up` made (the base image stays)
# Run `make mirror-host` first (make demo does): GoReleaser builds the release
# archive for this host (provider and agent-runner), `make install-mirror`
# checks it and lays it out in bin/mirror, and writes bin/mirror.tfrc, a CLI
# configuration that installs bogpad/meepa from there and nowhere else. So the
# quickstart runs what an operator installs: a broken archive, a wrong
# checksum or a missing runner fails here. The snapshot is signed with a
# throwaway key made in that run, not the pinned release key (releasekey/),
# so mirror-host installs it with MEEPA_TRUST_SNAPSHOT_KEY=1 and prints
# "trusting this run's throwaway snapshot key"; a plain `make install-mirror`
# refuses it.
#
# Each stage is one function; `up` runs them in order. New parts of the
# quickstart (networks, agents) add a stage and a line in `up`.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
QS="$ROOT/examples/quickstart"
BASE_IMAGE=${MEEPA_QUICKSTART_BASE:-meepa-quickstart/base:latest}
export TF_CLI_CONFIG_FILE="$ROOT/bin/mirror.tfrc"
MIRROR="$ROOT/bin/mirror/registry.terraform.io/bogpad/meepa"
export TF_IN_AUTOMATION=1

declare -a TIMINGS=()

say() { printf '\n==> %s\n' "$*"; }
now() { date +%s.%N; }
# timed LABEL CMD...: runs CMD, records how long it took under LABEL.
timed() {
  local label=$1 start end rc=0
  shift
  start=$(now)
  "$@" || rc=$?
  end=$(now)
  TIMINGS+=("$(awk -v l="$label" -v s="$start" -v e="$end" 'BEGIN { printf "%-30s %6.2fs", l, e - s }')")
  return $rc
}
# tf SUBCOMMAND ARGS...: terraform in the quickstart directory, without
# colour codes when the output is not a terminal (CI logs, `| tee`).
tf() {
  local sub=$1
  shift
  if [ -t 1 ]; then
    terraform -chdir="$QS" "$sub" "$@"
  else
    terraform -chdir="$QS" "$sub" -no-color "$@"
  fi
}

# The quickstart asks for the version install-mirror put in the mirror last,
# in an override file beside it (git ignores it): a snapshot is a
# pre-release (0.1.0-dev.<commits>.g<commit>), which Terraform installs only
# when asked for exactly, and the mirror keeps earlier builds too.
PIN="$QS/snapshot_override.tf"

require_mirror() {
  if [ ! -f "$TF_CLI_CONFIG_FILE" ] || [ ! -f "$MIRROR/index.json" ] || [ ! -s "$ROOT/bin/mirror.version" ]; then
    echo "demo: no provider mirror in bin/; run \`make mirror-host\` first (or \`make demo\`)" >&2
    exit 1
  fi
  VERSION=$(cat "$ROOT/bin/mirror.version")
  cat >"$PIN" <<EOF
# Written by scripts/demo.sh: the build make mirror-host installed last.
terraform {
  required_providers {
    meepa = {
      source  = "bogpad/meepa"
      version = "$VERSION"
    }
  }
}
EOF
}

# stage: the provider, installed by `terraform init` from the mirror, as an
# operator would. The lock file and the unpacked copy of an earlier build are
# dropped first: the lock file pins the build it recorded, and a work tree
# with uncommitted changes rebuilds under its commit's version.
init() {
  rm -rf "$QS/.terraform/providers/registry.terraform.io/bogpad/meepa" "$QS/.terraform.lock.hcl"
  say "terraform init (bogpad/meepa from $ROOT/bin/mirror)"
  timed "terraform init from the mirror" tf init -input=false
  say "$QS/.terraform.lock.hcl"
  cat "$QS/.terraform.lock.hcl"
  # The checksum Terraform computed from the archive it unpacked must be
  # the one the mirror's index publishes for this platform.
  local platform version=$VERSION lock_h1 index_h1
  platform="$(go env GOOS)_$(go env GOARCH)"
  lock_h1=$(grep -o '"h1:[^"]*"' "$QS/.terraform.lock.hcl" | tr -d '"')
  index_h1=$(jq -r --arg p "$platform" '.archives[$p].hashes[] | select(startswith("h1:"))' "$MIRROR/$version.json")
  if [ -z "$lock_h1" ] || [ "$lock_h1" != "$index_h1" ]; then
    echo "demo: lock file checksum '$lock_h1' is not the mirror's '$index_h1' for $platform" >&2
    exit 1
  fi
  echo "lock file checksum = mirror index checksum for $platform"
  INSTALLED="$QS/.terraform/providers/registry.terraform.io/bogpad/meepa/$version/$platform"
}

# stage: a base image made here, FROM scratch with Debian's static busybox,
# because no registry is needed (or reachable) for the quickstart.
ensure_base() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base image $BASE_IMAGE is there"
    return
  fi
  say "building base image $BASE_IMAGE from /bin/busybox"
  [ -x /bin/busybox ] || { echo "demo: /bin/busybox missing (apt-get install busybox-static)" >&2; exit 1; }
  local ctx
  ctx=$(mktemp -d)
  cp /bin/busybox "$ctx/busybox"
  cat >"$ctx/Dockerfile" <<'EOF'
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox --install -s /bin && mkdir -p /tmp /etc /workspace && echo 'root:x:0:0:root:/root:/bin/sh' > /etc/passwd && echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh' >> /etc/passwd"]
ENV PATH=/usr/local/bin:/usr/bin:/bin
LABEL io.meepa.managed-by=terraform-provider-meepa io.meepa.component=quickstart-base
EOF
  DOCKER_BUILDKIT=0 docker build -q -t "$BASE_IMAGE" "$ctx" 2> >(grep -v -i -E 'deprecated|buildkit|environment-variable' >&2)
  rm -rf "$ctx"
}

# stage: the isolation image.
apply() {
  say "terraform apply (examples/quickstart)"
  timed "first terraform apply" tf apply -auto-approve -input=false -var "base_image=$BASE_IMAGE"
}

# stage: the image's runner is the one from the installed archive, and it
# reports the provider's version and commit.
show_image() {
  local img provider runner want got
  img=$(tf output -raw isolated_image)
  say "docker run --rm $img agent-runner version"
  runner=$(docker run --rm "$img" agent-runner version)
  echo "$runner"
  provider=$("$INSTALLED"/terraform-provider-meepa_v* -version)
  echo "$provider   (the provider terraform init installed)"
  if [ "${runner#agent-runner }" != "${provider#terraform-provider-meepa }" ]; then
    echo "demo: the runner and the provider report different builds" >&2
    exit 1
  fi
  want=$(sha256sum "$INSTALLED/agent-runner-linux-$(go env GOARCH)" | cut -d' ' -f1)
  got=$(tf show -json | jq -r '.values.root_module.resources[] | select(.type == "meepa_isolation_image") | .values.runner_sha256')
  if [ "$got" != "$want" ]; then
    echo "demo: the image's runner ($got) is not the archive's ($want)" >&2
    exit 1
  fi
  echo "the image's agent-runner is the archive's (sha256 $want)"
}

# send AGENT TEXT [LABEL]: posts a message to an agent's endpoint with its
# token and prints the reply (curl --unix-socket for a unix endpoint). With
# LABEL, the curl round trip alone is recorded in the timings.
send() {
  local agent=$1 text=$2 label=${3:-} endpoint token body
  endpoint=$(tf output -raw "${agent}_endpoint")
  token=$(tf output -raw "${agent}_token")
  text=${text//\\/\\\\}
  text=${text//\"/\\\"}
  body=$(printf '{"text": "%s"}' "$text")
  local -a where
  case $endpoint in
    unix://*) where=(--unix-socket "${endpoint#unix://}" http://localhost/v1/messages) ;;
    *) where=("$endpoint/v1/messages") ;;
  esac
  echo "\$ curl ${where[*]} -H 'Authorization: Bearer ***' -d '$body'"
  local out
  local -a cmd=(curl -sS --fail-with-body -o "$WORK/reply.json" -H "Authorization: Bearer $token"
    -H 'Content-Type: application/json' -d "$body" "${where[@]}")
  if [ -n "$label" ]; then timed "$label" "${cmd[@]}"; else "${cmd[@]}"; fi
  out=$(cat "$WORK/reply.json")
  if command -v jq >/dev/null; then
    printf '%s\n' "$out" | jq -r '"reply: " + .reply + "   (" + (.duration_ms|tostring) + " ms in the agent loop)"'
  else
    printf '%s\n' "$out"
  fi
}

# expect_reply TEXT: the last reply must contain TEXT.
expect_reply() {
  if ! grep -qF -- "$1" "$WORK/reply.json"; then
    echo "demo: the reply does not contain \"$1\": $(cat "$WORK/reply.json")" >&2
    exit 1
  fi
}

# stage: a message to each agent through its endpoint.
messages() {
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' RETURN
  local proxy
  proxy=$(tf output -raw proxy_url)
  say "a message to each agent"
  send helper "hello from the quickstart" "message round trip (helper)"
  send helper '!sh id; touch /etc/x; cat SOUL.md'
  send core "hello CORE" "message round trip (core)"
  say "CORE has no shell: the runner refuses the tool, whatever the model asks"
  send core '!sh id'
  expect_reply "is not available to this CORE agent"
  # CORE asks TOOL-EXEC, whose shell has no network at all: only lo, and the
  # proxy out of reach. Nothing leaves the host.
  say "CORE asks TOOL-EXEC (through the runners' own sockets)"
  local hp=${proxy#http://}
  send core "!ask qs-exec !sh echo \$((6*7)); ip -4 -o addr show | cut -d' ' -f2,7; if nc -w 2 ${hp%:*} ${hp##*:} </dev/null; then echo proxy REACHABLE; else echo proxy $hp unreachable from TOOL-EXEC; fi" \
    "ask round trip (core -> tool_exec)"
  expect_reply "42"
  expect_reply "unreachable from TOOL-EXEC"
  say "CORE joins only: $(tf output -json core_networks)"
  say "a request without the token (expect 401)"
  local endpoint
  endpoint=$(tf output -raw helper_endpoint)
  curl -sS -o /dev/null -w 'HTTP %{http_code}\n' --unix-socket "${endpoint#unix://}" -d '{"text":"x"}' http://localhost/v1/messages
}

# stage: nothing left to do. -detailed-exitcode: 0 empty, 2 changes, 1 error.
check_no_change() {
  say "terraform plan -detailed-exitcode (must be empty)"
  local rc=0
  timed "no-change terraform plan" tf plan -detailed-exitcode -input=false -var "base_image=$BASE_IMAGE" || rc=$?
  case $rc in
    0) echo "plan is empty" ;;
    2) echo "demo: the second plan is not empty" >&2; exit 1 ;;
    *) exit "$rc" ;;
  esac
}

report() {
  say "timings"
  printf '%s\n' "${TIMINGS[@]}"
}

up() {
  require_mirror
  ensure_base
  init
  apply
  show_image
  messages
  check_no_change
  report
}

down() {
  require_mirror
  # The provider `up` installed destroys; init only when there is none.
  [ -d "$QS/.terraform/providers/registry.terraform.io/bogpad/meepa" ] || init
  say "terraform destroy (examples/quickstart)"
  tf destroy -auto-approve -input=false -var "base_image=$BASE_IMAGE"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
