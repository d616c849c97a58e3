package kubetopology

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

type testLogger struct{ t *testing.T }

func (l testLogger) log(level, msg string, args []any) { l.t.Logf("%s %s %v", level, msg, args) }
func (l testLogger) Trace(msg string, args ...any)     { l.log("TRACE", msg, args) }
func (l testLogger) Debug(msg string, args ...any)     { l.log("DEBUG", msg, args) }
func (l testLogger) Info(msg string, args ...any)      { l.log("INFO", msg, args) }
func (l testLogger) Warn(msg string, args ...any)      { l.log("WARN", msg, args) }
func (l testLogger) Error(msg string, args ...any)     { l.log("ERROR", msg, args) }

// TestTopologyLifecycleOnCluster: Apply makes the policies and a ready
// proxy; Read reports a deleted policy and an edited allow list, Apply
// restores both; Import reads the spec back; Teardown refuses while a
// member runs and then leaves nothing.
func TestTopologyLifecycleOnCluster(t *testing.T) {
	c := testkube.PermissiveCluster(t, "tf-acc-kubetopo") // its member pods are plain fixtures
	image := testkube.RunnerImage(t)
	ctx := context.Background()
	svc := NewService(c, Options{Logger: testLogger{t}, PullPolicy: corev1.PullNever, ReadyTimeout: 90 * time.Second})
	s, ps := Build(topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: image, Allow: []string{"example.com", "203.0.113.9:443"}, DNS: []string{"9.9.9.9"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	testutil.Cleanup(t, "teardown topology", func() error { return svc.Teardown(context.Background(), s.Name) })

	st, err := svc.Apply(ctx, s)
	testutil.Must(t, err)
	t.Logf("status after apply: %+v", st)
	if !st.ProxyReady || !st.ProxyPodIP.IsValid() || st.ProxyURL != "http://"+st.ProxyPodIP.String()+":3128" || len(st.Drift) != 0 {
		t.Fatalf("after apply: %+v; want a ready proxy at its pod address and no drift", st)
	}
	if len(st.Policies) != 7 {
		t.Errorf("policies %v, want the 7 of the topology", st.Policies)
	}
	readClean(t, svc, s)

	// A policy deleted out of band is drift; Apply puts it back.
	pols := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace)
	testutil.Must(t, pols.Delete(ctx, "tg-fetch-proxy", metav1.DeleteOptions{}))
	expectDrift(t, svc, s, "network policy tg-fetch-proxy is missing")
	_, err = svc.Apply(ctx, s)
	testutil.Must(t, err)
	readClean(t, svc, s)

	// An edited policy and a widened allow list are drift too.
	p, err := pols.Get(ctx, "tg-proxy", metav1.GetOptions{})
	testutil.Must(t, err)
	p.Spec.Egress = append(p.Spec.Egress, p.Spec.Egress[0])
	p.Spec.Egress[len(p.Spec.Egress)-1].Ports = nil
	_, err = pols.Update(ctx, p, metav1.UpdateOptions{})
	testutil.Must(t, err)
	deps := c.Clientset.AppsV1().Deployments(c.Namespace)
	d, err := deps.Get(ctx, topospec.ProxyName("tg"), metav1.GetOptions{})
	testutil.Must(t, err)
	d.Spec.Template.Spec.Containers[0].Args = append([]string{d.Spec.Template.Spec.Containers[0].Args[0], "--allow", "evil.example:443"}, d.Spec.Template.Spec.Containers[0].Args[1:]...)
	_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	testutil.Must(t, err)
	expectDrift(t, svc, s, "network policy tg-proxy differs")
	expectDrift(t, svc, s, "proxy allow list is [evil.example:443, example.com:443, 203.0.113.9:443]")
	_, err = svc.Apply(ctx, s)
	testutil.Must(t, err)
	readClean(t, svc, s)

	imported, err := svc.Import(ctx, "tg")
	testutil.Must(t, err)
	if ConfigHash(imported) != ConfigHash(s) {
		t.Errorf("import: %+v, applied %+v", imported, s)
	}
	if _, err := svc.Import(ctx, "nope"); err == nil {
		t.Error("import of a topology that does not exist succeeded")
	}

	// A Deployment made by the release before records carries only its
	// command line: Import falls back to it once, Read says the record is
	// missing, and the next Apply writes it without rolling the pod.
	d, err = deps.Get(ctx, topospec.ProxyName("tg"), metav1.GetOptions{})
	testutil.Must(t, err)
	if _, ok := d.Annotations[AnnotationSpec]; !ok {
		t.Fatalf("the proxy deployment carries no record: %v", d.Annotations)
	}
	delete(d.Annotations, AnnotationSpec)
	_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	testutil.Must(t, err)
	legacy, err := svc.Import(ctx, "tg")
	testutil.Must(t, err)
	if ConfigHash(legacy) != ConfigHash(s) {
		t.Errorf("import from the command line: %+v, applied %+v", legacy, s)
	}
	expectDrift(t, svc, s, "carries no record of its topology")
	pod, _, err := svc.proxyPod(ctx, s)
	testutil.Must(t, err)
	_, err = svc.Apply(ctx, s)
	testutil.Must(t, err)
	readClean(t, svc, s)
	if after, _, err := svc.proxyPod(ctx, s); err != nil || pod == nil || after == nil || after.Name != pod.Name {
		t.Errorf("writing the record rolled the proxy pod (%v -> %v, %v)", pod, after, err)
	}

	// A proxy Deployment of the release before egress credentials (no key
	// from the Secret, no --require-credential) is drift; Apply replaces it.
	d, err = deps.Get(ctx, topospec.ProxyName("tg"), metav1.GetOptions{})
	testutil.Must(t, err)
	pc := &d.Spec.Template.Spec.Containers[0]
	pc.Env, pc.Args = nil, pc.Args[:len(pc.Args)-1]
	_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
	testutil.Must(t, err)
	expectDrift(t, svc, s, "has no egress key")
	_, err = svc.Apply(ctx, s)
	testutil.Must(t, err)
	readClean(t, svc, s)

	// Teardown refuses while a member runs, and names it.
	member := startPod(t, c, "member", kube.ThreeGateExecutionLabels("tg", topospec.RoleToolExec), image, "sleep 300")
	err = svc.Teardown(ctx, "tg")
	if err == nil || !strings.Contains(err.Error(), member) {
		t.Fatalf("teardown with a member: %v; want a refusal naming %s", err, member)
	}
	if st, err := svc.Read(ctx, s); err != nil || len(st.Drift) != 0 {
		t.Fatalf("the refused teardown changed something: %+v, %v", st, err)
	}
	zero := int64(0)
	testutil.Must(t, c.Clientset.CoreV1().Pods(c.Namespace).Delete(ctx, member, metav1.DeleteOptions{GracePeriodSeconds: &zero}))
	waitGone(t, c, member)
	testutil.Must(t, svc.Teardown(ctx, "tg"))
	st, err = svc.Read(ctx, s)
	testutil.Must(t, err)
	if !st.Gone() {
		t.Errorf("after teardown: %+v", st)
	}
	sel := metav1.ListOptions{LabelSelector: ownedSelector("tg")}
	pl, err := pols.List(ctx, sel)
	testutil.Must(t, err)
	dl, err := deps.List(ctx, sel)
	testutil.Must(t, err)
	sl, err := c.Clientset.CoreV1().Services(c.Namespace).List(ctx, sel)
	testutil.Must(t, err)
	pods, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelTopology + "=tg"})
	testutil.Must(t, err)
	if n := len(pl.Items) + len(dl.Items) + len(sl.Items) + len(pods.Items); n != 0 {
		t.Errorf("teardown left %d policies, %d deployments, %d services, %d pods", len(pl.Items), len(dl.Items), len(sl.Items), len(pods.Items))
	}
}

// TestProxyReachOnCluster: the real proxy, at Status.ProxyURL, is reached
// by a FETCH execution pod and by no other kind of member (the policies'
// full table is kube's TestThreeGatePoliciesOnCluster).
func TestProxyReachOnCluster(t *testing.T) {
	c := testkube.PermissiveCluster(t, "tf-acc-kubetopo") // its member pods are plain fixtures
	image := testkube.RunnerImage(t)
	ctx := context.Background()
	svc := NewService(c, Options{Logger: testLogger{t}, PullPolicy: corev1.PullNever, ReadyTimeout: 90 * time.Second})
	s, ps := Build(topospec.Input{Name: "tgr", Proxy: topospec.ProxyInput{Image: image, Allow: []string{"203.0.113.9:443"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	st, err := svc.Apply(ctx, s)
	testutil.Must(t, err)
	testutil.Cleanup(t, "teardown topology", func() error {
		ctx := context.Background()
		list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: kube.ThreeGateLabelExecution + "=true"})
		if err != nil {
			return err
		}
		zero := int64(0)
		for _, p := range list.Items {
			if err := c.Clientset.CoreV1().Pods(c.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			waitGone(t, c, p.Name)
		}
		return svc.Teardown(ctx, s.Name)
	})
	hostPort := strings.TrimPrefix(st.ProxyURL, "http://")
	ap := netip.MustParseAddrPort(hostPort)
	// A member that connects asks the proxy for a destination off its
	// allow list three times: with no credential and with a forged one
	// the proxy answers 407; with one derived from the topology's key
	// Secret, 403 (the allow list): the agent-runner proxy itself answers
	// at ProxyURL, and requires a credential.
	key, err := kube.EgressKey(ctx, c, s.Name)
	testutil.Must(t, err)
	live, err := topospec.ProbeCredential(key, 10*time.Second)
	testutil.Must(t, err)
	forged, err := topospec.ProbeCredential(make([]byte, proxy.KeySize), 10*time.Second)
	testutil.Must(t, err)
	script := fmt.Sprintf("sleep 3; if nc -w 2 %[1]s %[2]d -e /bin/true 2>/dev/null; then echo open; ", ap.Addr(), ap.Port())
	for _, auth := range []string{"", "Proxy-Authorization: " + forged + "\\r\\n", "Proxy-Authorization: " + live + "\\r\\n"} {
		script += fmt.Sprintf("printf 'CONNECT 198.51.100.1:443 HTTP/1.1\\r\\nHost: 198.51.100.1:443\\r\\n%[3]s\\r\\n' | nc -w 3 %[1]s %[2]d 2>/dev/null | head -1; ",
			ap.Addr(), ap.Port(), auth)
	}
	script += "else echo blocked; fi"
	want := map[string]string{topospec.RoleFetch: "open", topospec.RoleCore: "blocked", topospec.RoleToolExec: "blocked"}
	names := map[string]string{}
	for role := range want {
		names[role] = startPod(t, c, "probe-"+strings.ToLower(strings.ReplaceAll(role, "_", "-")), kube.ThreeGateExecutionLabels("tgr", role), image, script)
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-10s %-22s %-8s %-8s\n", "FROM", "TO", "EXPECTED", "OBSERVED")
	for _, role := range []string{topospec.RoleFetch, topospec.RoleCore, topospec.RoleToolExec} {
		out := strings.Split(strings.TrimSpace(podOutput(t, c, names[role])), "\n")
		got := out[0]
		if got == "open" {
			replies := out[1:]
			t.Logf("%s execution pod: the proxy answered a CONNECT off its allow list (no, forged, live credential) with %q", role, replies)
			wantReplies := []string{"HTTP/1.1 407", "HTTP/1.1 407", "HTTP/1.1 403"}
			for i, w := range wantReplies {
				if i >= len(replies) || !strings.HasPrefix(strings.TrimSpace(replies[i]), w) {
					t.Errorf("%s: the proxy's answers %q, want %q", role, replies, wantReplies)
					break
				}
			}
		}
		fmt.Fprintf(&table, "%-10s %-22s %-8s %-8s\n", role+"-exec", "proxy "+hostPort, want[role], got)
		if got != want[role] {
			t.Errorf("%s execution pod → proxy at %s: %s, want %s", role, hostPort, got, want[role])
		}
	}
	t.Log("observed:\n" + table.String())
}

func readClean(t *testing.T, svc *Service, s topospec.Spec) {
	t.Helper()
	st, err := svc.Read(context.Background(), s)
	testutil.Must(t, err)
	if len(st.Drift) != 0 || !st.ProxyReady {
		t.Fatalf("read: %+v; want no drift and a ready proxy", st)
	}
}

func expectDrift(t *testing.T, svc *Service, s topospec.Spec, want string) {
	t.Helper()
	st, err := svc.Read(context.Background(), s)
	testutil.Must(t, err)
	for _, d := range st.Drift {
		if strings.Contains(d, want) {
			t.Logf("drift reported: %q", d)
			return
		}
	}
	t.Errorf("drift %q; want an entry containing %q", st.Drift, want)
}

// startPod runs script in a busybox-based pod with labels and returns its
// name. The pod is hardened as the restricted Pod Security level wants.
func startPod(t *testing.T, c *kube.Client, name string, labels map[string]string, image, script string) string {
	t.Helper()
	no, yes, one, uid := false, true, int64(1), ProxyUID
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever, TerminationGracePeriodSeconds: &one, AutomountServiceAccountToken: &no,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{Name: "c", Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"/bin/sh", "-c", script},
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}}}},
		},
	}
	_, err := c.Clientset.CoreV1().Pods(c.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
	testutil.Must(t, err)
	return name
}

// podOutput waits for the pod to finish and returns its output.
func podOutput(t *testing.T, c *kube.Client, name string) string {
	t.Helper()
	pods := c.Clientset.CoreV1().Pods(c.Namespace)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		p, err := pods.Get(context.Background(), name, metav1.GetOptions{})
		testutil.Must(t, err)
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: still %s", name, p.Status.Phase)
		}
	}
	raw, err := pods.GetLogs(name, &corev1.PodLogOptions{}).DoRaw(context.Background())
	testutil.Must(t, err)
	return strings.TrimSpace(string(raw))
}

func waitGone(t *testing.T, c *kube.Client, name string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		_, err := c.Clientset.CoreV1().Pods(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s still exists: %v", name, err)
		}
	}
}

// TestVerifyOnCluster runs Verify's probe pods against an applied
// topology; every row must pass, and the table is logged.
func TestVerifyOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kubetopo")
	image := testkube.RunnerImage(t)
	ctx := context.Background()
	svc := NewService(c, Options{Logger: testLogger{t}, PullPolicy: corev1.PullNever, ReadyTimeout: 90 * time.Second})
	s, ps := Build(topospec.Input{Name: "tgv", Proxy: topospec.ProxyInput{Image: image, Allow: []string{"203.0.113.9:443"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	testutil.Cleanup(t, "teardown topology", func() error { return svc.Teardown(context.Background(), s.Name) })
	_, err := svc.Apply(ctx, s)
	testutil.Must(t, err)
	rep, err := svc.Verify(ctx, s, topospec.VerifyOptions{
		DeniedTarget: "198.51.100.1:443", OutsideAddress: "198.51.100.2:443", HostPort: 10250, DNSName: "example.com",
	})
	testutil.Must(t, err)
	t.Log("verify:\n" + rep.Table())
	if !rep.OK() {
		for _, p := range rep.Probes {
			if !p.Pass {
				t.Errorf("%s %s (%s): observed %s (%s), want %s", p.Role, p.What, p.Check, p.Observed, p.Detail, p.Expected)
			}
		}
		t.Errorf("violations: %v", rep.Violations)
	}
	left, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelProbe + "=true"})
	testutil.Must(t, err)
	if n := len(left.Items); n != 0 {
		t.Errorf("%d probe pods left", n)
	}
}
