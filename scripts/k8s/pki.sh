#!/usr/bin/env bash
# Makes the test cluster's throw-away CA, the certificates of its components
# and their kubeconfigs, all with openssl (EC P-256, valid 30 days).
#   pki.sh DIR NODE_NAME NODE_IP API_URL HOST_API_IP
# DIR/host.conf is the admin kubeconfig for processes on the host (it names
# the apiserver by HOST_API_IP); the other *.conf name API_URL.
set -euo pipefail
dir=$1 node=$2 node_ip=$3 url=$4 host_ip=$5
mkdir -p "$dir"
cd "$dir"
umask 077
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1.key" 2>/dev/null; }
# issue NAME SUBJECT EXTRA_EXTENSIONS: a leaf certificate signed by ca.key
issue() {
  newkey "$1"
  openssl req -new -key "$1.key" -subj "$2" -out "$1.csr"
  printf '%s\n' "basicConstraints=CA:FALSE" "keyUsage=critical,digitalSignature,keyEncipherment" "$3" >"$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 -sha256 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
newkey ca
openssl req -x509 -new -key ca.key -subj "/CN=meepa-test-ca" -days 30 -sha256 -out ca.crt \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature"
issue apiserver "/CN=kube-apiserver" "extendedKeyUsage=serverAuth
subjectAltName=DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,IP:127.0.0.1,IP:$node_ip,IP:$host_ip,IP:10.96.0.1"
issue apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "extendedKeyUsage=clientAuth"
issue kubelet "/CN=$node" "extendedKeyUsage=serverAuth
subjectAltName=DNS:$node,IP:$node_ip,IP:127.0.0.1"
issue admin "/O=system:masters/CN=meepa-test-admin" "extendedKeyUsage=clientAuth"
issue controller-manager "/CN=system:kube-controller-manager" "extendedKeyUsage=clientAuth"
issue scheduler "/CN=system:kube-scheduler" "extendedKeyUsage=clientAuth"
issue kubelet-client "/O=system:nodes/CN=system:node:$node" "extendedKeyUsage=clientAuth"
newkey sa
openssl pkey -in sa.key -pubout -out sa.pub
b64() { base64 -w0 <"$1"; }
# kubeconfig FILE USER SERVER
kubeconfig() {
  cat >"$1" <<EOK
apiVersion: v1
kind: Config
clusters:
- name: meepa-test
  cluster:
    server: $3
    certificate-authority-data: $(b64 ca.crt)
users:
- name: $2
  user:
    client-certificate-data: $(b64 "$2.crt")
    client-key-data: $(b64 "$2.key")
contexts:
- name: meepa-test
  context: {cluster: meepa-test, user: $2}
current-context: meepa-test
EOK
}
for u in admin controller-manager scheduler kubelet-client; do kubeconfig "$u.conf" "$u" "$url"; done
kubeconfig host.conf admin "https://$host_ip:6443"
