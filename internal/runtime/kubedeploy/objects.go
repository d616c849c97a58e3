package kubedeploy

import (
	"fmt"
	"maps"
	"net"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// Names, keys and paths of a runner's objects.
const (
	// AnnotationConfigHash on the pod template rolls the runner when the
	// config changes; it is keyed (agentspec.ConfigHash), so it reveals no
	// secret.
	AnnotationConfigHash = engine.LabelPrefix + "config-hash"
	// AnnotationForceDestroy on the Secret records force_destroy_workspace,
	// so that import restores it (it is no part of the runner's config:
	// changing it does not roll the runner).
	AnnotationForceDestroy = engine.LabelPrefix + "force-destroy-workspace"
	// SecretConfigKey holds the agentspec.Config JSON, SecretHashKey the key of
	// its hash.
	SecretConfigKey = "config.json"
	SecretHashKey   = "hash.key"
	// ConfigDir is where the Secret is mounted in the runner.
	ConfigDir     = "/etc/meepa"
	containerName = "runner"
	portName      = "http"
	volConfig     = "config"
	volTmp        = "tmp"
)

// Defaults of a runner pod.
const (
	DefaultPort = 8080
	// RunnerUID and RunnerGID run the runner: not root, and not the
	// sandbox user of the message pods.
	RunnerUID int64 = 65532
	RunnerGID int64 = 65532
	// RunnerMemory and RunnerCPU bound the runner itself; it only relays
	// requests and drives the API.
	RunnerMemory = "256Mi"
	RunnerCPU    = "500m"
	runnerTmp    = "64Mi"
)

// Names are the objects of one agent; all are in the service's namespace.
type Names struct {
	// Base names the Secret, ServiceAccount, Role, RoleBinding, Deployment
	// and Service.
	Base string
	// Claim is the workspace's PersistentVolumeClaim.
	Claim string
}

// NamesFor derives the names from an agent id: "meepa-<id>" when that is a
// short DNS label, else a cleaned, cut id and a hash of the whole id (so
// "a_b" and "a-b" never share objects).
func NamesFor(agentID string) Names {
	base := kube.RunnerName(agentID)
	return Names{Base: base, Claim: base + "-workspace"}
}

// Labels are the ownership labels of an agent's runner objects; the
// Deployment selects its pods by them.
func Labels(agentID string) map[string]string {
	return engine.Labels(kube.ComponentRunner, map[string]string{"agent": agentID})
}

// Selector is Labels as a label selector.
func Selector(agentID string) string { return kube.RunnerSelector(agentID) }

func meta(name, ns, agentID string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns, Labels: Labels(agentID)}
}

// ConfigSecret holds the whole runner config (token, API key, secrets) and
// the hash key. It is the only place the config exists in the cluster: no
// ConfigMap, env var or annotation carries any of it.
func ConfigSecret(n Names, ns, agentID string, config, hashKey []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: meta(n.Base, ns, agentID),
		Type:       corev1.SecretTypeOpaque,
		Immutable:  ptr(false),
		Data:       map[string][]byte{SecretConfigKey: config, SecretHashKey: hashKey},
	}
}

// ServiceAccount is the runner's identity; only its pod mounts a token.
// It is labelled with the admission policy version its pods are made for.
func ServiceAccount(n Names, ns, agentID string) *corev1.ServiceAccount {
	m := meta(n.Base, ns, agentID)
	m.Labels[LabelAdmission] = AdmissionVersion()
	return &corev1.ServiceAccount{ObjectMeta: m, AutomountServiceAccountToken: ptr(false)}
}

// RunnerRules are all the runner may do: make, watch, attach to and delete
// pods in its own namespace; list also finds the runner pod of an agent it
// asks (the target's token is in its own config, so it reads no Secret).
// No patch or update: a pod's labels place it under NetworkPolicies, and a
// runner that could relabel pods could move any pod of the namespace into
// another role's policies (so a prestarted pod keeps message=prestart).
// No secrets, no other kind.
func RunnerRules() []rbacv1.PolicyRule {
	return []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create", "get", "list", "watch", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"pods/attach"}, Verbs: []string{"create", "get"}},
	}
}

// Role grants RunnerRules in the namespace.
func Role(n Names, ns, agentID string) *rbacv1.Role {
	return &rbacv1.Role{ObjectMeta: meta(n.Base, ns, agentID), Rules: RunnerRules()}
}

// RoleBinding gives the Role to the runner's ServiceAccount.
func RoleBinding(n Names, ns, agentID string) *rbacv1.RoleBinding {
	return &rbacv1.RoleBinding{
		ObjectMeta: meta(n.Base, ns, agentID),
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: n.Base, Namespace: ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: n.Base},
	}
}

// WorkspaceClaim is the agent's workspace. storageClass nil is the
// cluster's default class; "" with volume binds a volume made in advance.
func WorkspaceClaim(n Names, ns, agentID string, size resource.Quantity, storageClass *string, volume string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: meta(n.Claim, ns, agentID),
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: storageClass,
			VolumeName:       volume,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
}

// RunnerService is the runner's ClusterIP service.
func RunnerService(n Names, ns, agentID string, port int32) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: meta(n.Base, ns, agentID),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: Labels(agentID),
			Ports: []corev1.ServicePort{{
				Name: portName, Protocol: corev1.ProtocolTCP, Port: port, TargetPort: intstr.FromString(portName),
			}},
		},
	}
}

// RunnerPod says what varies between runner Deployments.
type RunnerPod struct {
	AgentID    string
	Image      string
	PullPolicy corev1.PullPolicy
	Port       int32
	ConfigHash string
	// StopSeconds lets the message in flight finish on SIGTERM.
	StopSeconds int64
	// APIServer is "host:port" of the API server as pods reach it; empty
	// keeps what the kubelet sets (the cluster's kubernetes Service).
	APIServer string
	// Topology and Role (as package topology names it) label the pod as
	// a ThreeGate runner (kube.ThreeGateRunnerLabels); both or neither.
	// Such a runner gets no DNS (kube.MemberDNS).
	Topology, Role string
	// HostAliases name the model endpoint's host for a ThreeGate runner
	// (kube.MemberHostAliases): its pod has no resolver.
	HostAliases []corev1.HostAlias
}

// RunnerDeployment runs one runner, never two: one replica and the Recreate
// strategy (the old pod is gone before the new one starts). Its pod is
// hardened as a message pod is (non-root, read-only root filesystem, every
// capability dropped, no privilege escalation, RuntimeDefault seccomp,
// limits, a small memory /tmp); unlike a message pod it mounts its
// service-account token, since it drives the API, and its config Secret
// read-only. The config hash annotation rolls it when the config changes.
func RunnerDeployment(n Names, ns string, r RunnerPod) (*appsv1.Deployment, error) {
	env := []corev1.EnvVar{{Name: "TMPDIR", Value: "/tmp"}}
	if r.APIServer != "" {
		host, port, err := net.SplitHostPort(r.APIServer)
		if err != nil || host == "" {
			return nil, fmt.Errorf("api server %q: want host:port", r.APIServer)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("api server %q: bad port", r.APIServer)
		}
		// Explicit variables win over the ones the kubelet adds.
		env = append(env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
	}
	if (r.Topology == "") != (r.Role == "") {
		return nil, fmt.Errorf("threegate topology %q and role %q: want both or neither", r.Topology, r.Role)
	}
	labels := Labels(r.AgentID)
	podLabels := maps.Clone(labels)
	if r.Topology != "" {
		maps.Copy(podLabels, kube.ThreeGateRunnerLabels(r.Topology, r.Role))
	}
	spec := runnerPodSpec(n, r, env)
	if r.Topology != "" {
		kube.MemberDNS(&spec)
		spec.HostAliases = r.HostAliases
	}
	d := &appsv1.Deployment{
		ObjectMeta: meta(n.Base, ns, r.AgentID),
		Spec: appsv1.DeploymentSpec{
			Replicas:             ptr(int32(1)),
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector:             &metav1.LabelSelector{MatchLabels: labels},
			RevisionHistoryLimit: ptr(int32(2)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: podLabels, Annotations: map[string]string{AnnotationConfigHash: r.ConfigHash}},
				Spec:       spec,
			},
		},
	}
	return d, nil
}

func runnerPodSpec(n Names, r RunnerPod, env []corev1.EnvVar) corev1.PodSpec {
	uid, gid := RunnerUID, RunnerGID
	tmp := resource.MustParse(runnerTmp)
	// The kubelet adds group read for the fsGroup whatever the mode.
	secretMode := int32(0o440)
	res := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(RunnerMemory), corev1.ResourceCPU: resource.MustParse(RunnerCPU)}
	probe := &corev1.Probe{
		ProbeHandler:     corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString(portName)}},
		PeriodSeconds:    1,
		FailureThreshold: 3,
		TimeoutSeconds:   2,
	}
	return corev1.PodSpec{
		ServiceAccountName:            n.Base,
		AutomountServiceAccountToken:  ptr(true),
		EnableServiceLinks:            ptr(false),
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: &r.StopSeconds,
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr(true), RunAsUser: &uid, RunAsGroup: &gid, FSGroup: &gid,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Volumes: []corev1.Volume{
			{Name: volConfig, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: n.Base, DefaultMode: &secretMode, Items: []corev1.KeyToPath{{Key: SecretConfigKey, Path: SecretConfigKey}},
			}}},
			{Name: volTmp, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: &tmp}}},
		},
		Containers: []corev1.Container{{
			Name:            containerName,
			Image:           r.Image,
			ImagePullPolicy: r.PullPolicy,
			Command:         []string{"agent-runner", "serve", "--config", ConfigDir + "/" + SecretConfigKey, "--config-secret"},
			Env:             env,
			Ports:           []corev1.ContainerPort{{Name: portName, ContainerPort: r.Port, Protocol: corev1.ProtocolTCP}},
			Resources:       corev1.ResourceRequirements{Limits: res, Requests: res},
			ReadinessProbe:  probe,
			VolumeMounts: []corev1.VolumeMount{
				{Name: volConfig, MountPath: ConfigDir, ReadOnly: true},
				{Name: volTmp, MountPath: "/tmp"},
			},
			TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			SecurityContext: &corev1.SecurityContext{
				RunAsNonRoot: ptr(true), RunAsUser: &uid, RunAsGroup: &gid,
				Privileged:               ptr(false),
				AllowPrivilegeEscalation: ptr(false),
				ReadOnlyRootFilesystem:   ptr(true),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		}},
	}
}

func ptr[T any](v T) *T { return &v }
