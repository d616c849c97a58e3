package kube

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

func testSpec() PodSpec {
	return PodSpec{AgentID: "tool_exec.1", Topology: "tg", Role: "TOOL_EXEC", Image: "meepa-test/runner:abc", WorkspaceClaim: "ws-tool-exec",
		RuntimeClass: "gvisor", Env: map[string]string{"LANG": "C.UTF-8", "HOME": "/root"},
		Labels: map[string]string{"example.org/team": "ops"}}
}

// Every hardening setting of a per-message pod, field by field, after the
// Pod Security Standards "restricted" profile and the CIS Kubernetes
// Benchmark's pod items (5.2, 5.7): nothing privileged, no host namespace,
// non-root, no escalation, all capabilities dropped, RuntimeDefault seccomp,
// read-only root, limits, no service-account token, only the expected
// volumes.
func TestHardenedPod(t *testing.T) {
	p, err := HardenedPod(testSpec(), "agents", "m-1")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Spec
	if p.Namespace != "agents" || p.GenerateName != RunnerName("tool_exec.1")+".msg-" {
		t.Errorf("namespace %q generateName %q", p.Namespace, p.GenerateName)
	}
	wantLabels := map[string]string{
		engine.LabelManagedBy: engine.ManagedByValue, engine.LabelComponent: sandbox.Component,
		sandbox.LabelAgent: "tool_exec.1", sandbox.LabelMessage: "m-1", "example.org/team": "ops",
		"meepa.io/threegate": "tg", "meepa.io/threegate-role": "TOOL_EXEC", "meepa.io/threegate-execution": "true",
	}
	if len(p.Labels) != len(wantLabels) {
		t.Errorf("labels %v, want %v", p.Labels, wantLabels)
	}
	for k, v := range wantLabels {
		if p.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, p.Labels[k], v)
		}
	}
	if s.RestartPolicy != corev1.RestartPolicyNever || s.HostNetwork || s.HostPID || s.HostIPC || *s.ShareProcessNamespace {
		t.Errorf("restart %s host net/pid/ipc %v %v %v shareProcessNamespace %v", s.RestartPolicy, s.HostNetwork, s.HostPID, s.HostIPC, *s.ShareProcessNamespace)
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken || s.EnableServiceLinks == nil || *s.EnableServiceLinks {
		t.Error("service-account token or service links not turned off")
	}
	if s.RuntimeClassName == nil || *s.RuntimeClassName != "gvisor" {
		t.Errorf("runtimeClassName %v", s.RuntimeClassName)
	}
	psc := s.SecurityContext
	if !*psc.RunAsNonRoot || *psc.RunAsUser != agentspec.DefaultUID || *psc.RunAsGroup != agentspec.DefaultGID || *psc.FSGroup != agentspec.DefaultGID ||
		psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || len(psc.SupplementalGroups) != 0 || len(psc.Sysctls) != 0 {
		t.Errorf("pod security context %+v", psc)
	}
	if len(s.Containers) != 1 || len(s.InitContainers) != 0 || len(s.EphemeralContainers) != 0 {
		t.Fatalf("want exactly one container, got %d (+%d init)", len(s.Containers), len(s.InitContainers))
	}
	c := s.Containers[0]
	sc := c.SecurityContext
	if *sc.Privileged || *sc.AllowPrivilegeEscalation || !*sc.ReadOnlyRootFilesystem || !*sc.RunAsNonRoot ||
		*sc.RunAsUser != agentspec.DefaultUID || *sc.RunAsGroup != agentspec.DefaultGID ||
		sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || sc.ProcMount != nil {
		t.Errorf("container security context %+v", sc)
	}
	if len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 0 {
		t.Errorf("capabilities %+v, want drop ALL and add none", sc.Capabilities)
	}
	if !c.Stdin || !c.StdinOnce || c.TTY || len(c.Ports) != 0 || c.WorkingDir != sandbox.WorkspaceDir || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("stdin %v once %v tty %v ports %v workdir %q pull %s", c.Stdin, c.StdinOnce, c.TTY, c.Ports, c.WorkingDir, c.ImagePullPolicy)
	}
	if strings.Join(c.Command, " ") != "agent-runner agent-run --frames --role=tool_exec" || len(c.Args) != 0 {
		t.Errorf("command %q args %q", c.Command, c.Args)
	}
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Errorf("env %s from a reference", e.Name)
		}
		env = append(env, e.Name+"="+e.Value)
	}
	if got := strings.Join(env, " "); got != "HOME=/workspace TMPDIR=/tmp LANG=C.UTF-8" {
		t.Errorf("env %q", got)
	}
	if len(c.EnvFrom) != 0 {
		t.Errorf("envFrom %v", c.EnvFrom)
	}
	lim, req := c.Resources.Limits, c.Resources.Requests
	if lim.Memory().Value() != 512<<20 || req.Memory().Value() != 512<<20 || lim.Cpu().String() != "1" || req.Cpu().String() != "100m" {
		t.Errorf("resources %+v", c.Resources)
	}
	checkVolumes(t, s, c)
}

func checkVolumes(t *testing.T, s corev1.PodSpec, c corev1.Container) {
	t.Helper()
	if len(s.Volumes) != 2 {
		t.Fatalf("volumes %+v, want the workspace claim and /tmp", s.Volumes)
	}
	ws, tmp := s.Volumes[0], s.Volumes[1]
	if ws.PersistentVolumeClaim == nil || ws.PersistentVolumeClaim.ClaimName != "ws-tool-exec" || ws.PersistentVolumeClaim.ReadOnly ||
		ws.HostPath != nil || ws.EmptyDir != nil {
		t.Errorf("workspace volume %+v", ws)
	}
	if tmp.EmptyDir == nil || tmp.EmptyDir.Medium != corev1.StorageMediumMemory || tmp.EmptyDir.SizeLimit.Value() != 256<<20 || tmp.HostPath != nil {
		t.Errorf("tmp volume %+v", tmp)
	}
	if len(c.VolumeMounts) != 2 || c.VolumeMounts[0].MountPath != "/workspace" || c.VolumeMounts[0].ReadOnly ||
		c.VolumeMounts[1].MountPath != "/tmp" || c.VolumeMounts[0].MountPropagation != nil {
		t.Errorf("mounts %+v", c.VolumeMounts)
	}
}

// A prestarted pod is labelled as such, and a spec without topology or
// runtime sets neither: no ThreeGate label at all.
func TestHardenedPodPrestartDefaults(t *testing.T) {
	s := testSpec()
	s.Topology, s.Role, s.RuntimeClass, s.CPULimit, s.MemoryLimit = "", "", "", "50m", agentspec.SizeOf(64<<20)
	p, err := HardenedPod(s, "ns", "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Labels[sandbox.LabelMessage] != "prestart" || p.Spec.RuntimeClassName != nil {
		t.Errorf("labels %v runtimeClass %v", p.Labels, p.Spec.RuntimeClassName)
	}
	for k := range p.Labels {
		if strings.HasPrefix(k, "meepa.io/") {
			t.Errorf("label %s on a pod outside any topology", k)
		}
	}
	r := p.Spec.Containers[0].Resources
	if r.Requests.Cpu().String() != "50m" || r.Limits.Memory().Value() != 64<<20 {
		t.Errorf("a CPU limit below the usual request must be the request too: %+v", r)
	}
}

// Inputs that would make a weaker or a broken pod are refused with the
// field named.
func TestHardenedPodRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		edit func(*PodSpec)
		msg  string
	}{
		"no agent":      {func(s *PodSpec) { s.AgentID = "" }, "agent id"},
		"no claim":      {func(s *PodSpec) { s.WorkspaceClaim = "" }, "workspace claim"},
		"bad claim":     {func(s *PodSpec) { s.WorkspaceClaim = "Ws/x" }, "workspace claim"},
		"sub-path up":   {func(s *PodSpec) { s.WorkspaceSubPath = "a/../../b" }, "sub-path"},
		"sub-path abs":  {func(s *PodSpec) { s.WorkspaceSubPath = "/etc" }, "sub-path"},
		"bad runtime":   {func(s *PodSpec) { s.RuntimeClass = "Run C" }, "runtime class"},
		"tiny memory":   {func(s *PodSpec) { s.MemoryLimit = agentspec.SizeOf(1 << 20) }, "memory limit"},
		"zero cpu":      {func(s *PodSpec) { s.CPULimit = "0" }, "cpu limit"},
		"bad env":       {func(s *PodSpec) { s.Env = map[string]string{"A=B": "x"} }, "env"},
		"bad label":     {func(s *PodSpec) { s.AgentID = "agent with spaces" }, "label"},
		"bad pull":      {func(s *PodSpec) { s.ImagePullPolicy = "Sometimes" }, "pull policy"},
		"empty image":   {func(s *PodSpec) { s.Image = "" }, "image"},
		"long agent id": {func(s *PodSpec) { s.AgentID = strings.Repeat("a", 64) }, "label"},
		"own label":     {func(s *PodSpec) { s.Labels = map[string]string{sandbox.LabelAgent: "other"} }, "set by the sandbox"},
		"instance":      {func(s *PodSpec) { s.Labels = map[string]string{sandbox.LabelInstance: "x"} }, "set by the sandbox"},
		"bad key":       {func(s *PodSpec) { s.Labels = map[string]string{"a b": "x"} }, "label key"},
		"bad value":     {func(s *PodSpec) { s.Labels = map[string]string{"k": "-x-"} }, "label"},
		"role only":     {func(s *PodSpec) { s.Topology = "" }, "both or neither"},
		"topology only": {func(s *PodSpec) { s.Role = "" }, "both or neither"},
		"bad topology":  {func(s *PodSpec) { s.Topology = "tg/x" }, "label"},
		"role by label": {func(s *PodSpec) { s.Labels = map[string]string{ThreeGateLabelRole: "PROXY"} }, "set by the sandbox"},
		"runner label": {func(s *PodSpec) {
			s.Topology, s.Role, s.Labels = "", "", map[string]string{ThreeGateLabelRunner: "true"}
		}, "set by the sandbox"},
	} {
		t.Run(name, func(t *testing.T) {
			s := testSpec()
			tc.edit(&s)
			if _, err := HardenedPod(s, "ns", "m"); err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("err %v, want one naming %q", err, tc.msg)
			}
		})
	}
}

// TestPodAwaitsItsPolicies: a topology's pod waits for its policies before
// it reads its request; the checks travel on agent-run's command line.
func TestPodAwaitsItsPolicies(t *testing.T) {
	s := PodSpec{AgentID: "a", Topology: "tg", Role: "FETCH", Image: "img:1", WorkspaceClaim: "ws",
		AwaitBlocked: []string{"10.0.0.1:6443"}, AwaitOpen: []string{"10.244.0.9:3128"}}
	p, err := HardenedPod(s, "ns", "m1")
	if err != nil {
		t.Fatal(err)
	}
	cmd := strings.Join(p.Spec.Containers[0].Command, " ")
	for _, want := range []string{"--frames", "--await-blocked=tcp=10.0.0.1:6443", "--await-open=tcp=10.244.0.9:3128"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("command %q lacks %q", cmd, want)
		}
	}
}
