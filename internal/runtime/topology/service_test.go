package topology

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/firewall"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// logLine is one line a recorder received.
type logLine struct {
	level, msg string
	fields     map[string]any
}

// recorder is a logging.Logger that keeps every line, for tests that
// prove what an operator sees under TF_LOG=debug.
type recorder struct {
	mu    sync.Mutex
	lines []logLine
}

var _ logging.Logger = (*recorder)(nil)

func (r *recorder) add(level, msg string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, logLine{level: level, msg: msg, fields: logging.Fields(args)})
}

func (r *recorder) Trace(msg string, args ...any) { r.add("trace", msg, args) }
func (r *recorder) Debug(msg string, args ...any) { r.add("debug", msg, args) }
func (r *recorder) Info(msg string, args ...any)  { r.add("info", msg, args) }
func (r *recorder) Warn(msg string, args ...any)  { r.add("warn", msg, args) }
func (r *recorder) Error(msg string, args ...any) { r.add("error", msg, args) }

// take returns the lines so far and forgets them.
func (r *recorder) take() []logLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lines
	r.lines = nil
	return out
}

// want is one expected line: its message and the fields it must carry
// (compared as text).
type want struct {
	msg    string
	fields map[string]any
}

func (w want) matches(l logLine) bool {
	if l.msg != w.msg || l.level != "debug" {
		return false
	}
	for k, v := range w.fields {
		if fmt.Sprint(l.fields[k]) != fmt.Sprint(v) {
			return false
		}
	}
	return true
}

// expectInOrder checks that every wanted line was logged at debug level,
// in the given order (other lines may come between).
func expectInOrder(t *testing.T, step string, got []logLine, wants ...want) {
	t.Helper()
	next := 0
	for _, l := range got {
		if next < len(wants) && wants[next].matches(l) {
			next++
		}
	}
	if next < len(wants) {
		var b strings.Builder
		for _, l := range got {
			fmt.Fprintf(&b, "  %s %s %v\n", l.level, l.msg, l.fields)
		}
		t.Errorf("%s: line %d of %d not logged in order: %q %v; got:\n%s", step, next+1, len(wants), wants[next].msg, wants[next].fields, b.String())
	}
}

// chainRules counts the rules of one chain of a set.
func chainRules(set firewall.Set, chain string) int {
	n := 0
	for _, r := range set.Rules {
		if r.Chain == chain {
			n++
		}
	}
	return n
}

// count returns how many lines have msg.
func count(got []logLine, msg string) int {
	n := 0
	for _, l := range got {
		if l.msg == msg {
			n++
		}
	}
	return n
}

// TestServiceLogs: every create, change and removal of a network, the
// proxy container and the firewall rule set reaches the service's logger,
// with structured fields, in the order the service promises (networks,
// firewall, proxy on the way up; proxy, networks, firewall on the way down).
func TestServiceLogs(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	in := freeInput(t, cli, "meepa-test-tglog")
	in.Proxy = topospec.ProxyInput{Image: image, Allow: []string{"example.com"}}
	in.Docker.Firewall = &topospec.Firewall{Enabled: true}
	s, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	rec := &recorder{}
	svc := NewService(cli, rec)
	t.Cleanup(func() {
		if err := NewService(cli, nil).Teardown(context.WithoutCancel(ctx), s.Name); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	set := Rules(s)
	llm, fetch, egress := s.Network(topospec.LLMNet), s.Network(topospec.FetchNet), s.Network(topospec.EgressNet)

	// Create: networks, then the rule set, then the proxy.
	if st, err := svc.Apply(ctx, s); err != nil || len(st.Drift) > 0 {
		t.Fatalf("apply: drift %v, err %v", st.Drift, err)
	}
	got := rec.take()
	expectInOrder(t, "create", got,
		want{"network created", map[string]any{"network": llm.Name, "kind": topospec.LLMNet, "subnet": llm.Subnet, "internal": true}},
		want{"network created", map[string]any{"network": fetch.Name, "kind": topospec.FetchNet, "subnet": fetch.Subnet, "internal": true}},
		want{"network created", map[string]any{"network": egress.Name, "kind": topospec.EgressNet, "subnet": egress.Subnet, "internal": false}},
		want{"firewall chain created", map[string]any{"chain": firewall.ForwardChain(s.Name), "owner": set.Owner}},
		want{"firewall chain created", map[string]any{"chain": firewall.InputChain(s.Name), "owner": set.Owner}},
		want{"firewall rules applied atomically", map[string]any{"owner": set.Owner, "rules": len(set.Rules)}},
		want{"firewall jump inserted", map[string]any{"parent": firewall.DockerUser, "target": firewall.ForwardChain(s.Name)}},
		want{"firewall jump inserted", map[string]any{"parent": firewall.Input, "target": firewall.InputChain(s.Name)}},
		want{"proxy container created", map[string]any{"container": topospec.ProxyName(s.Name), "image": image, "ip": s.Docker.ProxyIP,
			"egress_ip": s.Docker.EgressIP, "config": ProxyConfigHash(s)}},
		want{"proxy container started", map[string]any{"container": topospec.ProxyName(s.Name)}},
	)

	// Change the allowlist: only the proxy is replaced; the rule set is
	// reloaded, but no chain or jump is created again.
	in.Proxy.Allow = append(in.Proxy.Allow, "example.org")
	s2, _ := Build(in)
	if _, err := svc.Apply(ctx, s2); err != nil {
		t.Fatal(err)
	}
	got = rec.take()
	expectInOrder(t, "allowlist change", got,
		want{"proxy container differs; replacing", map[string]any{"container": topospec.ProxyName(s.Name), "config": ProxyConfigHash(s),
			"want_config": ProxyConfigHash(s2)}},
		want{"container removed", map[string]any{"container": topospec.ProxyName(s.Name)}},
		want{"firewall rules applied atomically", map[string]any{"owner": set.Owner, "rules": len(set.Rules), "drift_repaired": 0}},
		want{"proxy container created", map[string]any{"container": topospec.ProxyName(s.Name), "allow_entries": 2}},
	)
	for _, msg := range []string{"network created", "network removed", "firewall chain created", "firewall jump inserted"} {
		if n := count(got, msg); n != 0 {
			t.Errorf("allowlist change logged %q %d times; nothing of the kind happened", msg, n)
		}
	}

	// Change a subnet: that network is replaced, and the proxy with it.
	in.Docker.Subnets[topospec.LLMNet] = strings.Replace(in.Docker.Subnets[topospec.LLMNet], ".0/24", ".0/25", 1)
	s3, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	if _, err := svc.Apply(ctx, s3); err != nil {
		t.Fatal(err)
	}
	got = rec.take()
	expectInOrder(t, "subnet change", got,
		want{"network differs; replacing", map[string]any{"network": llm.Name, "subnet": llm.Subnet, "want_subnet": s3.Network(topospec.LLMNet).Subnet}},
		want{"container removed", map[string]any{"container": topospec.ProxyName(s.Name)}},
		want{"network removed", map[string]any{"network": llm.Name}},
		want{"network created", map[string]any{"network": llm.Name, "subnet": s3.Network(topospec.LLMNet).Subnet}},
		want{"firewall rules applied atomically", map[string]any{"owner": set.Owner, "rules": len(Rules(s3).Rules)}},
		want{"proxy container created", map[string]any{"container": topospec.ProxyName(s.Name)}},
	)
	if n := count(got, "network created"); n != 1 {
		t.Errorf("subnet change created %d networks, want 1", n)
	}

	// Removal: the proxy, the networks, then the rule set.
	if err := svc.Teardown(ctx, s.Name); err != nil {
		t.Fatal(err)
	}
	got = rec.take()
	expectInOrder(t, "teardown", got,
		want{"container removed", map[string]any{"container": topospec.ProxyName(s.Name)}},
		want{"network removed", map[string]any{"network": llm.Name}},
		want{"network removed", map[string]any{"network": fetch.Name}},
		want{"network removed", map[string]any{"network": egress.Name}},
		want{"firewall jump removed", map[string]any{"parent": firewall.DockerUser, "target": firewall.ForwardChain(s.Name), "count": 1}},
		want{"firewall jump removed", map[string]any{"parent": firewall.Input, "target": firewall.InputChain(s.Name), "count": 1}},
		want{"firewall chain removed", map[string]any{"chain": firewall.ForwardChain(s.Name), "rules": chainRules(Rules(s3), firewall.ForwardChain(s.Name))}},
		want{"firewall chain removed", map[string]any{"chain": firewall.InputChain(s.Name), "rules": chainRules(Rules(s3), firewall.InputChain(s.Name))}},
	)
}
