package kube

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// send runs one offline-agent message through agent-run in a pod.
func send(t *testing.T, p *Pods, id, text string) (agent.Reply, sandbox.Outcome) {
	t.Helper()
	req, err := json.Marshal(agent.Request{
		AgentID: "k",
		Message: agent.Message{ID: id, Text: text},
		LLM:     agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
		// The pod's own role (its --role), as the runner's config gives it.
		Role: strings.ToLower(p.opts.Spec.Role),
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.Run(context.Background(), sandbox.Job{MessageID: id, Stdin: req, Timeout: 90 * time.Second})
	if err != nil {
		t.Fatalf("run %q: %v", text, err)
	}
	var r agent.Reply
	if err := json.Unmarshal(out.Stdout, &r); err != nil {
		t.Fatalf("run %q: reply %q (stderr %q): %v", text, out.Stdout, out.StderrTail, err)
	}
	return r, out
}

// A message round trip through the real agent-run in a fresh pod, then
// the hardening as the agent sees it from inside: uid and gid, no
// capabilities, no new privileges, seccomp on, read-only root, no
// service-account token, /tmp a 256 MiB tmpfs, the workspace writable and
// kept on the claim. The pod runs under the RuntimeClass named by the spec.
func TestPodRoundTripAndHardening(t *testing.T) {
	c := requireCluster(t)
	ctx := context.Background()
	rc := "tf-acc-runc-" + runToken
	_, err := c.Clientset.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: "runc"}, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "delete runtime class", func() error {
		return c.Clientset.NodeV1().RuntimeClasses().Delete(context.Background(), rc, metav1.DeleteOptions{})
	})
	p, spec, dir := newPods(t, c, func(s *PodSpec) { s.RuntimeClass = rc; s.Topology, s.Role = "tg", "TOOL_EXEC" }, false)

	r, out := send(t, p, "m-hi", "hi")
	if r.Reply != agent.OfflineAnswer("hi") || out.ExitCode != 0 || out.OOMKilled || out.TimedOut || out.ImageID == "" || out.StartLatency <= 0 {
		t.Fatalf("reply %q outcome %+v", r.Reply, out)
	}
	if !strings.HasPrefix(out.SandboxID, MessagePodPrefix(spec.AgentID)) {
		t.Errorf("sandbox id %q, want the pod's name", out.SandboxID)
	}

	script := strings.Join([]string{
		"id -u", "id -g",
		"grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '",
		"touch /rootfs-probe 2>/dev/null && echo root=writable || echo root=readonly",
		"ls /var/run/secrets/kubernetes.io 2>/dev/null && echo token=present || echo token=absent",
		`awk '$2=="/tmp"{print $3; n=split($4,o,","); for(i=1;i<=n;i++) if(o[i] ~ /^size=/) print o[i]}' /proc/mounts`,
		"echo kept > /workspace/note && echo ws=written",
	}, "; ")
	r, out = send(t, p, "m-probe", agent.OfflineShellPrefix+script)
	want := []string{
		"exit 0", "65534", "65534",
		"CapInh: 0000000000000000", "CapPrm: 0000000000000000", "CapEff: 0000000000000000",
		"CapBnd: 0000000000000000", "CapAmb: 0000000000000000", "NoNewPrivs: 1", "Seccomp: 2",
		"root=readonly", "token=absent", "tmpfs", "size=262144k", "ws=written",
	}
	if got := strings.Split(strings.TrimSpace(r.Reply), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("from inside the pod:\n got %q\nwant %q", got, want)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "note")); err != nil || string(b) != "kept\n" {
		t.Errorf("workspace file on the claim's directory: %q %v", b, err)
	}
	if out.ExitCode != 0 {
		t.Errorf("outcome %+v", out)
	}
	// Each message had its own pod, and none is left once it answered.
	waitNoPods(t, c, spec.AgentID)
}

// waitNoPods waits for an agent's pods to be deleted (Run deletes them off
// the reply's path).
func waitNoPods(t *testing.T, c *Client, agentID string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left := agentPods(t, c, agentID)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d pods left, e.g. %s", len(left), left[0].Name)
		}
	}
}

// A pod that outlives the timeout is deleted at once and reported as
// timed out; one that exceeds its memory limit is reported as OOM-killed.
func TestPodTimeoutAndOOM(t *testing.T) {
	c := requireCluster(t)
	t.Run("timeout", func(t *testing.T) {
		p, spec, _ := newPods(t, c, func(s *PodSpec) { s.Command = []string{"sh", "-c", "cat >/dev/null; sleep 120"} }, false)
		begin := time.Now()
		out, err := p.Run(context.Background(), sandbox.Job{MessageID: "m-slow", Stdin: []byte("x"), Timeout: 8 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !out.TimedOut || out.ExitCode != killedExitCode || time.Since(begin) > 20*time.Second {
			t.Fatalf("outcome %+v after %s: want timed out and killed", out, time.Since(begin))
		}
		waitNoPods(t, c, spec.AgentID)
	})
	t.Run("oom", func(t *testing.T) {
		p, _, _ := newPods(t, c, func(s *PodSpec) {
			s.MemoryLimit = agentspec.SizeOf(32 << 20)
			s.Command = []string{"sh", "-c", "cat >/dev/null; tail /dev/zero"}
		}, false)
		out, err := p.Run(context.Background(), sandbox.Job{MessageID: "m-bomb", Stdin: []byte("x"), Timeout: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if !out.OOMKilled || out.ExitCode != 137 || out.TimedOut {
			t.Fatalf("outcome %+v: want OOM-killed", out)
		}
	})
}

// With prestart a pod waits, running and attached, before any message; the
// next message runs in it without waiting, and a fresh one takes its place.
func TestPodPrestart(t *testing.T) {
	c := requireCluster(t)
	p, spec, _ := newPods(t, c, nil, true)
	waiting := waitReady(t, c, p, spec.AgentID)
	r, out := send(t, p, "m-1", "hello")
	if r.Reply != agent.OfflineAnswer("hello") || out.SandboxID != waiting || out.StartLatency != 0 {
		t.Fatalf("reply %q outcome %+v: want the answer from the waiting pod %s, at once", r.Reply, out, waiting)
	}
	next := waitReady(t, c, p, spec.AgentID, waiting)
	if next == waiting {
		t.Fatalf("pod %s was used again", next)
	}
	r, out = send(t, p, "m-2", "again")
	if r.Reply != agent.OfflineAnswer("again") || out.SandboxID != next {
		t.Fatalf("reply %q outcome %+v: want the answer from %s", r.Reply, out, next)
	}
}

// waitReady waits for the prestarted pod and returns its name, checking
// that it is the agent's only pod apart from ones being deleted.
func waitReady(t *testing.T, c *Client, p *Pods, agentID string, used ...string) string {
	t.Helper()
	for deadline := time.Now().Add(90 * time.Second); !p.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no prestarted pod became ready")
		}
	}
	// A pod that answered keeps its prestart label until its deletion
	// lands (the runner does not relabel pods); it is named in used.
	var names []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		names = names[:0]
		for _, pod := range agentPods(t, c, agentID) {
			if pod.DeletionTimestamp == nil && pod.Labels[sandbox.LabelMessage] == "prestart" && pod.Status.Phase == corev1.PodRunning &&
				!slices.Contains(used, pod.Name) {
				names = append(names, pod.Name)
			}
		}
		if len(names) == 1 {
			return names[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("prestarted pods %v (besides %v), want one", names, used)
		}
	}
}

// A prestarted pod killed while it waited is not handed the message; a
// fresh pod answers. Pods of the agent left by an earlier runner are
// deleted when a backend starts, and another agent's pods are left alone.
func TestPodDeadPrestartAndOrphans(t *testing.T) {
	c := requireCluster(t)
	ctx := context.Background()
	p, spec, _ := newPods(t, c, nil, true)
	waiting := waitReady(t, c, p, spec.AgentID)
	testutil.Must(t, deletePod(ctx, c, waiting))
	r, out := send(t, p, "m-1", "still there")
	if r.Reply != agent.OfflineAnswer("still there") || out.SandboxID == waiting {
		t.Fatalf("reply %q outcome %+v: want a fresh pod's answer", r.Reply, out)
	}

	orphanSpec := spec
	orphanSpec.AgentID = spec.AgentID + "-o"
	otherSpec := spec
	otherSpec.AgentID = spec.AgentID + "-x"
	for _, s := range []PodSpec{orphanSpec, otherSpec} {
		pod, err := HardenedPod(s, c.Namespace, "m-left")
		testutil.Must(t, err)
		_, err = c.Clientset.CoreV1().Pods(c.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		testutil.Must(t, err)
	}
	o, err := NewPods(ctx, c, Options{Spec: orphanSpec})
	testutil.Must(t, err)
	testutil.Must(t, o.Close(ctx))
	if left := agentPods(t, c, orphanSpec.AgentID); len(left) != 0 {
		t.Errorf("orphan left: %s", left[0].Name)
	}
	if left := agentPods(t, c, otherSpec.AgentID); len(left) != 1 {
		t.Errorf("another agent's pods: %d, want 1 untouched", len(left))
	}
	_, err = DeleteAgentPods(ctx, c, otherSpec.AgentID)
	testutil.Must(t, err)
}
