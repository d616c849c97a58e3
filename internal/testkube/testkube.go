// Package testkube connects tests to the project's own cluster
// (scripts/k8s-up.sh): a fresh namespace per test, this build's runner
// image imported into the cluster's containerd, and hostPath workspace
// claims. Tests of package kube itself keep their own copy: they cannot
// import a package that imports kube.
package testkube

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

var seq atomic.Int64

// Cluster skips without TF_ACC or MEEPA_KUBECONFIG, and connects to a
// fresh namespace (named after prefix) that is deleted when the test ends.
func Cluster(t testing.TB, prefix string) *kube.Client {
	t.Helper()
	return cluster(t, prefix, true)
}

// PermissiveCluster is Cluster without Pod Security enforced, for tests
// whose own fixture pods (probes standing in for members) are not
// hardened. Every pod the product makes is tested under Cluster.
func PermissiveCluster(t testing.TB, prefix string) *kube.Client {
	t.Helper()
	return cluster(t, prefix, false)
}

func cluster(t testing.TB, prefix string, restricted bool) *kube.Client {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("needs a cluster: set TF_ACC=1 (make testacc)")
	}
	kc := os.Getenv("MEEPA_KUBECONFIG")
	if kc == "" {
		t.Skip("needs a cluster: export MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)")
	}
	base, err := kube.Connect(kube.Config{ConfigPath: kc})
	testutil.Must(t, err)
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	ctx := context.Background()
	// Pod Security "restricted" enforced, as a hardened cluster would:
	// every pod the product makes must pass it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if restricted {
		ns.Labels = map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	}
	_, err = base.Clientset.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete namespace "+name, func() error {
		return base.Clientset.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	c, err := kube.Connect(kube.Config{ConfigPath: kc, Namespace: name})
	testutil.Must(t, err)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	testutil.Must(t, kube.WaitDefaultServiceAccount(wctx, c))
	return c
}

var (
	importMu sync.Mutex
	imported = map[string]bool{}
)

// RunnerImage is busybox + this build's agent-runner, made by the local
// Docker daemon and imported into the cluster's containerd once per test
// binary (pods use it with imagePullPolicy Never).
func RunnerImage(t testing.TB) string {
	t.Helper()
	cli := testutil.Docker(t)
	tag := testutil.EnsureRunnerImage(t, cli)
	importMu.Lock()
	defer importMu.Unlock()
	if !imported[tag] {
		testutil.Must(t, testimage.ImportToCluster(context.Background(), cli, testutil.RepoRoot(), tag))
		imported[tag] = true
	}
	return tag
}

// WorkspaceClaim makes a host directory owned by the sandbox user and a
// claim of that name for it, and returns the directory. The cluster's
// mount namespace is a copy of the host's, so the directory is the same
// on both sides.
func WorkspaceClaim(t testing.TB, c *kube.Client, name string) string {
	t.Helper()
	dir := testutil.SharedTempDir(t)
	testutil.Must(t, os.Chown(dir, agentspec.DefaultUID, agentspec.DefaultGID))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	remove, err := kube.HostPathClaim(ctx, c, name, dir)
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete claim "+name, func() error { return remove(context.Background()) })
	return dir
}
