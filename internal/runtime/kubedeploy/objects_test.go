package kubedeploy

import (
	"reflect"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestNamesFor(t *testing.T) {
	if n := NamesFor("writer"); n.Base != "meepa-writer" || n.Claim != "meepa-writer-workspace" {
		t.Errorf("plain id: %+v", n)
	}
	a, b := NamesFor("a_b"), NamesFor("a-b")
	if a.Base == b.Base || !strings.HasPrefix(a.Base, "meepa-a-b-") {
		t.Errorf("a_b %q and a-b %q must differ", a.Base, b.Base)
	}
	long := NamesFor(strings.Repeat("x", 63))
	for _, id := range []string{"a_b", "9lives", strings.Repeat("x", 63), "trailing-"} {
		n := NamesFor(id)
		if errs := validation.IsDNS1035Label(n.Base); len(errs) > 0 || len(n.Base) > 47 {
			t.Errorf("%q: base %q: %v", id, n.Base, errs)
		}
		if errs := validation.IsDNS1123Subdomain(n.Claim); len(errs) > 0 {
			t.Errorf("%q: claim %q: %v", id, n.Claim, errs)
		}
	}
	if long.Base == NamesFor(strings.Repeat("x", 62)).Base {
		t.Error("ids cut to the same prefix share a name")
	}
}

// The runner may make, watch, attach to and delete pods, and nothing else:
// no patch (labels place a pod under NetworkPolicies), no secrets, no
// workloads, no wildcard.
func TestRunnerRules(t *testing.T) {
	want := map[string][]string{"pods": {"create", "get", "list", "watch", "delete"}, "pods/attach": {"create", "get"}}
	rules := Role(NamesFor("a"), "ns", "a").Rules
	if len(rules) != len(want) {
		t.Fatalf("rules %+v", rules)
	}
	for _, r := range rules {
		if len(r.APIGroups) != 1 || r.APIGroups[0] != "" || len(r.Resources) != 1 || len(r.ResourceNames) != 0 || len(r.NonResourceURLs) != 0 {
			t.Errorf("rule %+v: want one core resource", r)
			continue
		}
		if !reflect.DeepEqual(r.Verbs, want[r.Resources[0]]) {
			t.Errorf("%s: verbs %v, want %v", r.Resources[0], r.Verbs, want[r.Resources[0]])
		}
	}
	rb := RoleBinding(NamesFor("a"), "ns", "a")
	if rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "meepa-a" || len(rb.Subjects) != 1 || rb.Subjects[0].Kind != "ServiceAccount" ||
		rb.Subjects[0].Name != "meepa-a" || rb.Subjects[0].Namespace != "ns" {
		t.Errorf("binding %+v", rb)
	}
}

func testDeployment(t *testing.T) *appsv1.Deployment {
	t.Helper()
	d, err := RunnerDeployment(NamesFor("a"), "ns", RunnerPod{AgentID: "a", Image: "img", PullPolicy: corev1.PullNever, Port: 8080,
		ConfigHash: "h1", StopSeconds: 35, APIServer: "10.0.0.1:6443"})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// One runner, never two; hardened as a message pod is, but with its token
// (it drives the API) and its config from the Secret only.
func TestRunnerDeployment(t *testing.T) {
	d := testDeployment(t)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("replicas %d strategy %+v", *d.Spec.Replicas, d.Spec.Strategy)
	}
	tpl := d.Spec.Template
	if tpl.Annotations[AnnotationConfigHash] != "h1" || len(tpl.Annotations) != 1 {
		t.Errorf("template annotations %v", tpl.Annotations)
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, tpl.Labels) || tpl.Labels["io.meepa.component"] != kube.ComponentRunner {
		t.Errorf("selector %v labels %v", d.Spec.Selector.MatchLabels, tpl.Labels)
	}
	s := tpl.Spec
	if s.ServiceAccountName != "meepa-a" || s.AutomountServiceAccountToken == nil || !*s.AutomountServiceAccountToken ||
		*s.EnableServiceLinks || s.HostNetwork || s.HostPID || s.HostIPC || *s.TerminationGracePeriodSeconds != 35 {
		t.Errorf("pod spec %+v", s)
	}
	psc := s.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser != RunnerUID || *psc.FSGroup != RunnerGID || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security %+v", psc)
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 0 {
		t.Fatalf("containers %d init %d", len(s.Containers), len(s.InitContainers))
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	if !*sc.RunAsNonRoot || *sc.RunAsUser == 0 || *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem ||
		!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("container security %+v", sc)
	}
	if c.Resources.Limits.Memory().IsZero() || c.Resources.Limits.Cpu().IsZero() || c.ReadinessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("limits %v probe %+v", c.Resources.Limits, c.ReadinessProbe)
	}
	if strings.Join(c.Command, " ") != "agent-runner serve --config /etc/meepa/config.json --config-secret" {
		t.Errorf("command %v", c.Command)
	}
	// No secret in the environment: only TMPDIR and the API server.
	for _, e := range c.Env {
		if e.ValueFrom != nil || (e.Name != "TMPDIR" && !strings.HasPrefix(e.Name, "KUBERNETES_SERVICE_")) {
			t.Errorf("env %+v", e)
		}
	}
	if len(c.EnvFrom) != 0 {
		t.Errorf("envFrom %+v", c.EnvFrom)
	}
	checkVolumes(t, s, c)
}

func checkVolumes(t *testing.T, s corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if len(s.Volumes) != 2 {
		t.Fatalf("volumes %+v", s.Volumes)
	}
	sec, tmp := s.Volumes[0], s.Volumes[1]
	if sec.Secret == nil || sec.Secret.SecretName != "meepa-a" || len(sec.Secret.Items) != 1 || sec.Secret.Items[0].Key != SecretConfigKey {
		t.Errorf("config volume %+v", sec)
	}
	if tmp.EmptyDir == nil || tmp.EmptyDir.Medium != corev1.StorageMediumMemory || tmp.EmptyDir.SizeLimit == nil {
		t.Errorf("tmp volume %+v", tmp)
	}
	for _, m := range c.VolumeMounts {
		if m.Name == volConfig && !m.ReadOnly {
			t.Error("config mounted writable")
		}
	}
}

func TestRunnerDeploymentAPIServer(t *testing.T) {
	for _, bad := range []string{"10.0.0.1", ":6443", "h:0", "h:x"} {
		if _, err := RunnerDeployment(NamesFor("a"), "ns", RunnerPod{AgentID: "a", APIServer: bad}); err == nil {
			t.Errorf("api server %q accepted", bad)
		}
	}
	env := testDeployment(t).Spec.Template.Spec.Containers[0].Env
	got := map[string]string{}
	for _, e := range env {
		got[e.Name] = e.Value
	}
	if got["KUBERNETES_SERVICE_HOST"] != "10.0.0.1" || got["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("env %v", got)
	}
}
