package kubedeploy

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// applyMember applies a ThreeGate member of topology "tg" on its own
// reserved volume and returns what Apply left.
func applyMember(t *testing.T, svc *Service, c *kube.Client, image, id, role string, ask ...string) (Agent, Applied) {
	t.Helper()
	a := testAgent(id, image, workspaceVolume(t, c, id))
	a.Config.Role, a.ThreegateNetwork, a.ThreegateAsk = role, "tg", ask
	testutil.Cleanup(t, "remove "+id, func() error { return svc.Remove(context.Background(), id, true) })
	out, err := svc.Apply(context.Background(), a)
	if err != nil {
		t.Fatalf("apply %s: %v", id, err)
	}
	a.Config.Token = out.Token
	return a, out
}

// A core agent's runner asks a tool_exec agent's runner on the cluster,
// both applied by the service in one namespace: the core runner finds the
// target's pod through the API with its own service account and calls its
// pod IP (the cluster has no kube-proxy), with the token Apply put into the
// core's Secret. The answer comes back marked untrusted, an agent outside
// the list is refused, both audit lines link the two messages, a rolled
// target is found at its new pod, and every pod carries the ThreeGate
// labels of its role.
func TestAskOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kdask")
	image := testkube.RunnerImage(t)
	svc := NewService(Options{Client: c, Version: "test", APIServer: testkube.APIServer(t, c), Logger: testLogger{t}})
	teID, coreID := "tf-acc-te", "tf-acc-core"
	testkube.Policies(t, c, "tg")
	te, teOut := applyMember(t, svc, c, image, teID, "tool_exec")
	_, coreOut := applyMember(t, svc, c, image, coreID, "core", teID)
	checkAskTargetInSecret(t, c, coreID, teOut.Token)
	checkThreeGateLabels(t, c, coreID, "CORE", teID, "TOOL_EXEC")

	addr := testkube.Forward(t, c, coreOut.RunnerPod, DefaultPort)
	begin := time.Now()
	code, reply := send(t, addr, coreOut.Token, agent.OfflineAskPrefix+teID+" "+agent.OfflineShellPrefix+"echo $((6*7))")
	t.Logf("ask round trip took %s", time.Since(begin).Round(time.Millisecond))
	text, _ := reply["reply"].(string)
	if code != 200 || !strings.Contains(text, "untrusted content from agent "+teID) || !strings.Contains(text, "exit 0\n42") {
		t.Fatalf("ask: %d %v", code, reply)
	}
	checkAuditLink(t, c, coreOut.RunnerPod, teOut.RunnerPod, reply["message_id"].(string))

	code, reply = send(t, addr, coreOut.Token, agent.OfflineAskPrefix+"tf-acc-nobody hi")
	if text, _ := reply["reply"].(string); code != 200 || !strings.Contains(text, "is not one this agent may ask") {
		t.Errorf("ask outside the list: %d %v", code, reply)
	}

	// The target rolls to a new pod (a new IP); the next ask finds it.
	te.Config.MaxSteps = 5
	teOut2, err := svc.Apply(context.Background(), te)
	if err != nil || teOut2.RunnerPod == teOut.RunnerPod {
		t.Fatalf("rolling the target: %+v, %v", teOut2, err)
	}
	code, reply = send(t, addr, coreOut.Token, agent.OfflineAskPrefix+teID+" "+agent.OfflineShellPrefix+"echo rolled")
	if text, _ := reply["reply"].(string); code != 200 || !strings.Contains(text, "exit 0\nrolled") {
		t.Errorf("ask after the target rolled: %d %v", code, reply)
	}
}

// The target's token is in the asking runner's Secret, as a port and a
// token, and in no pod or Deployment of the asking agent.
func checkAskTargetInSecret(t *testing.T, c *kube.Client, coreID, teToken string) {
	t.Helper()
	ctx := context.Background()
	n := NamesFor(coreID)
	cfg := secretConfig(t, c, coreID)
	if len(cfg.Ask) != 1 || cfg.Ask[0].Token != teToken || cfg.Ask[0].Port != DefaultPort || cfg.Ask[0].Listen != "" {
		t.Errorf("ask targets in the core's Secret: %+v", cfg.Ask)
	}
	dep, err := c.Clientset.AppsV1().Deployments(c.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	testutil.Must(t, err)
	pods, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{})
	testutil.Must(t, err)
	raw, _ := json.Marshal([]any{dep, pods})
	if strings.Contains(string(raw), teToken) {
		t.Error("the target's token is in a Deployment or pod object")
	}
}

// Runner pods carry the runner labels of their role, message pods the
// execution labels; the old io.meepa.role key is gone.
func checkThreeGateLabels(t *testing.T, c *kube.Client, ids ...string) {
	t.Helper()
	for i := 0; i < len(ids); i += 2 {
		id, role := ids[i], ids[i+1]
		runners, err := c.Clientset.CoreV1().Pods(c.Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: Selector(id)})
		testutil.Must(t, err)
		for _, p := range runners.Items {
			checkLabels(t, p, kube.ThreeGateRunnerLabels("tg", role))
		}
		msg := waitPrestarted(t, c, id, "")
		p, err := c.Clientset.CoreV1().Pods(c.Namespace).Get(context.Background(), msg, metav1.GetOptions{})
		testutil.Must(t, err)
		checkLabels(t, *p, kube.ThreeGateExecutionLabels("tg", role))
		if len(runners.Items) == 0 {
			t.Errorf("no runner pod of %s", id)
		}
	}
}

func checkLabels(t *testing.T, p corev1.Pod, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if p.Labels[k] != v {
			t.Errorf("pod %s: label %s = %q, want %q", p.Name, k, p.Labels[k], v)
		}
	}
	for _, k := range []string{"io.meepa.role", kube.ThreeGateLabelRunner, kube.ThreeGateLabelExecution} {
		if _, ok := want[k]; !ok && p.Labels[k] != "" {
			t.Errorf("pod %s carries %s", p.Name, k)
		}
	}
}

var messageIDRe = regexp.MustCompile(`(?:^|\s)message_id=(\S+)`)

// The asked runner's audit line names the asking message, and the asking
// runner's ask line names the message it started.
func checkAuditLink(t *testing.T, c *kube.Client, corePod, tePod, coreMsg string) {
	t.Helper()
	logs := func(pod string) string {
		raw, err := c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(context.Background())
		testutil.Must(t, err)
		return string(raw)
	}
	var asked string
	for _, line := range strings.Split(logs(tePod), "\n") {
		if strings.Contains(line, "parent_message_id="+coreMsg) {
			if m := messageIDRe.FindStringSubmatch(line); m != nil {
				asked = m[1]
			}
		}
	}
	if asked == "" {
		t.Fatalf("no audit line of %s names the asking message %s", tePod, coreMsg)
	}
	if core := logs(corePod); !strings.Contains(core, "ask_message_id="+asked) || !strings.Contains(core, "ask_message_ids="+asked) {
		t.Errorf("the core runner's log does not name the asked message %s", asked)
	}
}
