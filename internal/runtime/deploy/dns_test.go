package deploy

import (
	"slices"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// A runner on a role's networks takes the role's DNS upstream into its
// container, with no search domain.
func TestForConfigDNS(t *testing.T) {
	c := agentspec.Config{AgentID: "a1", Container: agentspec.ContainerMode{Networks: []string{"tg-llmnet"}, DNS: []agentspec.Addr{mustAddr(t, "10.213.1.127")}}}
	p := Placement{Image: "img:1", Layout: LayoutFor("/s", "a1"), Listener: Listener{Unix: "/s/run.sock"}, Workspace: "/s/agents/a1"}
	d, err := ForConfig(c, p)
	if err != nil {
		t.Fatal(err)
	}
	_, hc, _ := Spec(d)
	if !slices.Equal(hc.DNS, []string{"10.213.1.127"}) || !slices.Equal(hc.DNSSearch, []string{"."}) {
		t.Errorf("runner DNS %v search %v", hc.DNS, hc.DNSSearch)
	}
	c.Container.Networks = nil
	if d, _ := ForConfig(c, p); d.DNS != nil {
		t.Errorf("a runner on no topology network got DNS %v", d.DNS)
	}
}

func mustAddr(t *testing.T, s string) agentspec.Addr {
	t.Helper()
	a, err := agentspec.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
