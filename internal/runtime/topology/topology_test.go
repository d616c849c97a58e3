package topology

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

func validInput() topospec.Input {
	return topospec.Input{
		Name: "tg",
		Docker: topospec.DockerInput{
			Subnets:  map[string]string{topospec.LLMNet: "10.213.1.0/24", topospec.FetchNet: "10.213.2.0/24", topospec.EgressNet: "10.213.3.0/24"},
			Gateways: map[string]string{},
			Firewall: &topospec.Firewall{Enabled: true},
		},
		Proxy: topospec.ProxyInput{Image: "img", Allow: []string{"example.com", "api.example.com:8443"}},
	}
}

func TestBuildDefaults(t *testing.T) {
	s, ps := Build(validInput())
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	f, e := s.Network(topospec.FetchNet), s.Network(topospec.EgressNet)
	if s.Network(topospec.LLMNet).Name != "tg-llmnet" || !s.Network(topospec.LLMNet).Internal || !f.Internal || e.Internal {
		t.Errorf("networks: %+v", s.Docker.Networks)
	}
	if f.Gateway.String() != "10.213.2.1" || f.IPRange.String() != "10.213.2.128/25" {
		t.Errorf("fetchnet gateway %s range %s", f.Gateway, f.IPRange)
	}
	if s.Docker.ProxyIP.String() != "10.213.2.2" || s.Docker.EgressIP.String() != "10.213.3.2" || s.Proxy.Port != 3128 {
		t.Errorf("proxy %s %s %d", s.Docker.ProxyIP, s.Docker.EgressIP, s.Proxy.Port)
	}
	if ProxyURL(s) != "http://10.213.2.2:3128" {
		t.Errorf("url %s", ProxyURL(s))
	}
	if got := s.Proxy.Allow[0].String(); got != "example.com:443" {
		t.Errorf("bare host = %s, want port 443", got)
	}
	roles := Roles(s)
	if got := strings.Join(roles[topospec.RoleFetch].Networks, ","); got != "tg-llmnet,tg-fetchnet" {
		t.Errorf("FETCH networks %s", got)
	}
	if got := strings.Join(roles[topospec.RoleCore].Networks, ","); got != "tg-llmnet" {
		t.Errorf("CORE networks %s", got)
	}
	if roles[topospec.RoleFetch].Env["https_proxy"] != "http://10.213.2.2:3128" || !strings.Contains(roles[topospec.RoleFetch].Env["no_proxy"], "10.213.1.0/24") {
		t.Errorf("FETCH env %v", roles[topospec.RoleFetch].Env)
	}
	if len(roles[topospec.RoleCore].Env) != 0 || roles[topospec.RoleToolExec].SandboxNetwork != "none" {
		t.Errorf("CORE env %v, TOOL_EXEC sandbox %q", roles[topospec.RoleCore].Env, roles[topospec.RoleToolExec].SandboxNetwork)
	}
}

func TestDefaultSubnetsDisjoint(t *testing.T) {
	in := validInput()
	in.Docker.Subnets = nil
	for _, name := range []string{"a", "tg", "prod-agents", "tf-acc-tg-xyz"} {
		in.Name = name
		s, ps := Build(in)
		if len(ps) > 0 {
			t.Fatalf("%s: %v", name, ps)
		}
		for _, n := range s.Docker.Networks {
			if !netip.MustParsePrefix("10.192.0.0/10").Contains(n.Subnet.Addr()) {
				t.Errorf("%s: default %s outside 10.192.0.0/10", name, n.Subnet)
			}
		}
	}
}

func TestBuildProblems(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*topospec.Input)
		field  string // Field[index]
		want   string // in Summary or Detail
	}{
		{"empty name", func(in *topospec.Input) { in.Name = "" }, "name", "empty"},
		{"upper-case name", func(in *topospec.Input) { in.Name = "Prod" }, "name", "lower-case"},
		{"long name", func(in *topospec.Input) { in.Name = strings.Repeat("a", 25) }, "name", "24"},
		{"the managed bridge's name", func(in *topospec.Input) { in.Name = "meepa-bridge" }, "name", "managed bridge"},
		{"overlapping subnets", func(in *topospec.Input) { in.Docker.Subnets[topospec.FetchNet] = "10.213.1.128/25" }, "fetchnet_subnet", "overlaps llmnet"},
		{"not a CIDR", func(in *topospec.Input) { in.Docker.Subnets[topospec.LLMNet] = "10.213.1.0" }, "llmnet_subnet", "not an IPv4 CIDR"},
		{"host bits", func(in *topospec.Input) { in.Docker.Subnets[topospec.LLMNet] = "10.213.1.7/24" }, "llmnet_subnet", "10.213.1.0/24"},
		{"too small", func(in *topospec.Input) { in.Docker.Subnets[topospec.LLMNet] = "10.213.1.0/30" }, "llmnet_subnet", "/28"},
		{"ipv6", func(in *topospec.Input) { in.Docker.Subnets[topospec.LLMNet] = "fd00::/64" }, "llmnet_subnet", "only IPv4"},
		{"gateway outside", func(in *topospec.Input) { in.Docker.Gateways[topospec.LLMNet] = "10.9.9.9" }, "llmnet_gateway", "lower half"},
		{"pinned ip outside subnet", func(in *topospec.Input) { in.Docker.ProxyIP = "10.213.1.5" }, "proxy.ip", "not inside the fetchnet subnet"},
		{"pinned ip in dynamic half", func(in *topospec.Input) { in.Docker.EgressIP = "10.213.3.200" }, "proxy.egress_ip", "upper half"},
		{"pinned ip is gateway", func(in *topospec.Input) { in.Docker.ProxyIP = "10.213.2.1" }, "proxy.ip", "gateway"},
		{"allow with scheme", func(in *topospec.Input) { in.Proxy.Allow = []string{"ok.com", "https://example.com"} }, "proxy.allow[1]", "scheme"},
		{"allow with path", func(in *topospec.Input) { in.Proxy.Allow = []string{"example.com/x"} }, "proxy.allow[0]", "path"},
		{"allow port 0", func(in *topospec.Input) { in.Proxy.Allow = []string{"example.com:0"} }, "proxy.allow[0]", "65535"},
		{"allow port 70000", func(in *topospec.Input) { in.Proxy.Allow = []string{"example.com:70000"} }, "proxy.allow[0]", "65535"},
		{"proxy port 70000", func(in *topospec.Input) { in.Proxy.Port = 70000 }, "proxy.port", "1 to 65535"},
		{"allow_private not CIDR", func(in *topospec.Input) { in.Docker.AllowPrivate = []string{"nope"} }, "proxy.allow_private[0]", "CIDR"},
		{"dns not ip", func(in *topospec.Input) { in.Proxy.DNS = []string{"dns.example"} }, "proxy.dns[0]", "IPv4"},
		{"missing image", func(in *topospec.Input) { in.Proxy.Image = "" }, "proxy.image", "agent-runner"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := validInput()
			c.mutate(&in)
			_, ps := Build(in)
			if len(ps) != 1 {
				t.Fatalf("want exactly one problem, got %v", ps)
			}
			p := ps[0]
			if at := p.At(); at != c.field {
				t.Errorf("problem at %s, want %s (%v)", at, c.field, p)
			}
			if !strings.Contains(p.Summary+" "+p.Err.Error(), c.want) {
				t.Errorf("problem %q does not mention %q", p.Summary+": "+p.Err.Error(), c.want)
			}
		})
	}
}

// TestParseAllow: the plan parses each allow entry once, with the proxy's
// own grammar, into the spec's typed list; a bad one is a problem at its
// index.
func TestParseAllow(t *testing.T) {
	parse := func(raw string) (string, error) {
		in := validInput()
		in.Proxy.Allow = []string{raw}
		s, ps := Build(in)
		if len(ps) > 0 {
			if at := ps[0].At(); at != "proxy.allow[0]" {
				t.Errorf("%q: problem at %s", raw, at)
			}
			return "", ps[0]
		}
		return s.Proxy.Allow[0].String(), nil
	}
	ok := map[string]string{
		"Example.COM.":       "example.com:443",
		"example.com:8443":   "example.com:8443",
		"*.example.com":      "*.example.com:443",
		"198.18.0.2:443":     "198.18.0.2:443",
		"[2001:db8::1]:8443": "[2001:db8::1]:8443",
		"[2001:DB8::1]":      "[2001:db8::1]:443",
	}
	for in, want := range ok {
		e, err := parse(in)
		if err != nil || e != want {
			t.Errorf("ParseAllow(%q) = %v, %v; want %s", in, e, err, want)
		}
	}
	for _, bad := range []string{"", "http://x.com", "x.com/", "u@x.com", "x.com:", "x.com:abc", "2001:db8::1", "x..com", "*", "a b"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("ParseAllow(%q) accepted", bad)
		}
	}
}

func TestWidening(t *testing.T) {
	old, _ := Build(validInput())
	in := validInput()
	in.Proxy.Allow = append(in.Proxy.Allow, "new.example.org:443")
	in.Docker.Firewall.Enabled = false
	nw, _ := Build(in)
	got := strings.Join(Widening(old, nw), "\n")
	for _, want := range []string{"allow connections to new.example.org:443", "host firewall will be removed"} {
		if !strings.Contains(got, want) {
			t.Errorf("widening %q lacks %q", got, want)
		}
	}
	if w := Widening(nw, old); len(w) != 0 {
		t.Errorf("narrowing reported as widening: %v", w)
	}
}

func TestEngineLeaksDNS(t *testing.T) {
	for v, want := range map[string]bool{
		"20.10.24+dfsg1": true, "23.0.10": true, "23.0.11": false, "24.0.9": true,
		"25.0.3": true, "25.0.4": false, "26.0.0": false, "27.3.1": false,
	} {
		if got := EngineLeaksDNS(v); got != want {
			t.Errorf("EngineLeaksDNS(%s) = %t, want %t", v, got, want)
		}
	}
}
