#!/usr/bin/env bash
# runsc.sh: gVisor's runsc as a second OCI runtime of this host's dockerd,
# so that container_mode.runtime = "runsc" has something to run on.
#
#   scripts/runsc.sh docker   build runsc if needed (scripts/tools.sh), register
#                             it with dockerd as "runsc" and run a canary
#   scripts/runsc.sh check    only say whether dockerd has a working "runsc"
#
# Building: runsc and its containerd shim come from scripts/tools.sh (pinned,
# cached by version under /var/tmp/meepa-tools). With
# MEEPA_RUNSC_BUILD_BUDGET=<seconds> a runsc not built yet on this machine is
# built for at most that long; 0 builds nothing. When the budget does not
# reach, the script says so and exits 0 without registering anything: the
# runsc acceptance tests then skip, saying that dockerd has no runsc. Unset,
# the build takes what it takes (cold, 2 busy cores: see the README).
#
# Registering: the "runtimes" key of /etc/docker/daemon.json gets a "runsc"
# entry (the rest of the file is kept as it is; the file is checked with jq
# and replaced whole, never half-written), and dockerd is sent SIGHUP, which
# makes it reload its runtimes without touching a running container. dockerd
# is found by its own pid file, never by name. A dockerd started with
# --add-runtime runsc=... or a --config-file elsewhere is left alone, saying so.
#
# The runtime's arguments are part of the sandbox's boundary (each is
# explained in docs/guides/gvisor.md):
#   --host-uds=open  the sandbox may connect to a host unix socket bind-mounted
#                    into it: the runner's LLM relay (/run/meepa/relay.sock).
#                    It can open no other: only that directory is mounted.
#   --oci-seccomp    the container's seccomp profile (the product's own,
#                    sandbox.MessageSeccompProfile) is enforced by gVisor's
#                    kernel on the agent's processes too; without it runsc
#                    ignores the profile.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DAEMON_JSON=${MEEPA_DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
DOCKER_PID=${MEEPA_DOCKER_PIDFILE:-/var/run/docker.pid}
NAME=runsc
RUNTIME_ARGS='["--host-uds=open", "--oci-seccomp"]'

log() { printf '[runsc %s] %s\n' "$(date +%T)" "$*" >&2; }

# binary: prints runsc's path, building it within MEEPA_RUNSC_BUILD_BUDGET;
# prints nothing (and says why) when it is not to be had.
binary() {
  local rc=0 out
  out=$("$ROOT/scripts/tools.sh" within "${MEEPA_RUNSC_BUILD_BUDGET:-86400}" runsc) || rc=$?
  case $rc in
    0) echo "$out" ;;
    3) log "dockerd gets no runsc runtime and the runsc tests skip (above: why; scripts/runsc.sh docker builds it)" ;;
    *) log "building runsc failed (exit $rc)"; return "$rc" ;;
  esac
}

# registered_path: the path dockerd has for the runtime, empty if none.
registered_path() {
  docker info --format '{{with index .Runtimes "'"$NAME"'"}}{{.Path}}{{end}}' 2>/dev/null
}

# register BIN: merges the runtime into daemon.json and reloads dockerd.
register() {
  local bin=$1 want cur tmp pid
  want=$(jq -cn --arg p "$bin" --argjson a "$RUNTIME_ARGS" '{path: $p, runtimeArgs: $a}')
  if [ -s "$DAEMON_JSON" ]; then
    cur=$(jq -c --arg n "$NAME" '.runtimes[$n] // empty' "$DAEMON_JSON") ||
      { log "$DAEMON_JSON is not valid JSON; leaving it and dockerd alone"; return 1; }
  else
    cur=""
  fi
  if [ "$cur" != "$want" ]; then
    mkdir -p "$(dirname "$DAEMON_JSON")"
    tmp=$(mktemp "$DAEMON_JSON.XXXXXX")
    if [ -s "$DAEMON_JSON" ]; then
      jq --arg n "$NAME" --argjson r "$want" '.runtimes[$n] = $r' "$DAEMON_JSON" >"$tmp"
    else
      jq -n --arg n "$NAME" --argjson r "$want" '{runtimes: {($n): $r}}' >"$tmp"
    fi
    chmod 0644 "$tmp"
    mv "$tmp" "$DAEMON_JSON"
    log "registered $NAME ($bin) in $DAEMON_JSON"
  fi
  [ "$(registered_path)" = "$bin" ] && return 0
  pid=$(cat "$DOCKER_PID" 2>/dev/null || true)
  if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ]; then
    log "no dockerd behind $DOCKER_PID; it reads $DAEMON_JSON when it starts"
    return 1
  fi
  if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -Eq -- '--add-runtime|--config-file'; then
    log "dockerd $pid was started with --add-runtime or --config-file; register runsc there (left alone)"
    return 1
  fi
  log "reloading dockerd $pid (SIGHUP: running containers are not touched)"
  kill -HUP "$pid"
  for _ in $(seq 1 50); do
    [ "$(registered_path)" = "$bin" ] && return 0
    sleep 0.2
  done
  log "dockerd did not take the runtime; its log says why (reload errors are logged there)"
  return 1
}

# canary: one sandbox under runsc, as the product runs them: no network,
# read-only rootfs, every capability dropped, no new privileges.
canary() {
  local img=meepa-runsc-canary:1 out ctx
  if ! docker image inspect "$img" >/dev/null 2>&1; then
    [ -x /bin/busybox ] || { log "/bin/busybox missing (apt-get install busybox-static)"; return 1; }
    ctx=$(mktemp -d)
    mkdir -p "$ctx/bin"
    cp /bin/busybox "$ctx/bin/busybox"
    tar -C "$ctx" -c bin | docker import - "$img" >/dev/null
    rm -rf "$ctx"
  fi
  out=$(docker run --rm --runtime="$NAME" --network=none --read-only --cap-drop=ALL \
    --security-opt=no-new-privileges:true "$img" /bin/busybox uname -rv 2>&1) ||
    { log "canary failed under $NAME: $out"; return 1; }
  # gVisor's kernel names itself in its release ("4.19.0-gvisor").
  grep -q -- -gvisor <<<"$out" || { log "canary ran, but not under gVisor: $out"; return 1; }
  log "canary ran under gVisor ($(head -1 <<<"$out"))"
}

case ${1:-} in
  docker)
    bin=$(binary)
    [ -n "$bin" ] || exit 0
    v=$("$bin" --version)
    log "${v%%$'\n'*}"
    register "$bin"
    canary
    ;;
  check)
    p=$(registered_path)
    [ -n "$p" ] || { log "dockerd has no $NAME runtime"; exit 1; }
    canary
    ;;
  *) echo "usage: $0 docker|check" >&2; exit 2 ;;
esac
