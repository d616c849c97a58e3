package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The acceptance tests run against the project's own cluster:
//
//	export MEEPA_KUBECONFIG=$(flock -o /tmp/meepa-acc.lock scripts/k8s-up.sh)
//	TF_ACC=1 flock -o /tmp/meepa-acc.lock go test ./internal/runtime/kube/
//
// Images come from the local Docker daemon, imported into the cluster's
// containerd with scripts/k8s/load-image.sh (pods use imagePullPolicy Never).

// runToken keeps the names of concurrent runs apart.
var runToken = func() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}()

// requireCluster skips without TF_ACC or MEEPA_KUBECONFIG, and connects to
// a fresh namespace of the cluster that is deleted when the test ends.
func requireCluster(t *testing.T) *Client {
	t.Helper()
	if os.Getenv("TF_ACC") == "" {
		t.Skip("needs a cluster: set TF_ACC=1 (make testacc)")
	}
	kc := os.Getenv("MEEPA_KUBECONFIG")
	if kc == "" {
		t.Skip("needs a cluster: export MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)")
	}
	base, err := Connect(Config{ConfigPath: kc})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	name := "tf-acc-kube-" + runToken + "-" + fmt.Sprint(nsCount.Add())
	_, err = base.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	testutil.Cleanup(t, "delete namespace "+name, func() error {
		return base.Clientset.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	c, err := Connect(Config{ConfigPath: kc, Namespace: name})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	testutil.Must(t, WaitDefaultServiceAccount(wctx, c))
	return c
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) Add() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	return c.n
}

var nsCount counter

var (
	importMu sync.Mutex
	imported = map[string]bool{}
)

// runnerImage is the test runner image (busybox + this build's
// agent-runner), made by the local Docker daemon and imported into the
// cluster's containerd.
func runnerImage(t *testing.T) string {
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

// workspaceClaim makes a host directory owned by the sandbox user and a
// claim of that name for it. The cluster's mount namespace is a copy of
// the host's, so the directory is the same on both sides.
func workspaceClaim(t *testing.T, c *Client, name string) string {
	t.Helper()
	dir := testutil.SharedTempDir(t)
	testutil.Must(t, os.Chown(dir, agentspec.DefaultUID, agentspec.DefaultGID))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	remove, err := HostPathClaim(ctx, c, name, dir)
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete claim "+name, func() error { return remove(context.Background()) })
	return dir
}

// agentPods lists the pods of one agent in c's namespace.
func agentPods(t *testing.T, c *Client, agentID string) []corev1.Pod {
	t.Helper()
	list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: AgentSelector(agentID)})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// newPods makes a backend for a fresh agent with its own workspace claim.
func newPods(t *testing.T, c *Client, edit func(*PodSpec), prestart bool) (*Pods, PodSpec, string) {
	t.Helper()
	agentID := "tf-acc-" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "-"))
	if len(agentID) > 50 {
		agentID = agentID[:50]
	}
	// Claims (and their volumes, named after them) are unique in the run:
	// a volume being deleted still holds its name for a while.
	claim := fmt.Sprintf("ws-%d", nsCount.Add())
	dir := workspaceClaim(t, c, claim)
	spec := PodSpec{AgentID: agentID, Image: runnerImage(t), ImagePullPolicy: corev1.PullNever, WorkspaceClaim: claim}
	if edit != nil {
		edit(&spec)
	}
	p, err := NewPods(context.Background(), c, Options{Spec: spec, Prestart: prestart})
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "close backend and delete its pods", func() error {
		if err := p.Close(context.Background()); err != nil {
			return err
		}
		if left := agentPods(t, c, agentID); len(left) != 0 {
			return fmt.Errorf("%d pods left after Close", len(left))
		}
		return nil
	})
	return p, spec, dir
}
