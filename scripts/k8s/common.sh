# Sourced by scripts/k8s-up.sh, scripts/k8s-down.sh and scripts/k8s/*.sh:
# the test cluster's paths and names, and helpers to reach its namespaces.
# MEEPA_K8S_DIR moves the work folder (default /var/tmp/meepa-k8s).
K=${MEEPA_K8S_DIR:-/var/tmp/meepa-k8s}
BIN=$K/bin  # built binaries (reused while build inputs are unchanged)
R=$K/run    # one cluster's state: pids, logs, certs, etcd, containerd
C=$R/containerd
KUBECONFIG_OUT=$K/kubeconfig # admin kubeconfig for host processes
NODE=meepa-node
NODE_IP=10.250.0.1      # on lo inside the cluster's netns only
POD_CIDR=10.244.0.0/24  # behind bridge cni-meepa0, inside the netns only
BRIDGE=cni-meepa0
# The host reaches the apiserver over one veth pair on a /30: HOST_END in
# the host's netns, API_IP inside the cluster's. Nothing routes pods to it.
VETH_HOST=meepak8s0
VETH_NS=meepak8s1
HOST_END=10.250.255.1
API_IP=10.250.255.2
CGROUP=meepa-k8s        # kubelet cgroupRoot, one per v1 hierarchy
KUBE_ROUTER=github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@v2.1.0
DAEMONS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-router"

log() { printf '[k8s %s] %s\n' "$(date +%T.%3N)" "$*" >&2; }
pidof_() { cat "$R/pids/$1.pid" 2>/dev/null; }
alive() { [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null; }
holder() { pidof_ holder; }
# nsx CMD...: run inside the cluster's network and mount namespaces
nsx() { nsenter -t "$(holder)" -n -m -- "$@"; }
# kc ARGS...: kubectl as admin from the host, over the veth
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_OUT" "$@"; }
