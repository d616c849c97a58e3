package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

const clusterBusybox = "meepa.local/busybox:1"

// clusterClient connects to the test cluster named by MEEPA_KUBECONFIG, or
// skips: the cluster is started by scripts/k8s-up.sh, never by a test.
func clusterClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	return clusterKube(t).Clientset
}

// clusterKube is clusterClient as a *Client (in the default namespace).
func clusterKube(t *testing.T) *Client {
	t.Helper()
	testutil.RequireDocker(t)
	path := os.Getenv("MEEPA_KUBECONFIG")
	if path == "" {
		t.Skip("needs the test cluster: MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)")
	}
	c, err := Connect(Config{ConfigPath: path})
	testutil.Must(t, err)
	return c
}

// TestDiscoverClusterOnCluster: the test cluster's addresses as its
// scripts set them (scripts/k8s/common.sh and the API server's flags).
func TestDiscoverClusterOnCluster(t *testing.T) {
	c := clusterKube(t)
	cn, err := DiscoverCluster(context.Background(), c)
	testutil.Must(t, err)
	t.Logf("discovered: %+v", cn)
	want := ClusterNetwork{
		PodCIDRs:     pfx("10.244.0.0/24"),
		ServiceCIDRs: pfx("10.96.0.0/24"),
		Nodes:        pfx("10.250.0.1/32"),
		APIServer: []netip.AddrPort{netip.MustParseAddrPort("10.96.0.1:443"), netip.MustParseAddrPort("10.250.0.1:6443"),
			netip.MustParseAddrPort("10.250.255.2:6443")},
	}
	if fmt.Sprint(cn) != fmt.Sprint(want) {
		t.Errorf("DiscoverCluster = %+v\nwant %+v", cn, want)
	}
}

// TestThreeGatePoliciesOnCluster applies the policies of a topology and
// of one CORE agent's model to the real cluster (kube-router enforcing
// them) and probes with real TCP connections from pods labelled as each
// kind of member. The policies are what is tested, so the proxy, the
// asked runner and the model are busybox servers with the right labels.
// The cluster has no route to the internet, so the proxy's public egress
// is checked only for what it must not reach; a pod outside the topology
// is the control that every target answers at all.
func TestThreeGatePoliciesOnCluster(t *testing.T) {
	c := clusterKube(t)
	cs := c.Clientset
	ctx := context.Background()
	cluster, err := DiscoverCluster(ctx, c)
	testutil.Must(t, err)
	ns := "tf-acc-netpol-" + randHex(4)
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "namespace "+ns, func() error {
		err := cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	servers := map[string]map[string]string{
		"llm":          {"app": "llm"},
		"proxy":        ThreeGateProxyLabels("tg"),
		"fetch-runner": merge(ThreeGateRunnerLabels("tg", topospec.RoleFetch), agentLabels("a-fetch")),
		"outsider":     {"app": "outsider"},
	}
	waitServiceAccount(t, cs, ns)
	ips := map[string]string{}
	for name, l := range servers {
		startPod(t, cs, ns, name, l, serverScript)
	}
	for name := range servers {
		ips[name] = waitPodIP(t, cs, ns, name)
	}
	pols, err := ThreeGatePolicies(PolicyInput{Name: "tg", Namespace: ns, Cluster: cluster})
	testutil.Must(t, err)
	llm, err := AgentLLMPolicy("tg", ns, "a-core", agentLabels("a-core"),
		LLMEndpoint{CIDRs: pfx(ips["llm"] + "/32"), Ports: []int{8080}}, cluster)
	testutil.Must(t, err)
	for _, p := range append(pols, llm) {
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, &p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refuses policy %s: %v", p.Name, err)
		}
	}
	checkClusterTable(t, cs, ns, ips)
}

// serverScript accepts connections on every port a probe tries.
const serverScript = `for p in 22 443 3128 8080; do nc -ll -p $p -e /bin/echo hi & done; wait`

func checkClusterTable(t *testing.T, cs kubernetes.Interface, ns string, ips map[string]string) {
	t.Helper()
	targets := map[string]string{
		"llm:8080": ips["llm"] + " 8080", "llm:22": ips["llm"] + " 22",
		"proxy:3128": ips["proxy"] + " 3128", "proxy:22": ips["proxy"] + " 22",
		"fetch-runner:8080": ips["fetch-runner"] + " 8080", "fetch-runner:22": ips["fetch-runner"] + " 22",
		"outsider:8080":       ips["outsider"] + " 8080",
		"node-apiserver:6443": "10.250.0.1 6443", "veth-apiserver:6443": "10.250.255.2 6443",
	}
	api := []string{"node-apiserver:6443", "veth-apiserver:6443"}
	allowed := map[string][]string{
		"core-runner": append([]string{"llm:8080", "fetch-runner:8080"}, api...),
		"tool-runner": api,
		"core-exec":   nil,
		"fetch-exec":  {"proxy:3128"},
		"tool-exec":   nil,
		"proxy":       nil,
		"non-member":  {"llm:8080", "llm:22", "outsider:8080", "node-apiserver:6443", "veth-apiserver:6443"},
	}
	probes := map[string]map[string]string{
		"core-runner": merge(ThreeGateRunnerLabels("tg", topospec.RoleCore), agentLabels("a-core")),
		"tool-runner": merge(ThreeGateRunnerLabels("tg", topospec.RoleToolExec), agentLabels("a-tool")),
		"core-exec":   ThreeGateExecutionLabels("tg", topospec.RoleCore),
		"fetch-exec":  ThreeGateExecutionLabels("tg", topospec.RoleFetch),
		"tool-exec":   ThreeGateExecutionLabels("tg", topospec.RoleToolExec),
		"proxy":       ThreeGateProxyLabels("tg"),
		"non-member":  {"app": "prober"},
	}
	script := probeScript(targets)
	for name, l := range probes {
		startPod(t, cs, ns, "probe-"+name, l, script)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-12s %-20s %-9s %-9s %s\n", "FROM", "TO", "EXPECTED", "OBSERVED", "PASS")
	for _, name := range sortedKeys(probes) {
		got := probeResult(t, cs, ns, "probe-"+name)
		want := map[string]bool{}
		for _, d := range allowed[name] {
			want[d] = true
		}
		for _, d := range sortedKeys(targets) {
			fmt.Fprintf(&table, "%-12s %-20s %-9s %-9s %t\n", name, d, word(want[d]), word(got[d]), got[d] == want[d])
			if got[d] != want[d] {
				t.Errorf("%s → %s: connected = %v, want %v", name, d, got[d], want[d])
			}
		}
	}
	t.Log("observed connectivity:\n" + table.String())
}

func word(connected bool) string {
	if connected {
		return "open"
	}
	return "blocked"
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// probeScript waits for the node to have the pod's policies in force,
// then connects to each target once (busybox nc exits 0 when the
// connection is made) and prints "<name> ok" or "<name> no".
func probeScript(targets map[string]string) string {
	names := make([]string, 0, len(targets))
	for n := range targets {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("sleep 4\n")
	for _, n := range names {
		fmt.Fprintf(&b, "if nc -w 2 %s -e /bin/true 2>/dev/null; then echo '%s ok'; else echo '%s no'; fi\n", targets[n], n, n)
	}
	return b.String()
}

func startPod(t *testing.T, cs kubernetes.Interface, ns, name string, labels map[string]string, script string) {
	t.Helper()
	one := int64(1)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: &one,
			AutomountServiceAccountToken:  new(bool),
			Containers: []corev1.Container{{
				Name: "c", Image: clusterBusybox, ImagePullPolicy: corev1.PullNever,
				Command: []string{"/bin/sh", "-c", script},
			}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
}

// waitServiceAccount: pods of a new namespace are refused until its
// default service account exists.
func waitServiceAccount(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		_, err := cs.CoreV1().ServiceAccounts(ns).Get(context.Background(), "default", metav1.GetOptions{})
		if err == nil {
			return
		}
		if !apierrors.IsNotFound(err) || time.Now().After(deadline) {
			t.Fatalf("default service account of %s: %v", ns, err)
		}
	}
}

func waitPodIP(t *testing.T, cs kubernetes.Interface, ns, name string) string {
	t.Helper()
	p := waitPod(t, cs, ns, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" })
	return p.Status.PodIP
}

func probeResult(t *testing.T, cs kubernetes.Interface, ns, name string) map[string]bool {
	t.Helper()
	waitPod(t, cs, ns, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodSucceeded })
	raw, err := cs.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	testutil.Must(t, err)
	got := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if n, ok := strings.CutSuffix(line, " ok"); ok {
			got[n] = true
		}
	}
	return got
}

func waitPod(t *testing.T, cs kubernetes.Interface, ns, name string, done func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		testutil.Must(t, err)
		if done(p) {
			return p
		}
		if p.Status.Phase == corev1.PodFailed || time.Now().After(deadline) {
			t.Fatalf("pod %s: phase %s, %+v", name, p.Status.Phase, p.Status.ContainerStatuses)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
