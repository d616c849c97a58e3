package kube

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/testregistry"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// clusterNetns is the test cluster's network namespace, from the holder
// process scripts/k8s-up.sh records.
func clusterNetns(t *testing.T) string {
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

// TestClusterPullsPushedImage is the whole path of an image: built on the
// Docker daemon, pushed by digest to a registry that listens on the same
// loopback address on the host and inside the cluster's namespace, and
// pulled from there by the node's containerd for a pod that names it
// by digest (pull policy Always, so nothing cached stands in for it).
func TestClusterPullsPushedImage(t *testing.T) {
	cs := clusterClient(t)
	nsPath := clusterNetns(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	local := testutil.EnsureBusybox(t, cli)

	srv, addr, err := testregistry.Start("127.0.0.1:0", testregistry.Options{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "registry", srv.Close)
	ln, err := testregistry.ListenInNetns(nsPath, addr)
	testutil.Must(t, err)
	srv.Serve(ln)
	p, err := NewImagePusher(cli, RegistryConfig{Address: addr, Insecure: true}, nil)
	testutil.Must(t, err)
	pushed, err := p.Push(ctx, local)
	testutil.Must(t, err)

	ns := "tf-acc-pull-" + randHex(4)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "namespace "+ns, func() error {
		return cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	waitServiceAccount(t, cs, ns)
	one := int64(1)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pulled"},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &one, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "c", Image: pushed.Ref, ImagePullPolicy: corev1.PullAlways,
				Command: []string{"/bin/echo", "pulled by digest"},
			}},
		},
	}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	testutil.Must(t, err)
	done := waitPod(t, cs, ns, "pulled", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	if st := done.Status.ContainerStatuses; len(st) != 1 || !strings.HasSuffix(st[0].ImageID, pushed.Digest) {
		t.Errorf("the pod ran image %+v; pushed %s", st, pushed.Digest)
	}
	raw, err := cs.CoreV1().Pods(ns).GetLogs("pulled", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil || strings.TrimSpace(string(raw)) != "pulled by digest" {
		t.Errorf("pod output %q, %v", raw, err)
	}
}
