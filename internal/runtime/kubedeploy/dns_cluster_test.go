package kubedeploy

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// standInDNSAtService is a resolver at an address of the test cluster's
// service range itself, which this cluster's kube-router lets through
// whatever the policies say (issue 25 reached one from a TOOL-EXEC pod).
const standInDNSAtService = "10.96.0.153"

// TestToolExecPodSendsNoDNSOnCluster: a message pod of the product
// (kube.Pods over the config's spec) whose tool sends a DNS query to a
// resolver at a service address. No policy is applied, so the network is
// open: the control, a pod of an agent without a role, reaches the
// resolver; a TOOL-EXEC pod's query never leaves it (agent-run
// --role=tool_exec opens no socket), and its tool is told so.
func TestToolExecPodSendsNoDNSOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kdte")
	image := testkube.RunnerImage(t)
	dns := testkube.DNSInCluster(t, standInDNSAtService, map[string]string{"outside.meepa-te.test.": "198.51.100.9"})
	run := func(id, role, topology string) (string, int64) {
		claim := "ws-" + id
		testkube.WorkspaceClaim(t, c, claim)
		cfg := agentspec.Config{AgentID: id, Role: role,
			Container:  agentspec.ContainerMode{Enabled: true, Image: image},
			Kubernetes: &agentspec.Kubernetes{WorkspaceClaim: claim, ImagePullPolicy: "Never", Topology: topology}}
		ctx := context.Background()
		p, err := kube.NewPods(ctx, c, kube.OptionsFor(&cfg, nil))
		testutil.Must(t, err)
		defer func() { _ = p.Close(context.Background()) }()
		req, _ := json.Marshal(agent.Request{AgentID: id, Role: role, LLM: agentspec.LLMConfig{Provider: agentspec.ProviderOffline},
			Message: agent.Message{ID: "m1", Text: "!sh agent-runner probe dns-at=" + standInDNSAtService + ":53/outside.meepa-te.test"}})
		before := dns.Queries.Load()
		out, err := p.Run(ctx, sandbox.Job{MessageID: "m1", Stdin: req, Timeout: 2 * time.Minute})
		testutil.Must(t, err)
		var rep agent.Reply
		if err := json.Unmarshal(out.Stdout, &rep); err != nil {
			t.Fatalf("%s: reply %q: %v", id, out.Stdout, err)
		}
		time.Sleep(500 * time.Millisecond)
		return rep.Reply, dns.Queries.Load() - before
	}
	reply, n := run("te-control", "", "")
	if n == 0 {
		t.Fatalf("control (no role): no query reached the stand-in at %s: %q", standInDNSAtService, reply)
	}
	t.Logf("control, no role: %d queries reached %s:53; %q", n, standInDNSAtService, reply)
	reply, n = run("te-tool", agentspec.RoleToolExec, "tg")
	if n != 0 {
		t.Errorf("TOOL-EXEC: %d queries reached %s:53; %q", n, standInDNSAtService, reply)
	}
	t.Logf("TOOL-EXEC: %d queries; %q", n, reply)
}
