package testkube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testregistry"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// Netns is the test cluster's network namespace, from the holder process
// scripts/k8s-up.sh records.
func Netns(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("MEEPA_K8S_DIR")
	if dir == "" {
		dir = "/var/tmp/meepa-k8s"
	}
	pid, err := os.ReadFile(filepath.Join(dir, "run", "pids", "holder.pid"))
	if err != nil {
		t.Skipf("the test cluster's namespace holder: %v", err)
	}
	return "/proc/" + strings.TrimSpace(string(pid)) + "/ns/net"
}

// Registry starts a plain-HTTP registry that listens on the same loopback
// address on the host (where the provider pushes) and inside the cluster's
// namespace (where the node's containerd pulls), and returns the address.
func Registry(t testing.TB) string {
	t.Helper()
	srv, addr, err := testregistry.Start("127.0.0.1:0", testregistry.Options{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "registry", srv.Close)
	ln, err := testregistry.ListenInNetns(Netns(t), addr)
	testutil.Must(t, err)
	srv.Serve(ln)
	return addr
}

// APIServer is host:port of the API server as pods reach it: the cluster
// runs no kube-proxy, so the kubernetes Service's address leads nowhere.
func APIServer(t testing.TB, c *kube.Client) string {
	t.Helper()
	list, err := c.Clientset.DiscoveryV1().EndpointSlices("default").List(context.Background(),
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	testutil.Must(t, err)
	for _, es := range list.Items {
		if len(es.Endpoints) > 0 && len(es.Endpoints[0].Addresses) > 0 && len(es.Ports) > 0 && es.Ports[0].Port != nil {
			return net.JoinHostPort(es.Endpoints[0].Addresses[0], strconv.Itoa(int(*es.Ports[0].Port)))
		}
	}
	t.Fatalf("no endpoint of the kubernetes Service: %+v", list.Items)
	return ""
}

// ReservedVolume is a hostPath PersistentVolume bound in advance to the
// claim of that name in c's namespace (the test cluster has no
// provisioner); its directory belongs to the sandbox user, since no
// fsGroup change reaches a hostPath. It returns the directory.
func ReservedVolume(t testing.TB, c *kube.Client, claim, size string) string {
	t.Helper()
	dir := testutil.SharedTempDir(t)
	testutil.Must(t, os.Chown(dir, sandbox.DefaultUID, sandbox.DefaultGID))
	name := c.Namespace + "-" + claim
	hostDir := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: claim},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}},
		},
	}
	_, err := c.Clientset.CoreV1().PersistentVolumes().Create(context.Background(), pv, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete volume "+name, func() error {
		err := c.Clientset.CoreV1().PersistentVolumes().Delete(context.Background(), name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	return dir
}

// Forward opens a port-forward to a pod's port through the API server and
// returns the local address; it closes when the test ends.
func Forward(t testing.TB, c *kube.Client, pod string, port int32) string {
	t.Helper()
	tr, up, err := spdy.RoundTripperFor(c.REST)
	testutil.Must(t, err)
	u := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.Namespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(up, &http.Client{Transport: tr}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	testutil.Must(t, err)
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward to %s: %v", pod, err)
	case <-time.After(30 * time.Second):
		t.Fatalf("port-forward to %s not ready after 30 s", pod)
	}
	t.Cleanup(func() { close(stop) })
	ports, err := fw.GetPorts()
	testutil.Must(t, err)
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local)
}

// ConfigPath is the test cluster's kubeconfig (MEEPA_KUBECONFIG); the test
// skips without it.
func ConfigPath(t testing.TB) string {
	t.Helper()
	kc := os.Getenv("MEEPA_KUBECONFIG")
	if kc == "" {
		t.Skip("needs a cluster: export MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)")
	}
	return kc
}

// Policies applies the NetworkPolicies of topology name in c's namespace,
// as kubetopology would without its proxy: a member pod waits for them
// before it runs (agent-run --await-blocked), so a test that runs members
// without them sees every message fail closed.
func Policies(t testing.TB, c *kube.Client, name string) {
	t.Helper()
	ctx := context.Background()
	cluster, err := kube.DiscoverCluster(ctx, c)
	testutil.Must(t, err)
	pols, err := kube.ThreeGatePolicies(kube.PolicyInput{Name: name, Namespace: c.Namespace, Cluster: cluster})
	testutil.Must(t, err)
	for i := range pols {
		_, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Create(ctx, &pols[i], metav1.CreateOptions{})
		testutil.Must(t, err)
	}
}

// ListenInCluster adds ip to the loopback of the cluster's namespace (the
// node's own network, which every pod routes to) and listens on it, so a
// test can serve something pods reach at an address of its choosing: not a
// node's, a pod's or the API server's. Both go when the test ends.
func ListenInCluster(t testing.TB, ip string) net.Listener {
	t.Helper()
	ns := addInCluster(t, ip)
	ln, err := testregistry.ListenInNetns(ns, net.JoinHostPort(ip, "0"))
	testutil.Must(t, err)
	testutil.Cleanup(t, "listener on "+ip, func() error {
		if err := ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			return err
		}
		return nil
	})
	return ln
}

// DNSInCluster serves testutil's DNS answers for names on ip:53 (UDP and
// TCP), an address added to the loopback of the cluster's namespace as
// ListenInCluster does: a resolver pods reach at ip, standing for the
// outside. Both go when the test ends.
func DNSInCluster(t testing.TB, ip string, names map[string]string) *testutil.DNSServer {
	t.Helper()
	ns := addInCluster(t, ip)
	return testutil.StartDNSInNetns(t, ns, net.JoinHostPort(ip, "53"), names)
}

// addInCluster adds ip/32 to lo in the cluster's namespace until the test
// ends, and returns the namespace's path.
func addInCluster(t testing.TB, ip string) string {
	t.Helper()
	ns := Netns(t)
	ipCmd := func(verb string) error {
		out, err := exec.Command("nsenter", "--net="+ns, "ip", "addr", verb, ip+"/32", "dev", "lo").CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip addr %s %s in the cluster's namespace: %w: %s", verb, ip, err, out)
		}
		return nil
	}
	testutil.Must(t, ipCmd("add"))
	testutil.Cleanup(t, "address "+ip, func() error { return ipCmd("del") })
	return ns
}
