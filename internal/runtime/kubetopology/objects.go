package kubetopology

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// Limits and identity of the proxy pod. The proxy holds one goroutine and
// two sockets per connection; the limits are those of the Docker proxy.
const (
	ProxyMemory = "128Mi"
	ProxyCPU    = "500m"
	// ProxyUID and ProxyGID are nobody's: the proxy owns no file.
	ProxyUID int64 = 65534
	ProxyGID int64 = 65534
	// AnnotationConfig on the pod template is a hash of the proxy's image
	// and command: a change rolls the pod.
	AnnotationConfig = "meepa.io/threegate-config"
	// AnnotationSpec on the Deployment is the topology's record
	// (topospec.MarshalRecord), read back by Import; changing it does not
	// roll the pod.
	AnnotationSpec = kube.AnnotationTopologySpec
	// AnnotationKeyID on the pod template names the topology's egress key
	// (KeyID, not the key): a new key Secret rolls the pod, which reads
	// the key from its environment at start.
	AnnotationKeyID = "meepa.io/threegate-key-id"
	proxyContainer  = "proxy"
	proxyPortName   = "proxy"
)

// ProxyPodLabels are the labels of the proxy pods: the member labels of
// the PROXY role and the ownership labels.
func ProxyPodLabels(name string) map[string]string {
	l := kube.ThreeGateObjectLabels(name)
	for k, v := range kube.ThreeGateProxyLabels(name) {
		l[k] = v
	}
	return l
}

func objectMeta(name, ns, objName string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: objName, Namespace: ns, Labels: kube.ThreeGateObjectLabels(name)}
}

// ConfigHash identifies the proxy's image and command.
func ConfigHash(s topospec.Spec) string {
	h := sha256.Sum256([]byte("v1\x00" + s.Proxy.Image + "\x00" + strings.Join(proxyCommand(s), "\x00")))
	return hex.EncodeToString(h[:8])
}

// proxyCommand is the proxy pod's command line: the topology's, and a
// per-message credential on every request (the key comes from the key
// Secret into the environment, proxy.EnvEgressKey).
func proxyCommand(s topospec.Spec) []string {
	return append(topospec.ProxyCommand(s), "--require-credential")
}

// KeyID names an egress key without revealing it: the first bytes of a
// hash of it, for the pod template's AnnotationKeyID.
func KeyID(key []byte) string {
	h := sha256.Sum256(append([]byte("meepa-egress-key-id\x00"), key...))
	return hex.EncodeToString(h[:8])
}

// ProxyDeployment runs one proxy, never two (one replica, Recreate: the old
// pod is gone before the new one starts). Its pod is hardened like every
// pod of the project: not root, read-only root filesystem, every
// capability dropped, no privilege escalation, RuntimeDefault seccomp, no
// service-account token (it never calls the API), no service links,
// memory and CPU limits. Its egress key comes from the topology's key
// Secret (kube.EgressKeySecret) as an environment variable; keyID is
// KeyID of that key.
func ProxyDeployment(s topospec.Spec, ns string, pull corev1.PullPolicy, keyID string) (*appsv1.Deployment, error) {
	rec, err := topospec.MarshalRecord(s)
	if err != nil {
		return nil, err
	}
	meta := objectMeta(s.Name, ns, topospec.ProxyName(s.Name))
	meta.Annotations = map[string]string{AnnotationSpec: rec}
	uid, gid := ProxyUID, ProxyGID
	one, grace := int32(1), int64(5)
	no, yes := false, true
	limits := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(ProxyMemory), corev1.ResourceCPU: resource.MustParse(ProxyCPU)}
	requests := corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(ProxyMemory), corev1.ResourceCPU: resource.MustParse("50m")}
	labels := ProxyPodLabels(s.Name)
	cmd := proxyCommand(s)
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas:             &one,
			Strategy:             appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Selector:             &metav1.LabelSelector{MatchLabels: kube.ThreeGateProxyLabels(s.Name)},
			RevisionHistoryLimit: &one,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{AnnotationConfig: ConfigHash(s), AnnotationKeyID: keyID}},
				Spec: corev1.PodSpec{
					AutomountServiceAccountToken:  &no,
					EnableServiceLinks:            &no,
					RestartPolicy:                 corev1.RestartPolicyAlways,
					TerminationGracePeriodSeconds: &grace,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &gid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            proxyContainer,
						Image:           s.Proxy.Image,
						ImagePullPolicy: pull,
						Command:         cmd[:1],
						Args:            cmd[1:],
						Env: []corev1.EnvVar{{Name: proxy.EnvEgressKey, ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
							LocalObjectReference: corev1.LocalObjectReference{Name: kube.EgressKeySecretName(s.Name)}, Key: kube.EgressKeyField,
						}}}},
						Ports:     []corev1.ContainerPort{{Name: proxyPortName, ContainerPort: int32(s.Proxy.Port), Protocol: corev1.ProtocolTCP}},
						Resources: corev1.ResourceRequirements{Limits: limits, Requests: requests},
						// No readiness probe: the kubelet's would come from
						// the node, which the proxy's policy does not admit.
						// Apply waits for the proxy's "listening" log line
						// instead.
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						SecurityContext: &corev1.SecurityContext{
							RunAsNonRoot: &yes, RunAsUser: &uid, RunAsGroup: &gid,
							Privileged:               &no,
							AllowPrivilegeEscalation: &no,
							ReadOnlyRootFilesystem:   &yes,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
							SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
						},
					}},
				},
			},
		},
	}, nil
}

// ProxyService is the proxy's ClusterIP Service: a stable name and
// address where the cluster has a Service data plane (kube-proxy or its
// like). See Status.ProxyURL for why members are given the pod's address.
func ProxyService(s topospec.Spec, ns string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: objectMeta(s.Name, ns, topospec.ProxyName(s.Name)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: kube.ThreeGateProxyLabels(s.Name),
			Ports: []corev1.ServicePort{{
				Name: proxyPortName, Protocol: corev1.ProtocolTCP, Port: int32(s.Proxy.Port), TargetPort: intstr.FromString(proxyPortName),
			}},
		},
	}
}
