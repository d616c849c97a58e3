package kubedeploy

import (
	"bytes"
	"context"
	"io"
	"maps"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// runnerAs is a client that authenticates as an agent's runner: a token of
// its own ServiceAccount (a TokenRequest for it, the identity the runner's
// mounted token carries), with none of the admin's credentials.
func runnerAs(t *testing.T, c *kube.Client, id string) (kubernetes.Interface, *rest.Config) {
	t.Helper()
	exp := int64(600)
	tr, err := c.Clientset.CoreV1().ServiceAccounts(c.Namespace).CreateToken(context.Background(), NamesFor(id).Base,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	testutil.Must(t, err)
	cfg := rest.AnonymousClientConfig(c.REST)
	cfg.BearerToken = tr.Status.Token
	cs, err := kubernetes.NewForConfig(cfg)
	testutil.Must(t, err)
	return cs, cfg
}

// attach opens an attach to a pod's agent container with an empty stdin
// (its agent-run reads EOF and ends); nil means the API server let it.
func attach(cs kubernetes.Interface, cfg *rest.Config, ns, pod string) error {
	return attachTo(cs, cfg, ns, pod, kube.ContainerName)
}

func attachTo(cs kubernetes.Interface, cfg *rest.Config, ns, pod, container string) error {
	req := cs.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("attach").
		VersionedParams(&corev1.PodAttachOptions{Container: container, Stdin: true, Stdout: true}, scheme.ParameterCodec)
	ex, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: bytes.NewReader(nil), Stdout: io.Discard})
}

// refusedByPolicy says whether err is the runner admission policy's
// refusal.
func refusedByPolicy(err error) bool {
	return err != nil && strings.Contains(err.Error(), AdmissionPolicyName())
}

// TestRunnerConfinedOnCluster is issue 25's attacks, each made with a
// runner's own ServiceAccount token against two agents applied by the
// service, and the positive control: the runner still makes, attaches to
// and deletes its own message pods (the runner process itself makes its
// prestarted pods under the policy). A runner may not create a pod that
// mounts another agent's Secret, claim or a token, runs as another
// ServiceAccount, carries no meepa labels, the proxy's or a runner's
// labels, another agent's name, image or role, or takes env from a Secret;
// it may not attach to or delete another agent's pods, its runner or the
// proxy. Creates and deletes are server-side dry runs: the admission chain
// runs in full, nothing is made.
func TestRunnerConfinedOnCluster(t *testing.T) {
	c := testkube.Cluster(t, "tf-acc-kadm")
	image := testkube.RunnerImage(t)
	svc := NewService(Options{Client: c, Version: "test", APIServer: testkube.APIServer(t, c), Logger: testLogger{t}})
	ctx := context.Background()
	ids := []string{"adm-a", "adm-b"}
	for _, id := range ids {
		volume := workspaceVolume(t, c, id)
		testutil.Cleanup(t, "remove "+id, func() error { return svc.Remove(context.Background(), id, true) })
		a := testAgent(id, image, volume)
		a.Config.Container.Network = "none"
		if _, err := svc.Apply(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	checkPolicyTypes(t, c)
	cfgA := secretConfig(t, c, "adm-a")
	cs, cfg := runnerAs(t, c, "adm-a")
	pods := cs.CoreV1().Pods(c.Namespace)
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	if _, err := pods.Create(ctx, ownPod(t, c, &cfgA), dry); err != nil {
		t.Fatalf("the runner's own message pod (dry run): %v", err)
	}
	// The runners made their prestarted pods under the policy.
	podA, podB := waitPrestarted(t, c, "adm-a", ""), waitPrestarted(t, c, "adm-b", "")
	nb := NamesFor("adm-b")
	runnerB, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector("adm-b")})
	testutil.Must(t, err)
	if len(runnerB.Items) != 1 {
		t.Fatalf("%d runner pods of adm-b", len(runnerB.Items))
	}
	// A stand-in for the topology's proxy, made by the admin.
	proxy := ownPod(t, c, &cfgA)
	proxy.GenerateName, proxy.Name, proxy.Labels = "", "tf-acc-proxy", kube.ThreeGateProxyLabels("tg")
	_, err = c.Clientset.CoreV1().Pods(c.Namespace).Create(ctx, proxy, metav1.CreateOptions{})
	testutil.Must(t, err)

	create := func(change func(p *corev1.Pod)) error {
		p := ownPod(t, c, &cfgA)
		change(p)
		_, err := pods.Create(ctx, p, dry)
		return err
	}
	del := func(name string) error {
		return pods.Delete(ctx, name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
	}

	// The positive control first: its own message pod, made, attached to
	// and deleted for real.
	own, err := pods.Create(ctx, ownPod(t, c, &cfgA), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the runner's own message pod: %v", err)
	}
	waitRunning(t, c, own.Name)
	if err := attach(cs, cfg, c.Namespace, own.Name); err != nil {
		t.Errorf("attach to its own message pod: %v", err)
	}
	if err := pods.Delete(ctx, own.Name, metav1.DeleteOptions{}); err != nil {
		t.Errorf("delete its own message pod: %v", err)
	}
	if err := attach(cs, cfg, c.Namespace, podA); err != nil {
		t.Errorf("attach to its own prestarted pod: %v", err)
	}

	attacks := []struct {
		name string
		do   func() error
	}{
		{"pod mounting another agent's Secret", func() error {
			return create(func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "loot", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: nb.Base}}})
				p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "loot", MountPath: "/loot"})
			})
		}},
		{"pod running as another agent's ServiceAccount", func() error {
			return create(func(p *corev1.Pod) {
				p.Spec.ServiceAccountName, p.Spec.AutomountServiceAccountToken = nb.Base, ptr(true)
			})
		}},
		{"pod with a projected ServiceAccount token", func() error {
			return create(func(p *corev1.Pod) {
				p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "tok", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "t"}}}}}})
			})
		}},
		{"pod mounting another agent's workspace claim", func() error {
			return create(func(p *corev1.Pod) { p.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = nb.Claim })
		}},
		{"pod with env from another agent's Secret", func() error {
			return create(func(p *corev1.Pod) {
				p.Spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: nb.Base}}}}
			})
		}},
		{"pod with no meepa labels", func() error { return create(func(p *corev1.Pod) { p.Labels = nil }) }},
		{"pod with the proxy's labels", func() error {
			return create(func(p *corev1.Pod) { maps.Copy(p.Labels, kube.ThreeGateProxyLabels("tg")) })
		}},
		{"pod with a CORE runner's labels", func() error {
			return create(func(p *corev1.Pod) {
				p.Labels = Labels("adm-a")
				maps.Copy(p.Labels, kube.ThreeGateRunnerLabels("tg", "CORE"))
			})
		}},
		{"pod with another agent's labels and name", func() error {
			return create(func(p *corev1.Pod) {
				p.GenerateName, p.Labels[sandbox.LabelAgent] = kube.MessagePodPrefix("adm-b"), "adm-b"
			})
		}},
		{"pod with another role's flag", func() error {
			return create(func(p *corev1.Pod) {
				cmd := p.Spec.Containers[0].Command
				for i, a := range cmd {
					if strings.HasPrefix(a, "--role=") {
						cmd[i] = "--role=tool_exec"
					}
				}
			})
		}},
		{"pod with a shell instead of agent-run", func() error {
			return create(func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", "sleep 1000"} })
		}},
		{"pod with another image", func() error {
			return create(func(p *corev1.Pod) { p.Spec.Containers[0].Image = "meepa.local/busybox:1" })
		}},
		{"pod with more memory than its agent's", func() error {
			return create(func(p *corev1.Pod) {
				p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("4Gi")
				p.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("4Gi")
			})
		}},
		{"attach to another agent's prestarted pod", func() error { return attach(cs, cfg, c.Namespace, podB) }},
		{"attach to another agent's runner", func() error { return attachTo(cs, cfg, c.Namespace, runnerB.Items[0].Name, containerName) }},
		{"delete another agent's message pod", func() error { return del(podB) }},
		{"delete another agent's runner", func() error { return del(runnerB.Items[0].Name) }},
		{"delete the proxy", func() error { return del(proxy.Name) }},
	}
	var failed []string
	for _, a := range attacks {
		err := a.do()
		switch {
		case refusedByPolicy(err):
			t.Logf("attack %-46s refused: %v", a.name, err)
		case err != nil:
			t.Logf("attack %-46s refused, not by the policy: %v", a.name, err)
			failed = append(failed, a.name)
		default:
			t.Logf("attack %-46s ALLOWED", a.name)
			failed = append(failed, a.name)
		}
	}
	if len(failed) > 0 {
		t.Errorf("not refused by the runner admission policy: %s", strings.Join(failed, "; "))
	}
	// After the attacks the control again: a dry-run create of its own pod.
	if err := create(func(*corev1.Pod) {}); err != nil {
		t.Errorf("the runner's own message pod after the attacks: %v", err)
	}
	checkDefaultDeny(t, c)
}

// ownPod is the message pod the runner of cfg makes, as its backend does.
func ownPod(t *testing.T, c *kube.Client, cfg *agentspec.Config) *corev1.Pod {
	t.Helper()
	p, err := kube.HardenedPod(kube.OptionsFor(cfg, nil).Spec, c.Namespace, "attack")
	testutil.Must(t, err)
	p.Labels[sandbox.LabelInstance] = "test"
	return p
}

func waitRunning(t *testing.T, c *kube.Client, name string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		p, err := c.Clientset.CoreV1().Pods(c.Namespace).Get(context.Background(), name, metav1.GetOptions{})
		testutil.Must(t, err)
		if p.Status.Phase == corev1.PodRunning {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("pod %s did not run", name)
}

// checkDefaultDeny: the namespace's default-deny policy selects every pod
// and allows nothing.
func checkDefaultDeny(t *testing.T, c *kube.Client) {
	t.Helper()
	p, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Get(context.Background(), DefaultDenyPolicyName, metav1.GetOptions{})
	if err != nil {
		t.Errorf("default-deny policy: %v", err)
		return
	}
	if len(p.Spec.PodSelector.MatchLabels)+len(p.Spec.PodSelector.MatchExpressions) != 0 || len(p.Spec.Ingress)+len(p.Spec.Egress) != 0 ||
		len(p.Spec.PolicyTypes) != 2 {
		t.Errorf("default-deny policy %s: %+v", p.Name, p.Spec)
	}
}

// checkPolicyTypes: the API server's type check of the policy against the
// Pod schema found nothing (a mistyped field would fail every runner).
func checkPolicyTypes(t *testing.T, c *kube.Client) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		p, err := c.Clientset.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(context.Background(), AdmissionPolicyName(), metav1.GetOptions{})
		testutil.Must(t, err)
		if p.Status.ObservedGeneration == p.Generation && p.Status.TypeChecking != nil {
			for _, w := range p.Status.TypeChecking.ExpressionWarnings {
				t.Errorf("policy type check: %s: %s", w.FieldRef, w.Warning)
			}
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Error("the policy was not type-checked within a minute")
}
