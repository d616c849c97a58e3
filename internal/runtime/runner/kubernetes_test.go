package runner

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

func kubeConfig() *agentspec.Config {
	c := testConfig()
	c.Container.Network = "bridge"
	c.Container.MemoryLimit = agentspec.SizeOf(256 << 20)
	c.Role = "tool_exec"
	c.Env = map[string]string{"LANG": "C"}
	c.Kubernetes = &agentspec.Kubernetes{WorkspaceClaim: "ws-a1", ImagePullPolicy: "Never", RuntimeClass: "gvisor", CPULimit: "500m", Topology: "tg"}
	return c
}

func TestValidateKubernetes(t *testing.T) {
	if err := kube.ValidateConfig(kubeConfig()); err != nil {
		t.Fatalf("a good kubernetes config: %v", err)
	}
	// A core agent on a cluster asks by port; its pod is found by label.
	core := kubeConfig()
	core.Role = "core"
	core.Ask = []agentspec.AskTarget{{AgentID: "tx", Role: "tool_exec", Port: 8080, Token: "t"}, {AgentID: "fx", Role: "fetch", Port: 1, Token: "u"}}
	if err := kube.ValidateConfig(core); err != nil {
		t.Errorf("a core agent with ask targets on kubernetes: %v", err)
	}
	// No network without a role: kubedeploy's deny-all policy confines
	// the pods, which wait for it (TestKubeOptionsAwaitPolicy).
	for _, n := range []string{"none", ""} {
		c := kubeConfig()
		c.Role, c.Kubernetes.Topology, c.Container.Network = "", "", n
		if err := kube.ValidateConfig(c); err != nil {
			t.Errorf("network %q without a role on kubernetes: %v", n, err)
		}
	}
	// The relay reaches message pods on their own attach.
	for _, p := range []string{"openai", "anthropic"} {
		c := kubeConfig()
		c.LLM.Provider, c.LLM.Model, c.LLM.BaseURL = p, "m", "https://llm.example/v1"
		if err := kube.ValidateConfig(c); err != nil {
			t.Errorf("llm.provider %s on kubernetes: %v", p, err)
		}
	}
	cases := []struct {
		name string
		edit func(*agentspec.Config)
		want string
	}{
		{"host mode", func(c *agentspec.Config) {
			c.Container.Enabled = false
			c.Container.MemoryLimit = agentspec.SizeOf(1 << 30)
		}, "needs container_mode.enabled"},
		{"ask by listen", func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "tx", Role: "tool_exec", Listen: "127.0.0.1:7001", Port: 8080, Token: "t"}}
		}, "on kubernetes want its runner's port"},
		{"ask without port", func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "tx", Role: "tool_exec", Token: "t"}}
		}, "on kubernetes want its runner's port"},
		{"ask port too high", func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "tx", Role: "tool_exec", Port: 70000, Token: "t"}}
		}, "on kubernetes want its runner's port"},
		{"ask without token", func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "tx", Role: "tool_exec", Port: 8080}}
		}, "on kubernetes want its runner's port and token"},
		{"ask a core agent", func(c *agentspec.Config) {
			c.Role = "core"
			c.Ask = []agentspec.AskTarget{{AgentID: "c2", Role: "core", Port: 8080, Token: "t"}}
		}, "asks only fetch and tool_exec"},
		{"ask from tool_exec", func(c *agentspec.Config) {
			c.Ask = []agentspec.AskTarget{{AgentID: "fx", Role: "fetch", Port: 8080, Token: "t"}}
		}, "only a core agent may ask"},
		{"role without topology", func(c *agentspec.Config) { c.Kubernetes.Topology = "" }, "a threegate role needs its topology"},
		{"topology without role", func(c *agentspec.Config) { c.Role = "" }, "a threegate role needs its topology"},
		{"bad topology", func(c *agentspec.Config) { c.Kubernetes.Topology = "tg/x" }, "label"},
		{"docker networks", func(c *agentspec.Config) { c.Container.Networks = []string{"llmnet"} }, "Docker networks"},
		{"no claim", func(c *agentspec.Config) { c.Kubernetes.WorkspaceClaim = "" }, "workspace claim is empty"},
		{"bad pull policy", func(c *agentspec.Config) { c.Kubernetes.ImagePullPolicy = "Sometimes" }, "image pull policy"},
		{"bad cpu", func(c *agentspec.Config) { c.Kubernetes.CPULimit = "lots" }, "cpu limit"},
	}
	for _, tc := range cases {
		c := kubeConfig()
		tc.edit(c)
		err := kube.ValidateConfig(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

func TestKubeOptions(t *testing.T) {
	o := kube.OptionsFor(kubeConfig(), nil)
	s := o.Spec
	if s.AgentID != "a1" || s.Image != "img" || s.Topology != "tg" || s.Role != "TOOL_EXEC" || s.MemoryLimit.Bytes() != 256<<20 || s.CPULimit != "500m" ||
		s.WorkspaceClaim != "ws-a1" || s.RuntimeClass != "gvisor" || s.ImagePullPolicy != corev1.PullNever || s.Env["LANG"] != "C" {
		t.Errorf("spec %+v", s)
	}
	if o.Prestart {
		t.Error("prestart on though the config has it off")
	}
}

// Every message pod on a cluster is confined (a topology member's by the
// topology's policies, any other agent's by its own message policy, for
// "none" and "bridge" alike) and waits until the API server is blocked.
func TestKubeOptionsAwaitPolicy(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "6443")
	none := kubeConfig()
	none.Role, none.Kubernetes.Topology, none.Container.Network = "", "", "none"
	empty := kubeConfig()
	empty.Role, empty.Kubernetes.Topology, empty.Container.Network = "", "", ""
	bridge := kubeConfig()
	bridge.Role, bridge.Kubernetes.Topology = "", ""
	for name, tc := range map[string]struct {
		c    *agentspec.Config
		want []string
	}{
		"topology member": {kubeConfig(), []string{"10.0.0.1:6443"}},
		"network none":    {none, []string{"10.0.0.1:6443"}},
		"network empty":   {empty, []string{"10.0.0.1:6443"}},
		"network bridge":  {bridge, []string{"10.0.0.1:6443"}},
	} {
		if got := kube.OptionsFor(tc.c, nil).Spec.AwaitBlocked; !slices.Equal(got, tc.want) {
			t.Errorf("%s: await blocked %v, want %v", name, got, tc.want)
		}
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	if got := kube.OptionsFor(none, nil).Spec.AwaitBlocked; got != nil {
		t.Errorf("outside a cluster: await blocked %v", got)
	}
}

// The seed travels with every message on a cluster, and never on Docker,
// where the provider writes the workspace itself.
func TestBuildRequestSeed(t *testing.T) {
	seed := &agentspec.Seed{Soul: "s", Memory: "m", ManageSoul: true}
	c := kubeConfig()
	c.Kubernetes.Seed = seed
	if got := BuildRequest(c, "m1", MessageRequest{Text: "hi"}).Seed; got == nil || *got != *seed {
		t.Errorf("kubernetes: seed %+v, want %+v", got, seed)
	}
	d := testConfig()
	if got := BuildRequest(d, "m1", MessageRequest{Text: "hi"}).Seed; got != nil {
		t.Errorf("docker: seed %+v, want none", got)
	}
}

// A Secret volume's file is group-readable by the pod's fsGroup: accepted
// only by LoadSecretConfig, only for the process's own group, and never
// when others may read or anyone but the owner may write.
func TestLoadSecretConfigMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	if err := agentspec.WriteConfig(path, kubeConfig()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode         os.FileMode
		plain, inSec bool
	}{
		{0o600, true, true}, {0o400, true, true}, {0o440, false, true}, {0o640, false, true},
		{0o444, false, false}, {0o460, false, false}, {0o404, false, false}, {0o470, false, false},
	} {
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		_, err := agentspec.LoadConfig(path)
		if (err == nil) != tc.plain {
			t.Errorf("LoadConfig mode %o: %v", tc.mode, err)
		}
		c, err := agentspec.LoadSecretConfig(path)
		if (err == nil) != tc.inSec || (err == nil && c.Kubernetes.WorkspaceClaim != "ws-a1") {
			t.Errorf("LoadSecretConfig mode %o: %v", tc.mode, err)
		}
	}
	if os.Getegid() != 0 {
		t.Skip("the foreign-group case needs root to chown")
	}
	if err := os.Chmod(path, 0o440); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, -1, 4242); err != nil {
		t.Fatal(err)
	}
	if _, err := agentspec.LoadSecretConfig(path); err == nil || !strings.Contains(err.Error(), "group other than") {
		t.Errorf("a config readable by another group: %v, want a refusal", err)
	}
}
