#!/usr/bin/env bash
# Installs and starts what the tests and the quickstart need on a Debian host:
# Docker Engine (Debian's docker.io), iptables, a static busybox for the
# from-scratch test images, and debootstrap for the real package-install test.
# Safe to run again: it installs only what is missing and starts dockerd only
# when nothing answers on its socket.
set -euo pipefail

need=()
for pkg in docker.io iptables busybox-static debootstrap iproute2 jq curl; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "ensure-docker: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi

if docker version >/dev/null 2>&1; then
  exit 0
fi

log=${DOCKERD_LOG:-/var/log/meepa-dockerd.log}
echo "ensure-docker: starting dockerd (log: $log)" >&2
# Run under `flock /tmp/meepa-acc.lock`, this shell holds the lock's file
# descriptor; dockerd must not inherit it, or it holds the lock for as long
# as it runs and every other user of the lock waits for ever.
# (bash reads this script on fd 255, so only 3-19 are closed, for dockerd.)
(
  for fd in $(seq 3 19); do eval "exec $fd>&-"; done
  exec nohup dockerd >"$log" 2>&1
) &
for _ in $(seq 1 60); do
  if docker version >/dev/null 2>&1; then
    exit 0
  fi
  sleep 0.5
done
echo "ensure-docker: dockerd did not answer within 30s; last lines of $log:" >&2
tail -n 20 "$log" >&2
exit 1
