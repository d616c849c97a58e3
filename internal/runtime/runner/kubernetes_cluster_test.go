package runner

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/relay"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner/backends"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The runner's side runs in the test process on the host, its messages in
// pods of the project's test cluster (scripts/k8s-up.sh), made through
// the API server as a runner in the cluster makes them:
//
//	export MEEPA_KUBECONFIG=$(flock -o /tmp/meepa-acc.lock scripts/k8s-up.sh)
//	TF_ACC=1 go test ./internal/runtime/runner -run Pod

// kubeAgentConfig is a runner config whose messages run in pods of c's
// namespace, on a workspace claim of their own; it returns the claim's
// directory on the host too.
func kubeAgentConfig(t *testing.T, c *kube.Client, id string) (*agentspec.Config, string) {
	t.Helper()
	claim := "ws-" + id
	dir := testkube.WorkspaceClaim(t, c, claim)
	sockDir := testutil.SharedTempDir(t)
	return &agentspec.Config{
		AgentID:   "tf-acc-" + id + "-" + runToken,
		Workspace: sandbox.WorkspaceDir,
		Listen:    "unix://" + filepath.Join(sockDir, "runner.sock"),
		Token:     "test-token-" + id,
		QueueSize: 8,
		Container: agentspec.ContainerMode{
			Enabled:        true,
			Image:          testkube.RunnerImage(t),
			MemoryLimit:    agentspec.SizeOf(256 << 20),
			TimeoutSeconds: 60,
			Network:        "bridge",
			Prestart:       true,
		},
		Kubernetes:    &agentspec.Kubernetes{Namespace: c.Namespace, WorkspaceClaim: claim, ImagePullPolicy: "Never"},
		LLM:           agentspec.LLMConfig{Provider: "offline", APIKey: testAPIKey},
		RedactSecrets: true,
	}, dir
}

// podBackend makes the pod backend with the test's client instead of the
// in-cluster service account.
func podBackend(c *kube.Client) BackendFactory {
	return func(ctx context.Context, cfg *agentspec.Config, rl *relay.Relay, log hclog.Logger) (sandbox.Backend, string, error) {
		return backends.NewKube(ctx, c, cfg, rl, log)
	}
}

// On a cluster the API key stays with the runner as it does on Docker: the
// loop in the message pod reaches the relay over the pod's own attach (no
// network route from the pod), the model endpoint gets the key, and a tool
// in the pod finds it in no environment, argv, file or process memory, nor
// in the pod objects the API server holds while the message runs. With
// inject_credentials_env, tools reach the relay through the loop and get
// only the message's token.
func TestPodKeyStaysWithRunner(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-runner")
	model := testutil.NewFakeModel(t, map[string]string{"probe": testutil.CredentialProbe(keyPrefix), "relay": relayCalls})
	var mu sync.Mutex
	var inPodObjects []string
	for _, inject := range []bool{false, true} {
		t.Run(fmt.Sprintf("inject_credentials_env=%v", inject), func(t *testing.T) {
			cfg, _ := kubeAgentConfig(t, c, fmt.Sprintf("podrelay%v", inject))
			cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL = "openai", "m", model.URL()+"/v1"
			cfg.RedactSecrets, cfg.InjectCredentialsEnv = false, inject
			model.OnCall = func() {
				list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: kube.AgentSelector(cfg.AgentID)})
				raw, _ := json.Marshal(list)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					inPodObjects = append(inPodObjects, "list: "+err.Error())
				case len(list.Items) == 0:
					inPodObjects = append(inPodObjects, "no pod listed while the message ran")
				case bytes.Contains(raw, []byte(testAPIKey)):
					inPodObjects = append(inPodObjects, "the key is in the pod objects")
				}
			}
			a := startAgentWith(t, cfg, podBackend(c))
			checkKeyStaysWithRunner(t, a, model, inject)
			mu.Lock()
			defer mu.Unlock()
			for _, p := range inPodObjects {
				t.Error(p)
			}
			inPodObjects = nil
			if _, err := os.Stat(backends.RelayDir(cfg)); err == nil {
				t.Errorf("a relay socket directory was made for a pod runner; pods carry the relay on their attach")
			}
		})
	}
}

// A tool in a message pod cannot set up an io_uring, whatever the node's
// RuntimeDefault allows: agent-run installs the product's deny filter on
// itself, and so on every tool, before the message runs. The control: the
// same probe as the command of a pod HardenedPod makes alike (RuntimeDefault,
// the same user and image) but without agent-run, which on this cluster's
// containerd 1.6 gets its io_uring.
func TestPodToolRefusedIOURing(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-runner")
	cfg, dir := kubeAgentConfig(t, c, "uring")
	testutil.Must(t, os.WriteFile(filepath.Join(dir, "uring-probe"), testutil.URingProbe(t), 0o755))
	probe := sandbox.WorkspaceDir + "/uring-probe"
	a := startAgentWith(t, cfg, podBackend(c))
	a.waitReady(t)
	code, out := a.sh(t, probe)
	t.Logf("message pod's tool: exit %d, %s", code, out)
	if code != 13 && code != 38 {
		t.Errorf("message pod's tool: io_uring_setup exit %d (%q), want 13 (EPERM) or 38 (ENOSYS)", code, out)
	}

	code, out = podExit(t, c, kube.PodSpec{
		AgentID: "tf-acc-uring-control-" + runToken, Image: cfg.Container.Image, ImagePullPolicy: "Never",
		User: cfg.Container.User, WorkspaceClaim: cfg.Kubernetes.WorkspaceClaim, Command: []string{probe},
	})
	t.Logf("control pod: exit %d, %s", code, out)
	if code != 0 {
		t.Errorf("control: io_uring_setup in a plain pod under RuntimeDefault exited %d (%q), want 0: the probe or the node refuses it, so the test shows nothing", code, out)
	}
}

// podExit runs a pod of spec in c's namespace to its end and returns its
// container's exit code and log.
func podExit(t *testing.T, c *kube.Client, spec kube.PodSpec) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pod, err := kube.HardenedPod(spec, c.Namespace, "")
	testutil.Must(t, err)
	pods := c.Clientset.CoreV1().Pods(c.Namespace)
	pod, err = pods.Create(ctx, pod, metav1.CreateOptions{})
	testutil.Must(t, err)
	name := pod.Name
	testutil.Cleanup(t, "delete pod "+name, func() error {
		err := pods.Delete(context.Background(), name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		testutil.Must(t, err)
		for _, cs := range p.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil {
				raw, err := pods.GetLogs(name, &corev1.PodLogOptions{Container: kube.ContainerName}).DoRaw(ctx)
				testutil.Must(t, err)
				return int(term.ExitCode), string(raw)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pod %s did not end: %+v", name, p.Status)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// TestPodKeyNeverInWorkspace is TestKeyNeverInWorkspace's offline case in
// a message pod: the key a tool builds at run time comes back redacted in
// the reply, and no spelling of it reaches memory.db or any other file of
// the pod's workspace claim, since the loop's writes pass the relay's scrub
// route there too.
func TestPodKeyNeverInWorkspace(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-runner")
	cfg, dir := kubeAgentConfig(t, c, "keyscrub")
	a := startAgentWith(t, cfg, podBackend(c))
	a.waitReady(t)
	ans := a.send(t, "!sh "+keyFromPieces)
	if ans.status != 200 || !strings.Contains(ans.reply, "plain "+redact.Redacted) {
		t.Fatalf("reply: %d %s", ans.status, ans.raw)
	}
	noKeySpelling(t, "the reply", string(ans.raw))
	if ans := a.send(t, "remember this: "+base64.StdEncoding.EncodeToString([]byte(testAPIKey))); ans.status != 200 {
		t.Fatalf("message with the key: %d %s", ans.status, ans.raw)
	}
	workspaceHoldsNoKey(t, dir)
}
