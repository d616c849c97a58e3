#!/usr/bin/env bash
# k8s-down.sh: stops the test cluster of scripts/k8s-up.sh, every process by
# the pid it recorded, and removes what the cluster made outside its work
# folder (empty mount points, its cgroups). Safe to run more than once.
#   scripts/k8s-down.sh           keep run/ (logs, etcd data, images)
#   scripts/k8s-down.sh --purge   also delete run/; the built binaries stay
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/k8s/common.sh"

# stop NAME: TERM, up to 20 s, then KILL
stop() {
  local p i
  p=$(pidof_ "$1") || return 0
  if alive "$p"; then
    kill "$p"
    for i in $(seq 100); do
      alive "$p" || break
      sleep 0.2
    done
    if alive "$p"; then
      log "$1 did not exit: KILL"
      kill -9 "$p"
      sleep 0.5
    fi
  fi
  rm -f "$R/pids/$1.pid"
}

H=$(holder)
# Pods first, while kubelet runs, so CNI DEL and unmounts happen in order.
if alive "$(pidof_ kubelet)" && alive "$(pidof_ kube-apiserver)"; then
  kc delete pods --all --all-namespaces --grace-period=0 --force --timeout=60s >/dev/null 2>&1
fi
stop kube-router
stop kubelet
if alive "$(pidof_ containerd)"; then
  ctr=(ctr -a "$C/containerd.sock" -n k8s.io)
  for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$t"; done
  sleep 1
  for t in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$t" >/dev/null; done
  for c in $("${ctr[@]}" containers ls -q 2>/dev/null); do "${ctr[@]}" containers delete "$c" >/dev/null; done
fi
stop containerd
# Shims of our containerd name its socket on their command line.
for d in /proc/[0-9]*; do
  if { tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null | grep -q "^/usr/bin/containerd-shim-runc-v2 .*-address $C/containerd.sock "; then
    log "killing leftover shim ${d#/proc/}"
    kill "${d#/proc/}"
  fi
done
stop kube-scheduler
stop kube-controller-manager
stop kube-apiserver
stop etcd
# With the holder gone the kernel drops the namespaces and all in them: the
# bridge, the veth pair (its host end too), iptables, ipsets and mounts.
if [ -n "$H" ]; then
  netns=$(readlink "/proc/$H/ns/net" 2>/dev/null)
  stop holder
  if [ -n "$netns" ]; then
    for d in /proc/[0-9]*; do
      [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$netns" ] && log "WARNING: pid ${d#/proc/} is still in the cluster's netns"
    done
  fi
fi
if [ -f "$R/created-dirs.txt" ]; then
  while read -r top; do
    [ -d "$top" ] && find "$top" -depth -type d -empty -delete
    [ -e "$top" ] && log "WARNING: $top is not empty; left in place"
  done < <(sort -ru "$R/created-dirs.txt")
  rm -f "$R/created-dirs.txt"
fi
for d in /sys/fs/cgroup/*/"$CGROUP"; do
  [ -d "$d" ] && find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null
  [ -d "$d" ] && log "WARNING: could not remove $d"
done
# A veth whose peer namespace vanished goes with it; this is belt and braces.
ip link show "$VETH_HOST" >/dev/null 2>&1 && ip link del "$VETH_HOST"
rm -f "$KUBECONFIG_OUT"
[ "${1:-}" = --purge ] && rm -rf "$R"
log "down"
