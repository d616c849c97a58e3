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
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The project's test cluster (scripts/k8s-up.sh): its addresses, as
// scripts/k8s/common.sh and the API server's flags set them.
var testCluster = ClusterNetwork{
	PodCIDRs:     pfx("10.244.0.0/16"),
	ServiceCIDRs: pfx("10.96.0.0/24"),
	Nodes:        pfx("10.250.0.1/32", "10.250.255.0/30"),
	APIServer:    []netip.Addr{netip.MustParseAddr("10.250.0.1"), netip.MustParseAddr("10.250.255.2"), netip.MustParseAddr("10.96.0.1")},
}

const clusterBusybox = "meepa.local/busybox:1"

// clusterClient connects to the test cluster named by MEEPA_KUBECONFIG, or
// skips: the cluster is started by scripts/k8s-up.sh, never by a test.
func clusterClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	testutil.RequireDocker(t)
	path := os.Getenv("MEEPA_KUBECONFIG")
	if path == "" {
		t.Skip("needs the test cluster: MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	testutil.Must(t, err)
	cs, err := kubernetes.NewForConfig(cfg)
	testutil.Must(t, err)
	return cs
}

// TestThreeGatePoliciesOnCluster applies the policies to the real cluster
// (kube-router enforcing them) and probes from a pod of every role with
// real TCP connections. The cluster has no route to the internet, so the
// proxy's public egress is checked only for what it must not reach; a pod
// outside the topology is the control that the targets answer at all.
func TestThreeGatePoliciesOnCluster(t *testing.T) {
	cs := clusterClient(t)
	ctx := context.Background()
	ns := "tf-acc-netpol-" + randHex(4)
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "namespace "+ns, func() error {
		err := cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	})
	proxyLabels := map[string]string{"app": "egress-proxy"}
	servers := map[string]map[string]string{
		"llm":         {"app": "llm"},
		"proxy":       merge(ThreeGateMemberLabels("tg", topology.RoleProxy, false), proxyLabels),
		"core-target": ThreeGateMemberLabels("tg", topology.RoleCore, false),
		"outsider":    {"app": "outsider"},
	}
	waitServiceAccount(t, cs, ns)
	ips := map[string]string{}
	for name, l := range servers {
		startPod(t, cs, ns, name, l, serverScript)
	}
	for name := range servers {
		ips[name] = waitPodIP(t, cs, ns, name)
	}
	pols, err := ThreeGatePolicies(PolicyInput{
		Name: "tg", Namespace: ns, ProxyLabels: proxyLabels, Cluster: testCluster,
		LLM: LLMEndpoint{CIDRs: pfx(ips["llm"] + "/32"), Ports: []int{8080}},
	})
	testutil.Must(t, err)
	for i := range pols {
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, &pols[i], metav1.CreateOptions{}); err != nil {
			t.Fatalf("the API server refuses policy %s: %v", pols[i].Name, err)
		}
	}
	checkClusterTable(t, cs, ns, ips, proxyLabels)
}

// serverScript accepts connections on every port a probe tries.
const serverScript = `for p in 22 443 3128 8080; do nc -ll -p $p -e /bin/echo hi & done; wait`

func checkClusterTable(t *testing.T, cs kubernetes.Interface, ns string, ips map[string]string, proxyLabels map[string]string) {
	t.Helper()
	targets := map[string]string{
		"llm:8080": ips["llm"] + " 8080", "llm:22": ips["llm"] + " 22",
		"proxy:3128": ips["proxy"] + " 3128", "proxy:22": ips["proxy"] + " 22",
		"core-target:8080": ips["core-target"] + " 8080",
		"outsider:8080":    ips["outsider"] + " 8080", "outsider:443": ips["outsider"] + " 443",
		"node-apiserver:6443": "10.250.0.1 6443", "veth-apiserver:6443": "10.250.255.2 6443",
	}
	llm := []string{"llm:8080"}
	allowed := map[string][]string{
		"core": llm, "core-exec": llm, "tool-exec": llm, "tool-exec-exec": nil,
		"fetch": {"llm:8080", "proxy:3128"}, "fetch-exec": {"llm:8080", "proxy:3128"},
		"proxy":      nil,
		"non-member": {"llm:8080", "llm:22", "outsider:8080", "outsider:443", "node-apiserver:6443", "veth-apiserver:6443"},
	}
	probes := map[string]map[string]string{
		"core": ThreeGateMemberLabels("tg", topology.RoleCore, false), "core-exec": ThreeGateMemberLabels("tg", topology.RoleCore, true),
		"fetch": ThreeGateMemberLabels("tg", topology.RoleFetch, false), "fetch-exec": ThreeGateMemberLabels("tg", topology.RoleFetch, true),
		"tool-exec": ThreeGateMemberLabels("tg", topology.RoleToolExec, false), "tool-exec-exec": ThreeGateMemberLabels("tg", topology.RoleToolExec, true),
		"proxy":      merge(ThreeGateMemberLabels("tg", topology.RoleProxy, false), proxyLabels),
		"non-member": {"app": "prober"},
	}
	script := probeScript(targets)
	for name, l := range probes {
		startPod(t, cs, ns, "probe-"+name, l, script)
	}
	for name := range probes {
		got := probeResult(t, cs, ns, "probe-"+name)
		want := map[string]bool{}
		for _, d := range allowed[name] {
			want[d] = true
		}
		for d := range targets {
			if got[d] != want[d] {
				t.Errorf("%s → %s: connected = %v, want %v", name, d, got[d], want[d])
			}
		}
	}
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
