#!/usr/bin/env bash
# k8s-up.sh: the project's single-node Kubernetes v1.37.2 test cluster, built
# from Go modules and Debian packages, offline, with no registry. Prints the
# path of an admin kubeconfig that processes on this host can use.
#
#   MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)   # then: scripts/k8s-down.sh [--purge]
#
# Idempotent: a healthy running cluster is reused as it is; a half-running
# one is stopped and started afresh. The binaries are built once (Go's usual
# GOCACHE/GOMODCACHE, so CI and later runs only link) and rebuilt only when
# the build inputs change. Work folder: $MEEPA_K8S_DIR (default
# /var/tmp/meepa-k8s).
#
# Every daemon (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, a private containerd with the CRI plugin, kubelet and
# kube-router for NetworkPolicy) runs inside one private network + mount
# namespace held open by a `sleep`. The pod bridge, veths, iptables and ipset
# rules, kubelet's mounts and the sysctls kubelet insists on exist only
# there: the host's iptables, sysctls and dockerd are not touched.
#
# How the host reaches the apiserver: one veth pair, $VETH_HOST on the host
# with $HOST_END/30 and $VETH_NS inside with $API_IP/30; the apiserver
# listens on :6443 inside, so https://$API_IP:6443 works from the host. The
# cluster's netns has no default route, and a policy rule there refuses
# anything from the pod bridge to the host's end, so pods get no path to the
# host through it (hostNetwork pods would: the sandbox never asks for one).
# A unix-socket forward was the alternative; it needs a forwarding process
# and a custom dialer in every client, while a plain kubeconfig works with
# client-go, kubectl and terraform alike.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/k8s/common.sh"
mkdir -p "$K"
# One up at a time; the daemons must not inherit the lock (fd 9 closed).
exec 9>"$K/up.lock"
flock 9

# start NAME CMD...: a daemon inside the namespaces, in its own session
start() {
  local name=$1
  shift
  nsenter -t "$(holder)" -n -m -- setsid "$@" </dev/null >"$R/logs/$name.log" 2>&1 9>&- &
  echo $! >"$R/pids/$name.pid"
}
# wait_for WHAT SECONDS CMD...
wait_for() {
  local what=$1 end=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS > end)); then
      log "timed out waiting for $what; logs in $R/logs"
      return 1
    fi
    sleep 0.2
  done
}

healthy() {
  local d
  alive "$(holder)" || return 1
  for d in $DAEMONS; do alive "$(pidof_ "$d")" || return 1; done
  [ -f "$KUBECONFIG_OUT" ] && kc get --raw /readyz >/dev/null 2>&1 &&
    [ "$(kc get node "$NODE" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

deps() {
  local missing=() p
  for p in containerd runc containernetworking-plugins ipset iptables openssl busybox-static curl util-linux iproute2; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

# fresh STAMP_NAME HASH BINARIES...: the binaries exist and were built from
# inputs with this hash
fresh() {
  local stamp=$1 hash=$2 b
  shift 2
  for b in "$@"; do [ -x "$BIN/$b" ] || return 1; done
  [ "$(cat "$BIN/.$stamp" 2>/dev/null)" = "$hash" ]
}

# build: only what is missing or was built from other inputs
build() {
  local t0=$SECONDS hash
  hash=$(cat "$here/k8s/build/go.mod" "$here/k8s/build/go.sum" "$here/k8s/build/build.sh" \
    "$here/k8s/build/cmd"/*/main.go | sha256sum | cut -d' ' -f1)
  if ! fresh k8s.inputs "$hash" kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd pause; then
    log "building Kubernetes v1.37.2, etcd and pause (from empty Go caches: 9 minutes or more)"
    "$here/k8s/build/build.sh" "$BIN"
    echo "$hash" >"$BIN/.k8s.inputs"
  fi
  hash=$(echo "$KUBE_ROUTER" | sha256sum | cut -d' ' -f1)
  if ! fresh kube-router.inputs "$hash" kube-router; then
    log "building kube-router"
    CGO_ENABLED=0 GOBIN=$BIN go install -trimpath -ldflags "-s -w" "$KUBE_ROUTER"
    echo "$hash" >"$BIN/.kube-router.inputs"
  fi
  log "binaries ready in $((SECONDS - t0)) s"
}

namespaces() {
  mkdir -p "$R"/{pids,logs,sysctl}
  setsid unshare --net --mount --propagation private sleep infinity </dev/null >/dev/null 2>&1 9>&- &
  echo $! >"$R/pids/holder.pid"
  local i
  for i in $(seq 50); do
    [ "$(readlink "/proc/$!/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
    sleep 0.1
  done
  nsx ip link set lo up
  nsx ip addr add "$NODE_IP/32" dev lo
  # The host's way in: see the header. (A pair whose holder died went
  # with it; one left some other way is replaced.)
  ip link del "$VETH_HOST" 2>/dev/null || true
  ip link add "$VETH_HOST" type veth peer name "$VETH_NS" netns "$(holder)"
  ip addr add "$HOST_END/30" dev "$VETH_HOST"
  ip link set "$VETH_HOST" up
  nsx ip addr add "$API_IP/30" dev "$VETH_NS"
  nsx ip link set "$VETH_NS" up
  nsx ip rule add iif "$BRIDGE" to "$HOST_END/32" prohibit pref 100
  # kubelet, containerd and libcni use these paths whatever they are told:
  # private stand-ins, bind-mounted inside our mount namespace. A mount
  # point missing on the host is made and listed for k8s-down.sh.
  local p q top
  for p in /var/lib/kubelet /var/log/containers /var/lib/cni /run/netns /run/containerd/s; do
    top="" q=$p
    while [ ! -e "$q" ]; do top=$q q=$(dirname "$q"); done
    if [ -n "$top" ]; then
      mkdir -p "$p"
      echo "$top" >>"$R/created-dirs.txt"
    fi
    mkdir -p "$R/host$p"
    nsx mount --bind "$R/host$p" "$p"
  done
  # kubelet sets these host-wide sysctls unless they already hold its
  # values; inside our mount namespace it reads and writes stand-in files.
  local kv f
  for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 \
    kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
    f=$R/sysctl/${kv%%=*}
    mkdir -p "$(dirname "$f")"
    echo "${kv#*=}" >"$f"
    nsx mount --bind "$f" "/proc/sys/${kv%%=*}"
  done
}

control_plane() {
  local P=$R/pki
  [ -f "$P/host.conf" ] || "$here/k8s/pki.sh" "$P" "$NODE" "$NODE_IP" "https://$NODE_IP:6443" "$API_IP"
  cp "$P/host.conf" "$KUBECONFIG_OUT"
  chmod 600 "$KUBECONFIG_OUT"
  mkdir -p "$R/etcd"
  start etcd "$BIN/etcd" --name meepa --data-dir "$R/etcd" \
    --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster meepa=http://127.0.0.1:2380 --unsafe-no-fsync --log-level warn
  wait_for etcd 30 nsx curl -sf http://127.0.0.1:2379/health
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$NODE_IP" \
    --tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
    --kubelet-client-certificate="$P/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$P/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$P/ca.crt" --kubelet-preferred-address-types=InternalIP \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
    --service-cluster-ip-range=10.96.0.0/24 --authorization-mode=Node,RBAC --profiling=false
  wait_for kube-apiserver 120 kc get --raw /readyz
  local auth=(--authentication-kubeconfig="$P/controller-manager.conf" --authorization-kubeconfig="$P/controller-manager.conf")
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$P/controller-manager.conf" "${auth[@]}" \
    --bind-address=127.0.0.1 --client-ca-file="$P/ca.crt" --root-ca-file="$P/ca.crt" \
    --cluster-signing-cert-file="$P/ca.crt" --cluster-signing-key-file="$P/ca.key" \
    --service-account-private-key-file="$P/sa.key" --use-service-account-credentials=true \
    --allocate-node-cidrs=true --cluster-cidr=10.244.0.0/16 --node-cidr-mask-size=24 \
    --service-cluster-ip-range=10.96.0.0/24 --leader-elect=false --profiling=false
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$P/scheduler.conf" \
    --authentication-kubeconfig="$P/scheduler.conf" --authorization-kubeconfig="$P/scheduler.conf" \
    --bind-address=127.0.0.1 --leader-elect=false --profiling=false
  wait_for kube-controller-manager 60 nsx curl -skf https://127.0.0.1:10257/healthz
  wait_for kube-scheduler 60 nsx curl -skf https://127.0.0.1:10259/healthz
  wait_for "the default service account" 60 kc -n default get serviceaccount default
}

# base_images: pause (the pod sandbox) and busybox, as tarballs in run/images
base_images() {
  local I=$R/images a
  rm -rf "$I"
  mkdir -p "$I"/busybox/{bin,etc,tmp} "$I/pause"
  cp /bin/busybox "$I/busybox/bin/"
  for a in $(/bin/busybox --list); do [ "$a" = busybox ] || ln -s busybox "$I/busybox/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$I/busybox/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$I/busybox/etc/group"
  chmod 1777 "$I/busybox/tmp"
  "$here/k8s/mkimage.sh" meepa.local/busybox:1 "$I/busybox" "$I/busybox.tar" '["/bin/sh"]'
  cp "$BIN/pause" "$I/pause/pause"
  "$here/k8s/mkimage.sh" meepa.local/pause:1 "$I/pause" "$I/pause.tar" '["/pause"]'
}

containerd_config() {
  cat <<EOT
version = 2
root = "$C/root"
state = "$C/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = "$C/containerd.sock"
[ttrpc]
  address = "$C/containerd.sock.ttrpc"
[debug]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$C/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "meepa.local/pause:1"
  disable_apparmor = true
  # Without CAP_SYS_RESOURCE runc cannot lower oom_score_adj (pause asks
  # for -998) and every sandbox fails: clamp at containerd's own value.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "$C/runc"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$R/cni/net.d"
    max_conf_num = 1
EOT
}

kubelet_config() {
  cat <<EOT
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $R/pki/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $R/pki/kubelet.crt
tlsPrivateKeyFile: $R/pki/kubelet.key
containerRuntimeEndpoint: unix://$C/containerd.sock
cgroupDriver: cgroupfs
cgroupRoot: /$CGROUP
failCgroupV1: false
failSwapOn: false
podLogsDir: $R/pod-logs
resolvConf: /etc/resolv.conf
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The Pod API has no per-pod pids limit: the node sets one for every pod.
podPidsLimit: 256
evictionHard: {memory.available: "100Mi", nodefs.available: "2%", imagefs.available: "2%"}
EOT
}

node() {
  local d
  for d in /sys/fs/cgroup/*/; do
    [ "$(stat -fc %T "$d")" = cgroupfs ] && mkdir -p "$d/$CGROUP"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$CGROUP/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$CGROUP/cpuset.mems"
  base_images
  mkdir -p "$C" "$R/cni/net.d" "$R/cni/ipam" "$R/kubelet/root" "$R/pod-logs"
  cat >"$R/cni/net.d/10-meepa.conflist" <<EOT
{"cniVersion": "1.0.0", "name": "meepa",
 "plugins": [{"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
              "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]],
                       "routes": [{"dst": "0.0.0.0/0"}], "dataDir": "$R/cni/ipam"}}]}
EOT
  containerd_config >"$C/config.toml"
  start containerd /usr/bin/containerd --config "$C/config.toml" --log-level warn
  wait_for containerd 30 ctr -a "$C/containerd.sock" version
  "$here/k8s/load-image.sh" "$R/images/pause.tar" >/dev/null
  "$here/k8s/load-image.sh" "$R/images/busybox.tar" >/dev/null
  kubelet_config >"$R/kubelet/config.yaml"
  start kubelet "$BIN/kubelet" --config="$R/kubelet/config.yaml" \
    --kubeconfig="$R/pki/kubelet-client.conf" --hostname-override="$NODE" \
    --node-ip="$NODE_IP" --root-dir="$R/kubelet/root" --v=1
  wait_for "node registration" 60 kc get node "$NODE"
  kc wait --for=condition=Ready "node/$NODE" --timeout=120s >/dev/null
}

netpol() {
  start kube-router "$BIN/kube-router" --kubeconfig="$R/pki/admin.conf" \
    --hostname-override="$NODE" --run-firewall=true --run-router=false \
    --run-service-proxy=false --enable-cni=false --metrics-port=0 \
    --service-cluster-ip-range=10.96.0.0/24 -v=1
  wait_for kube-router 60 nsx curl -sf http://127.0.0.1:20244/healthz
}

t0=$SECONDS
if healthy; then
  log "cluster already up"
  echo "$KUBECONFIG_OUT"
  exit 0
fi
if [ -f "$R/pids/holder.pid" ]; then
  log "a cluster is partly up: stopping it first"
  "$here/k8s-down.sh" 9>&- >&2
fi
deps
build
log "starting the cluster"
namespaces
control_plane
node
netpol
log "cluster up in $((SECONDS - t0)) s"
echo "$KUBECONFIG_OUT"
