package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// Names and defaults of a per-message pod.
const (
	// ContainerName is the pod's one container.
	ContainerName = "agent"
	// DefaultCPULimit is one core; the request is CPURequest, so that a
	// waiting prestarted pod does not hold a whole core of a small node.
	DefaultCPULimit = "1"
	CPURequest      = "100m"
	// ComponentRunner is the component label of an agent's runner pod
	// (kubedeploy's Deployment); per-message pods carry sandbox.Component.
	ComponentRunner = "runner"
	volWorkspace    = "workspace"
	volTmp          = "tmp"
)

// PodSpec is what varies between agents' per-message pods; everything else
// is fixed by HardenedPod. The zero value of each optional field is its
// documented default.
type PodSpec struct {
	AgentID string
	// Topology and Role place the pod in a ThreeGate topology: it carries
	// ThreeGateExecutionLabels(Topology, Role), which the topology's
	// NetworkPolicies select. Role is as package topology names it (CORE,
	// FETCH, TOOL_EXEC). Both or neither.
	Topology string
	Role     string
	Image    string
	// ImagePullPolicy defaults to IfNotPresent; tests use Never with images
	// imported into the node's containerd.
	ImagePullPolicy corev1.PullPolicy
	// Command defaults to sandbox.DefaultCommand with --frames: the pod's
	// stdin and stdout carry podio frames.
	Command []string
	// MemoryLimit is the pod's memory, as in the Docker backend; unset:
	// agentspec.DefaultMemoryBytes. It is the request too: a message never
	// lands on a node without that memory.
	MemoryLimit agentspec.Size
	// CPULimit is a Kubernetes quantity ("500m", "2"); default DefaultCPULimit.
	CPULimit string
	// User is the pod's user; unset: agentspec.DefaultUser.
	User agentspec.UserSpec
	// WorkspaceClaim is the PersistentVolumeClaim mounted read-write at
	// /workspace (required); WorkspaceSubPath is a directory inside it.
	WorkspaceClaim   string
	WorkspaceSubPath string
	// RuntimeClass is container_mode.runtime: the pod's runtimeClassName
	// (e.g. gvisor); empty is the cluster's default runtime.
	RuntimeClass string
	// Env is extra non-secret environment; secrets travel on stdin only.
	Env map[string]string
	// AwaitBlocked and AwaitOpen are host:port addresses the pod's agent
	// must find blocked and open before it reads its request: a new pod
	// runs before the cluster's network policies cover it, and a member
	// of a topology must not run a moment unconfined (agent-run
	// --await-blocked, --await-open). Used only with the default Command.
	AwaitBlocked []string
	AwaitOpen    []string
	// Labels are extra pod labels; they cannot replace the ownership,
	// agent, message or ThreeGate labels.
	Labels map[string]string
}

var envNameRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// HardenedPod is the one place that says what a per-message pod is: a
// non-root user (the Docker backend's), a read-only root filesystem, every
// capability dropped, no privilege escalation, the RuntimeDefault seccomp
// profile, no service-account token, no service links, memory and CPU
// limits, a memory-backed /tmp of agentspec.TmpSize, the workspace claim at
// /workspace and no other volume, restartPolicy Never, stdin open for one
// attach, and the ownership labels. A pids limit has no field in the Pod
// API: it is the node's podPidsLimit (kubelet configuration).
// messageID is "" for a prestarted pod that has no message yet.
func HardenedPod(s PodSpec, namespace, messageID string) (*corev1.Pod, error) {
	if err := s.check(); err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	u := s.User.Or(agentspec.User{UID: agentspec.DefaultUID, GID: agentspec.DefaultGID})
	res, err := s.resources()
	if err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	env, err := s.env()
	if err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	tmp := int64(agentspec.TmpBytes)
	labels, err := podLabels(s, messageID)
	if err != nil {
		return nil, fmt.Errorf("pod spec: %w", err)
	}
	cmd := s.Command
	if len(cmd) == 0 {
		cmd = append(slices.Clone(sandbox.DefaultCommand), "--frames", RoleFlag(s.Role))
		for _, a := range s.AwaitBlocked {
			cmd = append(cmd, "--await-blocked=tcp="+a)
		}
		for _, a := range s.AwaitOpen {
			cmd = append(cmd, "--await-open=tcp="+a)
		}
	}
	uid, gid := int64(u.UID), int64(u.GID)
	grace := int64(1)
	onMismatch := corev1.FSGroupChangeOnRootMismatch
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: MessagePodPrefix(s.AgentID),
			Namespace:    namespace,
			Labels:       labels,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			AutomountServiceAccountToken:  ptr(false),
			EnableServiceLinks:            ptr(false),
			HostNetwork:                   false,
			HostPID:                       false,
			HostIPC:                       false,
			ShareProcessNamespace:         ptr(false),
			Hostname:                      "agent",
			TerminationGracePeriodSeconds: &grace,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:        ptr(true),
				RunAsUser:           &uid,
				RunAsGroup:          &gid,
				FSGroup:             &gid,
				FSGroupChangePolicy: &onMismatch,
				SeccompProfile:      &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Volumes: []corev1.Volume{
				{Name: volWorkspace, VolumeSource: corev1.VolumeSource{
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: s.WorkspaceClaim},
				}},
				{Name: volTmp, VolumeSource: corev1.VolumeSource{
					EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(tmp, resource.BinarySI)},
				}},
			},
			Containers: []corev1.Container{agentContainer(s, cmd, env, res, uid, gid)},
		},
	}
	if s.RuntimeClass != "" {
		pod.Spec.RuntimeClassName = &s.RuntimeClass
	}
	if s.Topology != "" {
		// A member gets no resolver; "none" pods have no egress at all and
		// "bridge" pods keep the cluster's DNS (see MemberDNS).
		MemberDNS(&pod.Spec)
	}
	return pod, nil
}

// RoleFlag is agent-run's --role argument for a pod of a ThreeGate role as
// package topology names it ("" for an agent without a role): the pod's
// tools come from its own command line, never from the request it reads.
func RoleFlag(threegateRole string) string {
	if threegateRole == "" {
		return "--role=" + RoleNone
	}
	return "--role=" + strings.ToLower(threegateRole)
}

// RoleNone is --role's value for an agent without a role.
const RoleNone = "none"

// agentContainer is the pod's one container: the agent loop with stdin
// open for one attach and the tightest security context.
func agentContainer(s PodSpec, cmd []string, env []corev1.EnvVar, res corev1.ResourceRequirements, uid, gid int64) corev1.Container {
	pull := s.ImagePullPolicy
	if pull == "" {
		pull = corev1.PullIfNotPresent
	}
	return corev1.Container{
		Name:            ContainerName,
		Image:           s.Image,
		ImagePullPolicy: pull,
		Command:         cmd,
		Env:             env,
		WorkingDir:      sandbox.WorkspaceDir,
		Resources:       res,
		// The request (and the relay's bytes) go in over one attach; its
		// end closes stdin.
		Stdin:     true,
		StdinOnce: true,
		TTY:       false,
		VolumeMounts: []corev1.VolumeMount{
			{Name: volWorkspace, MountPath: sandbox.WorkspaceDir, SubPath: s.WorkspaceSubPath},
			{Name: volTmp, MountPath: "/tmp"},
		},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext: &corev1.SecurityContext{
			RunAsNonRoot:             ptr(true),
			RunAsUser:                &uid,
			RunAsGroup:               &gid,
			Privileged:               ptr(false),
			AllowPrivilegeEscalation: ptr(false),
			ReadOnlyRootFilesystem:   ptr(true),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
	}
}

func (s PodSpec) check() error {
	switch {
	case s.AgentID == "":
		return fmt.Errorf("agent id is empty")
	case s.Image == "":
		return fmt.Errorf("image is empty")
	case s.WorkspaceClaim == "":
		return fmt.Errorf("workspace claim is empty")
	case (s.Topology == "") != (s.Role == ""):
		return fmt.Errorf("threegate topology %q and role %q: want both or neither", s.Topology, s.Role)
	}
	if errs := validation.IsDNS1123Subdomain(s.WorkspaceClaim); len(errs) > 0 {
		return fmt.Errorf("workspace claim %q: %s", s.WorkspaceClaim, errs[0])
	}
	if p := s.WorkspaceSubPath; p != "" && (strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../")) {
		return fmt.Errorf("workspace sub-path %q: want a relative path that does not climb out with \"..\"", p)
	}
	if s.RuntimeClass != "" {
		if errs := validation.IsDNS1123Subdomain(s.RuntimeClass); len(errs) > 0 {
			return fmt.Errorf("runtime class %q: %s", s.RuntimeClass, errs[0])
		}
	}
	switch s.ImagePullPolicy {
	case "", corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		return fmt.Errorf("image pull policy %q: want Always, IfNotPresent or Never", s.ImagePullPolicy)
	}
	return nil
}

func (s PodSpec) resources() (corev1.ResourceRequirements, error) {
	mem := agentspec.MemoryOrDefault(s.MemoryLimit).Bytes()
	if mem < agentspec.MinMemoryBytes {
		return corev1.ResourceRequirements{}, fmt.Errorf("memory limit %q is below the least a sandbox runs with, %s", s.MemoryLimit, agentspec.MinMemoryLimitText)
	}
	cpuText := s.CPULimit
	if cpuText == "" {
		cpuText = DefaultCPULimit
	}
	cpu, err := resource.ParseQuantity(cpuText)
	if err != nil || cpu.Sign() <= 0 {
		return corev1.ResourceRequirements{}, fmt.Errorf("cpu limit %q: want a positive quantity such as \"500m\" or \"2\"", cpuText)
	}
	req := resource.MustParse(CPURequest)
	if cpu.Cmp(req) < 0 {
		req = cpu
	}
	memQ := *resource.NewQuantity(mem, resource.BinarySI)
	return corev1.ResourceRequirements{
		Limits:   corev1.ResourceList{corev1.ResourceMemory: memQ, corev1.ResourceCPU: cpu},
		Requests: corev1.ResourceList{corev1.ResourceMemory: memQ, corev1.ResourceCPU: req},
	}, nil
}

func (s PodSpec) env() ([]corev1.EnvVar, error) {
	env := []corev1.EnvVar{{Name: "HOME", Value: sandbox.WorkspaceDir}, {Name: "TMPDIR", Value: "/tmp"}}
	keys := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		if !envNameRe.MatchString(k) || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("env %q: want a variable name and a value without NUL", k)
		}
		if k != "HOME" && k != "TMPDIR" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, corev1.EnvVar{Name: k, Value: s.Env[k]})
	}
	return env, nil
}

// podLabels are the ownership labels plus agent and message, and the
// ThreeGate member labels of an execution pod; each value must be a valid
// label value (an id that is not is refused).
func podLabels(s PodSpec, messageID string) (map[string]string, error) {
	if messageID == "" {
		messageID = "prestart"
	}
	labels := engine.Labels(sandbox.Component, map[string]string{"agent": s.AgentID, "message": messageID})
	if s.Topology != "" {
		maps.Copy(labels, ThreeGateExecutionLabels(s.Topology, s.Role))
	}
	for k, v := range s.Labels {
		if _, own := labels[k]; own || k == sandbox.LabelInstance || threegateKey(k) {
			return nil, fmt.Errorf("label %s is set by the sandbox itself", k)
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("label key %q: %s", k, errs[0])
		}
		labels[k] = v
	}
	for k, v := range labels {
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return nil, fmt.Errorf("label %s=%q: %s", k, v, errs[0])
		}
	}
	return labels, nil
}

// AgentSelector selects the per-message pods of one agent.
func AgentSelector(agentID string) string {
	return engine.LabelManagedBy + "=" + engine.ManagedByValue + "," +
		engine.LabelComponent + "=" + sandbox.Component + "," +
		sandbox.LabelAgent + "=" + agentID
}

// threegateKey: the ThreeGate labels come from Topology and Role only, so
// that no other field can place a pod under another member's policies.
func threegateKey(k string) bool {
	switch k {
	case ThreeGateLabelTopology, ThreeGateLabelRole, ThreeGateLabelExecution, ThreeGateLabelRunner:
		return true
	}
	return false
}

// RunnerSelector selects the pod of one agent's runner (kubedeploy's
// Deployment labels its pods so).
func RunnerSelector(agentID string) string {
	return engine.LabelManagedBy + "=" + engine.ManagedByValue + "," +
		engine.LabelComponent + "=" + ComponentRunner + "," +
		sandbox.LabelAgent + "=" + agentID
}

// RunnerName is the name of an agent's runner objects (its ServiceAccount
// among them): "meepa-<id>" when that is a short DNS label, else a
// cleaned, cut id and a hash of the whole id (so "a_b" and "a-b" never
// share objects). It never contains a dot.
func RunnerName(agentID string) string {
	base := "meepa-" + agentID
	if len(base) > 47 || strings.Contains(agentID, "_") || len(validation.IsDNS1035Label(base)) > 0 {
		sum := sha256.Sum256([]byte(agentID))
		// An id of workspace.IDPattern has only "_" to replace.
		safe := strings.Map(func(r rune) rune {
			if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
				return r
			}
			return '-'
		}, agentID)
		if len(safe) > 30 {
			safe = safe[:30]
		}
		base = "meepa-" + strings.Trim(safe, "-") + "-" + hex.EncodeToString(sum[:4])
	}
	return base
}

// MessagePodPrefix is the name prefix of an agent's message pods:
// RunnerName(agentID) + ".msg-"; the API server appends a random suffix.
// The name proves the agent to the runner admission policy
// (kubedeploy.AdmissionPolicy), which sees a pod's name but not the pod on
// an attach: a runner's name has no dot, so no other agent's runner name,
// and no runner pod's name, starts with it.
func MessagePodPrefix(agentID string) string { return RunnerName(agentID) + MessagePodInfix }

// MessagePodInfix separates the runner's name from a message pod's suffix.
const MessagePodInfix = ".msg-"

func ptr[T any](v T) *T { return &v }
