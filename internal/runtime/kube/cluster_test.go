package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
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
	if imported[tag] {
		return tag
	}
	rc, err := cli.ImageSave(context.Background(), []string{tag})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rc.Close() }() // read to the end by the import
	cmd := exec.Command(filepath.Join(testutil.RepoRoot(), "scripts", "k8s", "load-image.sh"), "-")
	cmd.Stdin = rc
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("import %s into the cluster: %v\n%s", tag, err, out)
	}
	imported[tag] = true
	return tag
}

// workspaceClaim makes a host directory owned by the sandbox user, a
// hostPath PersistentVolume for it bound in advance to a claim of that
// name in c's namespace, and waits until the claim is bound. The cluster's
// mount namespace is a copy of the host's, so the directory is the same
// on both sides.
func workspaceClaim(t *testing.T, c *Client, name string) string {
	t.Helper()
	dir := testutil.SharedTempDir(t)
	testutil.Must(t, os.Chown(dir, sandbox.DefaultUID, sandbox.DefaultGID))
	ctx := context.Background()
	pvName := c.Namespace + "-" + name
	size := resource.MustParse("1Gi")
	hostDir := corev1.HostPathDirectory
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: size},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			StorageClassName:              "",
			ClaimRef:                      &corev1.ObjectReference{Namespace: c.Namespace, Name: name},
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &hostDir}},
		},
	}
	if _, err := c.Clientset.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "delete persistent volume "+pvName, func() error {
		return c.Clientset.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	empty := ""
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &empty,
			VolumeName:       pvName,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	if _, err := c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		got, err := c.Clientset.CoreV1().PersistentVolumeClaims(c.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == corev1.ClaimBound {
			return dir
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %s not bound: %+v", name, got.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
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
	dir := workspaceClaim(t, c, "ws")
	spec := PodSpec{AgentID: agentID, Image: runnerImage(t), ImagePullPolicy: corev1.PullNever, WorkspaceClaim: "ws"}
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
