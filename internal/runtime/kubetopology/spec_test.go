package kubetopology

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

func testSpec(t *testing.T) topospec.Spec {
	t.Helper()
	s, ps := Build(topospec.Input{Name: "tg1", Proxy: topospec.ProxyInput{Image: "img:1", Allow: []string{"Example.COM", "*.pypi.org:8443", "1.2.3.4:443"}, DNS: []string{"9.9.9.9"}}})
	if len(ps) > 0 {
		t.Fatal(ps)
	}
	return s
}

func TestRunnerPortIsKubedeploys(t *testing.T) {
	if kube.DefaultRunnerPort != kubedeploy.DefaultPort {
		t.Errorf("kube.DefaultRunnerPort %d, kubedeploy.DefaultPort %d: the runner policy would open the wrong port", kube.DefaultRunnerPort, kubedeploy.DefaultPort)
	}
}

func TestBuild(t *testing.T) {
	s := testSpec(t)
	if s.Proxy.Port != topospec.DefaultProxyPort || len(s.Proxy.Allow) != 3 || s.Proxy.Allow[0].String() != "example.com:443" {
		t.Errorf("spec %+v: want the default port and the allow list in canonical form", s)
	}
	// Import reads back what Build made.
	back, ps := Build(s.Input())
	if len(ps) > 0 || ConfigHash(back) != ConfigHash(s) {
		t.Errorf("round trip through Input: %+v, %v", back, ps)
	}
	cases := map[string]struct {
		in    topospec.Input
		field string
	}{
		"bad name":          {topospec.Input{Name: "TG_1", Proxy: topospec.ProxyInput{Image: "i"}}, "name"},
		"long name":         {topospec.Input{Name: strings.Repeat("a", topospec.MaxNameLen+1), Proxy: topospec.ProxyInput{Image: "i"}}, "name"},
		"no image":          {topospec.Input{Name: "tg"}, "proxy.image"},
		"bad port":          {topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i", Port: 70000}}, "proxy.port"},
		"bad pattern":       {topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i", Allow: []string{"https://x.com/path"}}}, "proxy.allow"},
		"bad dns":           {topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i", DNS: []string{"dns.google"}}}, "proxy.dns"},
		"hosts without dns": {topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i", Allow: []string{"example.com"}}}, "proxy.dns"},
	}
	for name, c := range cases {
		_, ps := Build(c.in)
		if len(ps) != 1 || ps[0].Field != c.field {
			t.Errorf("%s: problems %v; want one on %s", name, ps, c.field)
		}
	}
	if _, ps := Build(topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i", Allow: []string{"1.2.3.4:443"}}}); len(ps) > 0 {
		t.Errorf("an allow list of addresses needs no DNS: %v", ps)
	}
}

func TestProxyCommand(t *testing.T) {
	got := strings.Join(topospec.ProxyCommand(testSpec(t)), " ")
	want := "/usr/local/bin/agent-runner proxy --listen :3128 --allow example.com:443 --allow *.pypi.org:8443 --allow 1.2.3.4:443 --dns 9.9.9.9 --audit -"
	if got != want {
		t.Errorf("command\n got %s\nwant %s", got, want)
	}
}

// TestProxyDeploymentHardened checks the proxy pod field by field against
// the hardening every pod of the project gets.
func TestProxyDeploymentHardened(t *testing.T) {
	s := testSpec(t)
	d := mustDeployment(t, s)
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != "Recreate" || d.Namespace != "ns" || d.Name != "tg1-proxy" {
		t.Errorf("deployment %s/%s: %d replicas, strategy %s", d.Namespace, d.Name, *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	tpl := d.Spec.Template
	for k, v := range kube.ThreeGateProxyLabels("tg1") {
		if tpl.Labels[k] != v || d.Spec.Selector.MatchLabels[k] != v {
			t.Errorf("pod label or selector %s=%s missing: %v", k, v, tpl.Labels)
		}
	}
	if d.Labels[kube.ThreeGateLabelManagedBy] == "" || d.Labels[kube.ThreeGateLabelTopology] != "tg1" {
		t.Errorf("deployment labels %v lack ownership", d.Labels)
	}
	ps := tpl.Spec
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the proxy pod mounts a service-account token")
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks || ps.HostNetwork || ps.HostPID || ps.HostIPC || len(ps.Volumes) != 0 {
		t.Errorf("pod spec shares more than it should: %+v", ps)
	}
	if sc := ps.SecurityContext; sc == nil || !*sc.RunAsNonRoot || *sc.RunAsUser == 0 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", sc)
	}
	if len(ps.Containers) != 1 {
		t.Fatalf("%d containers", len(ps.Containers))
	}
	c := ps.Containers[0]
	sc := c.SecurityContext
	switch {
	case sc == nil:
		t.Fatal("no container security context")
	case !*sc.RunAsNonRoot || *sc.RunAsUser != ProxyUID:
		t.Error("container may run as root")
	case *sc.Privileged || *sc.AllowPrivilegeEscalation:
		t.Error("container is privileged or may escalate")
	case !*sc.ReadOnlyRootFilesystem:
		t.Error("root filesystem is writable")
	case len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0:
		t.Errorf("capabilities %+v", sc.Capabilities)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp")
	}
	if c.Resources.Limits.Memory().String() != ProxyMemory || c.Resources.Limits.Cpu().IsZero() {
		t.Errorf("limits %v", c.Resources.Limits)
	}
	if c.Image != "img:1" || c.ImagePullPolicy != corev1.PullNever || strings.Join(append(c.Command, c.Args...), " ") != strings.Join(topospec.ProxyCommand(s), " ")+" --require-credential" {
		t.Errorf("container %s %s %v %v", c.Image, c.ImagePullPolicy, c.Command, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 3128 {
		t.Errorf("ports %v", c.Ports)
	}
	if tpl.Annotations[AnnotationConfig] != ConfigHash(s) {
		t.Error("no config hash on the pod template")
	}
	// The key comes from the topology's key Secret, never a literal.
	if len(c.Env) != 1 || c.Env[0].Name != proxy.EnvEgressKey || c.Env[0].Value != "" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.SecretKeyRef == nil || c.Env[0].ValueFrom.SecretKeyRef.Name != kube.EgressKeySecretName(s.Name) {
		t.Errorf("env %+v: want the egress key from the key Secret", c.Env)
	}
}

// TestDeploymentDrift: an edited allow list, image or hardening shows up
// in words; the planned object has none.
func TestDeploymentDrift(t *testing.T) {
	s := testSpec(t)
	want := mustDeployment(t, s)
	if d := deploymentDrift(want, mustDeployment(t, s)); len(d) != 0 {
		t.Errorf("drift of the planned object: %v", d)
	}
	for name, c := range map[string]struct {
		edit func(*corev1.PodSpec)
		word string
	}{
		"allow":  {func(p *corev1.PodSpec) { p.Containers[0].Args[4] = "evil.com:443" }, "allow list"},
		"image":  {func(p *corev1.PodSpec) { p.Containers[0].Image = "other" }, "image"},
		"dns":    {func(p *corev1.PodSpec) { p.Containers[0].Args = append(p.Containers[0].Args, "--dns", "1.1.1.1") }, "command"},
		"root":   {func(p *corev1.PodSpec) { *p.Containers[0].SecurityContext.RunAsUser = 0 }, "hardened"},
		"token":  {func(p *corev1.PodSpec) { p.AutomountServiceAccountToken = nil }, "hardened"},
		"labels": {func(p *corev1.PodSpec) {}, "label"},
	} {
		live := mustDeployment(t, s)
		c.edit(&live.Spec.Template.Spec)
		if name == "labels" {
			delete(live.Spec.Template.Labels, kube.ThreeGateLabelRole)
		}
		d := deploymentDrift(want, live)
		if len(d) != 1 || !strings.Contains(d[0], c.word) {
			t.Errorf("%s: drift %v; want one entry about %s", name, d, c.word)
		}
	}
}

func mustDeployment(t *testing.T, s topospec.Spec) *appsv1.Deployment {
	t.Helper()
	d, err := ProxyDeployment(s, "ns", corev1.PullNever, "k1")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestDockerSettingsRefused: what only a Docker host has is a problem on
// its attribute, from Build at plan and from Check on a spec Apply is
// handed (a Docker spec), the same check.
func TestDockerSettingsRefused(t *testing.T) {
	fw := topospec.Firewall{Enabled: true}
	_, ps := Build(topospec.Input{Name: "tg", Proxy: topospec.ProxyInput{Image: "i"}, Docker: topospec.DockerInput{
		Subnets: map[string]string{topospec.FetchNet: "10.1.0.0/24"}, Gateways: map[string]string{topospec.LLMNet: "10.2.0.1"},
		ProxyIP: "10.1.0.2", AllowPrivate: []string{}, Firewall: &fw,
	}})
	var got []string
	for _, p := range ps {
		if p.Summary != "Not On Kubernetes" {
			t.Errorf("unexpected problem %v", p)
		}
		got = append(got, p.Field)
	}
	if strings.Join(got, " ") != "fetchnet_subnet llmnet_gateway proxy.ip proxy.allow_private firewall" {
		t.Errorf("refused %v", got)
	}
	docker := testSpec(t)
	docker.Docker.Firewall = fw
	if ps := Check(docker); len(ps) != 1 || ps[0].Field != "firewall" {
		t.Errorf("Check of a spec with a firewall: %v", ps)
	}
	if ps := Check(testSpec(t)); len(ps) > 0 {
		t.Errorf("Check of a cluster spec: %v", ps)
	}
}
