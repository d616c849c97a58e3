package agentspec

import (
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

func TestBrokerOf(t *testing.T) {
	host := func(fa landlock.FileAccess) *Config { return &Config{FileAccess: fa} }
	for name, tc := range map[string]struct {
		c            *Config
		broker, want string
	}{
		"fetch":             {&Config{Role: RoleFetch, Container: ContainerMode{Enabled: true}}, BrokerTopology, ""},
		"core":              {&Config{Role: RoleCore, Container: ContainerMode{Enabled: true}}, "", "a core agent has no way out"},
		"tool_exec":         {&Config{Role: RoleToolExec, Container: ContainerMode{Enabled: true}}, "", "a tool_exec agent"},
		"container bridge":  {&Config{Container: ContainerMode{Enabled: true, Network: "bridge"}}, BrokerRunner, ""},
		"container none":    {&Config{Container: ContainerMode{Enabled: true}}, "", `network = "none" has no way out`},
		"host with network": {host(landlock.FileAccess{AllowNetwork: true}), BrokerRunner, ""},
		"host no network":   {host(landlock.FileAccess{}), "", "allow_network is false"},
		"host unrestricted": {host(landlock.FileAccess{Unrestricted: true, AllowNetwork: true}), "", "can read the runner's config"},
	} {
		broker, why := BrokerOf(tc.c)
		if broker != tc.broker || (tc.want == "") != (why == "") || !strings.Contains(why, tc.want) {
			t.Errorf("%s: BrokerOf = %q, %q; want %q and a reason with %q", name, broker, why, tc.broker, tc.want)
		}
	}
}
