package kubetopology

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The stand-in cluster DNS: kube-system's kube-dns Service at
// standInClusterDNS, whose packets a DNAT rule in the cluster's namespace
// brings to a resolver the test runs at standInDNSEndpoint, as kube-proxy
// brings them to CoreDNS (which forwards every name it does not own
// upstream). The endpoint must not be the Service's own address:
// kube-router lets anything to the service range pass its INPUT chain,
// since a service proxy rewrites the destination first and the policies
// apply to the endpoint.
const (
	standInClusterDNS  = "10.96.0.10"
	standInDNSEndpoint = "10.250.0.53"
	dnsOutsideName     = "outside.meepa-dns.test"
	dnsModelHost       = "model.meepa-dns.test"
)

// TestMemberDNSReachesNothingOnCluster: no ThreeGate member reaches a
// resolver that answers outside names. Two resolvers stand for the
// outside: a kube-dns Service (its address served by the test) and the
// node's own upstream, the first nameserver of the host's resolv.conf
// (this cluster's kubelet has no clusterDNS, so a ClusterFirst pod's
// resolv.conf names it). A pod of no topology gets an answer from both
// (the control: the resolvers are reachable); then every kind of member,
// each pod made by the product's own constructor (the CORE and FETCH
// runner pods of kubedeploy.RunnerDeployment, the CORE, FETCH and TOOL_EXEC
// execution pods of kube.HardenedPod) and Verify's probe pods, asks for
// the outside name through its own resolv.conf and straight at the
// Service's address, over UDP and TCP: nothing resolves, and neither
// resolver sees a query. A runner still finds its model host (hostAliases).
func TestMemberDNSReachesNothingOnCluster(t *testing.T) {
	c := testkube.PermissiveCluster(t, "tf-acc-kdns") // the control pod is a plain fixture
	image := testkube.RunnerImage(t)
	ctx := context.Background()
	names := map[string]string{dnsOutsideName + ".": "198.51.100.53"}
	clusterDNS := testkube.DNSInCluster(t, standInDNSEndpoint, names)
	upstream := testkube.DNSInCluster(t, hostNameserver(t), names)
	standInDNSService(t, c)
	queries := func() int64 { return clusterDNS.Queries.Load() + upstream.Queries.Load() }

	svc := NewService(c, Options{Logger: testLogger{t}, PullPolicy: corev1.PullNever, ReadyTimeout: 90 * time.Second})
	s, ps := Build(topospec.Input{Name: "tgd", Proxy: topospec.ProxyInput{Image: image, Allow: []string{"203.0.113.9:443"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	testutil.Cleanup(t, "teardown topology", func() error { return svc.Teardown(context.Background(), s.Name) })
	_, err := svc.Apply(ctx, s)
	testutil.Must(t, err)

	svcDNS := standInClusterDNS + ":53"
	checks := []probe.Check{
		{Kind: probe.DNS, Target: dnsOutsideName},
		{Kind: probe.DNSAt, Via: svcDNS, Target: dnsOutsideName},
		{Kind: probe.TCP, Target: svcDNS},
	}
	// The control: a pod of no topology, with the cluster's defaults.
	control := dnsPod(t, c, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "control"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: image}}},
	}, checks)
	before := queries()
	if control.results[0].Observed != probe.Resolved || control.results[1].Observed != probe.Resolved || control.results[2].Observed != probe.Open ||
		before < 2 {
		t.Fatalf("control pod: resolv.conf %v, results %+v, %d queries seen: the stand-in resolvers must answer a pod outside the topology",
			control.nameservers, summary(control.results), before)
	}
	t.Logf("control pod (no topology): nameservers %v; %s, %s, %s; %d queries reached the stand-ins",
		control.nameservers, control.results[0].Observed, control.results[1].Observed, control.results[2].Observed, before)

	members := map[string]*corev1.Pod{}
	for _, role := range []string{topospec.RoleCore, topospec.RoleFetch} {
		id := "dns-" + strings.ToLower(role)
		d, err := kubedeploy.RunnerDeployment(kubedeploy.NamesFor(id), c.Namespace, kubedeploy.RunnerPod{
			AgentID: id, Image: image, PullPolicy: corev1.PullNever, Port: kubedeploy.DefaultPort, Topology: s.Name, Role: role,
			HostAliases: kube.MemberHostAliases(dnsModelHost, []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}),
		})
		testutil.Must(t, err)
		spec := d.Spec.Template.Spec
		// Only what this test needs of the runner: its labels, DNS and
		// hosts; no config Secret, identity or readiness.
		spec.ServiceAccountName, spec.AutomountServiceAccountToken, spec.Volumes = "", ptrTo(false), nil
		spec.Containers[0].VolumeMounts, spec.Containers[0].ReadinessProbe = nil, nil
		members[role+"/runner"] = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: id + "-runner", Labels: d.Spec.Template.Labels}, Spec: spec}
	}
	for _, role := range []string{topospec.RoleCore, topospec.RoleFetch, topospec.RoleToolExec} {
		p, err := kube.HardenedPod(kube.PodSpec{AgentID: "dns-" + strings.ToLower(strings.ReplaceAll(role, "_", "-")), Topology: s.Name, Role: role,
			Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/true"}, WorkspaceClaim: "none"}, c.Namespace, "m1")
		testutil.Must(t, err)
		p.GenerateName, p.Name = "", strings.ToLower(strings.ReplaceAll(role, "_", "-"))+"-execution"
		p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}} // the test has no claim
		members[role+"/execution"] = p
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	got := map[string]dnsOutcome{}
	for role, p := range members {
		wg.Go(func() {
			cs := checks
			if strings.HasSuffix(role, "/runner") {
				cs = append(slices.Clone(checks), probe.Check{Kind: probe.DNS, Target: dnsModelHost})
			}
			o := dnsPod(t, c, p, cs)
			mu.Lock()
			got[role] = o
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, role := range slices.Sorted(maps.Keys(got)) {
		o := got[role]
		t.Logf("%-20s nameservers %v: %s", role, o.nameservers, summary(o.results))
		if !slices.Equal(o.nameservers, []string{kube.MemberDNSSink}) {
			t.Errorf("%s: resolv.conf names %v, want only %s", role, o.nameservers, kube.MemberDNSSink)
		}
		if r := o.results[0]; r.Observed != probe.NotResolved {
			t.Errorf("%s: %s through its resolv.conf: %s (%s), want not-resolved", role, dnsOutsideName, r.Observed, r.Detail)
		}
		if r := o.results[1]; r.Observed == probe.Resolved || r.Observed == probe.NotResolved {
			t.Errorf("%s: asked the cluster DNS Service at %s: %s (%s), want no answer", role, svcDNS, r.Observed, r.Detail)
		}
		if r := o.results[2]; !topospec.Passes(topospec.ExpectBlocked, r.Observed, true) {
			t.Errorf("%s: tcp to the cluster DNS Service at %s: %s, want blocked", role, svcDNS, r.Observed)
		}
		if len(o.results) > 3 {
			if r := o.results[3]; r.Observed != probe.Resolved || r.Detail != "192.0.2.7" {
				t.Errorf("%s: its model host %s: %s (%s), want 192.0.2.7 from its hostAliases", role, dnsModelHost, r.Observed, r.Detail)
			}
		}
	}

	// Verify's probe pods, and its DNS rows for every role.
	rep, err := svc.Verify(ctx, s, topospec.VerifyOptions{DNSName: dnsOutsideName, HostPort: 10250})
	testutil.Must(t, err)
	t.Log("verify:\n" + rep.Table())
	want := []string{"DNS outside name", "DNS topology name", "cluster DNS udp/53", "cluster DNS tcp/53"}
	rows := map[string]map[string]topospec.Probe{}
	for _, p := range rep.Probes {
		if rows[p.Role] == nil {
			rows[p.Role] = map[string]topospec.Probe{}
		}
		rows[p.Role][p.What] = p
		if !p.Pass {
			t.Errorf("verify %s %s (%s): observed %s (%s), want %s", p.Role, p.What, p.Check, p.Observed, p.Detail, p.Expected)
		}
	}
	for _, role := range []string{"CORE/runner", "CORE/execution", "FETCH/runner", "FETCH/execution", "TOOL_EXEC/execution"} {
		for _, w := range want {
			if _, ok := rows[role][w]; !ok {
				t.Errorf("verify: %s has no %q row", role, w)
			}
		}
	}
	if n := queries() - before; n != 0 {
		t.Errorf("%d queries from members reached the stand-in resolvers, want none", n)
	}
}

// dnsOutcome is what a DNS test pod printed: its resolv.conf's nameservers
// and its probe results, in the order of the checks.
type dnsOutcome struct {
	nameservers []string
	results     []probe.Result
}

// dnsPod runs p (its one container's command replaced) to print its
// resolv.conf and run checks, after the settle a new pod needs to come
// under the policies, and returns what it printed.
func dnsPod(t *testing.T, c *kube.Client, p *corev1.Pod, checks []probe.Check) dnsOutcome {
	t.Helper()
	args := []string{topospec.ProxyBinary, "probe", "--timeout", "2s"}
	for _, ch := range checks {
		args = append(args, "'"+ch.String()+"'")
	}
	p.Spec.RestartPolicy = corev1.RestartPolicyNever
	p.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3; cat /etc/resolv.conf; exec " + strings.Join(args, " ")}
	p.Spec.Containers[0].Args = nil
	_, err := c.Clientset.CoreV1().Pods(c.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "pod "+p.Name, func() error {
		zero := int64(0)
		err := c.Clientset.CoreV1().Pods(c.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	var o dnsOutcome
	sc := bufio.NewScanner(strings.NewReader(podOutput(t, c, p.Name)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var r probe.Result
		switch {
		case strings.HasPrefix(line, "nameserver"):
			o.nameservers = append(o.nameservers, strings.TrimSpace(strings.TrimPrefix(line, "nameserver")))
		case json.Unmarshal([]byte(line), &r) == nil && r.Kind != "":
			o.results = append(o.results, r)
		}
	}
	if len(o.results) != len(checks) {
		t.Fatalf("pod %s: %d results for %d checks", p.Name, len(o.results), len(checks))
	}
	return o
}

func summary(rs []probe.Result) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s=%s ", r.String(), r.Observed)
	}
	return b.String()
}

// standInDNSService makes kube-system's kube-dns Service at
// standInClusterDNS (no selector), as a cluster with CoreDNS has it, and
// the DNAT that brings its port 53 to the test's resolver; both go at the
// end.
func standInDNSService(t *testing.T, c *kube.Client) {
	t.Helper()
	svcs := c.Clientset.CoreV1().Services("kube-system")
	_, err := svcs.Create(context.Background(), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Labels: map[string]string{"meepa.io/test": "stand-in"}},
		Spec: corev1.ServiceSpec{ClusterIP: standInClusterDNS, Ports: []corev1.ServicePort{
			{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53}, {Name: "dns-tcp", Protocol: corev1.ProtocolTCP, Port: 53},
		}},
	}, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "stand-in kube-dns Service", func() error {
		return svcs.Delete(context.Background(), "kube-dns", metav1.DeleteOptions{})
	})
	for _, proto := range []string{"udp", "tcp"} {
		rule := []string{"PREROUTING", "-d", standInClusterDNS, "-p", proto, "--dport", "53", "-j", "DNAT", "--to-destination", standInDNSEndpoint + ":53"}
		nat := func(verb string) error {
			args := append([]string{"--net=" + testkube.Netns(t), "iptables", "-w", "-t", "nat", verb}, rule...)
			if out, err := exec.Command("nsenter", args...).CombinedOutput(); err != nil {
				return fmt.Errorf("iptables %s %v in the cluster's namespace: %w: %s", verb, rule, err, out)
			}
			return nil
		}
		testutil.Must(t, nat("-I"))
		testutil.Cleanup(t, "stand-in kube-dns DNAT "+proto, func() error { return nat("-D") })
	}
}

// hostNameserver is the first nameserver of the host's resolv.conf, which
// the test cluster's kubelet hands to pods with the default DNS policy.
func hostNameserver(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile("/etc/resolv.conf")
	testutil.Must(t, err)
	for line := range strings.Lines(string(raw)) {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() && !a.IsLoopback() {
				return a.String()
			}
		}
	}
	t.Skip("the host's resolv.conf names no non-loopback IPv4 nameserver for the stand-in upstream")
	return ""
}

func ptrTo[T any](v T) *T { return &v }
