package topology

import (
	"context"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestRecordRoundTrip: the record holds the typed spec and reads back to
// the same proxy configuration; a record with an allow entry that does not
// parse is an error, not an entry dropped or kept.
func TestRecordRoundTrip(t *testing.T) {
	in := validInput()
	in.Proxy.DNS = []string{"9.9.9.9"}
	in.Docker.AllowPrivate = []string{"10.9.0.0/16"}
	s, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	rec, err := record(s)
	if err != nil {
		t.Fatal(err)
	}
	back, err := topospec.ParseRecord(rec)
	if err != nil {
		t.Fatal(err)
	}
	if ProxyConfigHash(back) != ProxyConfigHash(s) || strings.Join(topospec.ProxyCommand(back), " ") != strings.Join(topospec.ProxyCommand(s), " ") {
		t.Errorf("record round trip:\n%+v\nwant\n%+v", back, s)
	}
	if err := checkSpec(back); err != nil {
		t.Error(err)
	}
	bad := strings.Replace(rec, `"example.com:443"`, `"https://example.com/x"`, 1)
	if bad == rec {
		t.Fatalf("no allow entry to spoil in %s", rec)
	}
	if _, err := topospec.ParseRecord(bad); err == nil || !strings.Contains(err.Error(), "https://example.com/x") {
		t.Errorf("a bad allow entry in the record: %v", err)
	}
}

// TestProxyWithoutRecord: a topology whose proxy was made by the release
// before records (no LabelSpec, the inputs only on its command line) is
// still read: LiveSpec, Import and role resolution fall back to the
// command line, Read says the proxy carries no record, and the next apply
// replaces the proxy with one that does.
func TestProxyWithoutRecord(t *testing.T) {
	testutil.RequireDocker(t)
	ctx := context.Background()
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	in := freeInput(t, cli, "meepa-test-tgrec")
	in.Proxy = topospec.ProxyInput{Image: image, Allow: []string{"example.com", "203.0.113.9:8443"}, DNS: []string{"9.9.9.9"}}
	in.Docker.AllowPrivate = []string{"10.9.0.0/16"}
	s, ps := Build(in)
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	svc := NewService(cli, nil)
	t.Cleanup(func() {
		if err := svc.Teardown(context.WithoutCancel(ctx), s.Name); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	if _, err := svc.ApplyHost(ctx, s); err != nil {
		t.Fatal(err)
	}
	// Replace the proxy with one made the way the previous release made it.
	pn := topospec.ProxyName(s.Name)
	testutil.Must(t, cli.ContainerRemove(ctx, pn, container.RemoveOptions{Force: true}))
	fetch, egress := s.Network(topospec.FetchNet), s.Network(topospec.EgressNet)
	cmd := topospec.ProxyCommand(s)
	resp, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Entrypoint: cmd[:1], Cmd: cmd[1:], User: ProxyUser,
		Labels: engine.Labels("proxy", map[string]string{"threegate": s.Name, "threegate.config": ProxyConfigHash(s)}),
	}, ProxyHostConfig(fetch.Name), &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
		fetch.Name: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: s.Docker.ProxyIP.String()}},
	}}, nil, pn)
	testutil.Must(t, err)
	testutil.Must(t, cli.NetworkConnect(ctx, egress.Name, resp.ID, &network.EndpointSettings{
		IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: s.Docker.EgressIP.String()}}))
	testutil.Must(t, cli.ContainerStart(ctx, resp.ID, container.StartOptions{}))

	imported, err := svc.Import(ctx, s.Name)
	testutil.Must(t, err)
	if ProxyConfigHash(imported) != ProxyConfigHash(s) || imported.Docker.Firewall != s.Docker.Firewall {
		t.Errorf("imported from the command line:\n%+v\nwant\n%+v", imported, s)
	}
	role, err := ResolveRole(ctx, cli, s.Name, topospec.RoleFetch)
	testutil.Must(t, err)
	if role.Env["https_proxy"] != ProxyURL(s) || strings.Join(role.Networks, ",") != NetworkName(s.Name, topospec.LLMNet)+","+fetch.Name {
		t.Errorf("FETCH role from the command line: %+v", role)
	}
	st, err := svc.Read(ctx, s)
	testutil.Must(t, err)
	if d := strings.Join(st.Drift, "\n"); !strings.Contains(d, "carries no record") {
		t.Errorf("drift of a proxy without a record: %q", d)
	}
	st, err = svc.Apply(ctx, s)
	testutil.Must(t, err)
	if len(st.Drift) > 0 || st.ProxyID == resp.ID {
		t.Fatalf("apply did not replace the old proxy (id %s, was %s): drift %v", st.ProxyID, resp.ID, st.Drift)
	}
	c, err := cli.ContainerInspect(ctx, pn)
	testutil.Must(t, err)
	want, err := record(s)
	testutil.Must(t, err)
	if c.Config.Labels[LabelSpec] != want {
		t.Errorf("record after apply = %q, want %q", c.Config.Labels[LabelSpec], want)
	}
	again, err := svc.Import(ctx, s.Name)
	testutil.Must(t, err)
	if ProxyConfigHash(again) != ProxyConfigHash(s) {
		t.Errorf("imported from the record: %+v", again)
	}
}
