package kube

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// EgressKeyField is the field of a topology's key Secret that holds its
// egress key (hex): what the proxy pod reads into proxy.EnvEgressKey, and
// what a FETCH agent's apply derives the agent's key from. No runner's
// ServiceAccount may read Secrets (RunnerRules), and the admission policy
// refuses a message pod that takes one, so no sandbox reaches it.
const EgressKeyField = "egress-key"

// EgressKeySecretName is the name of topology name's key Secret.
func EgressKeySecretName(name string) string { return topospec.ProxyName(name) + "-key" }

// EgressKeySecret is topology name's key Secret holding key.
func EgressKeySecret(name, ns string, key []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: EgressKeySecretName(name), Namespace: ns, Labels: ThreeGateObjectLabels(name)},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{EgressKeyField: []byte(fmt.Sprintf("%x", key))},
	}
}

// EgressKey reads topology name's egress key from its key Secret. A
// topology applied by an earlier release has none: apply it first.
func EgressKey(ctx context.Context, c *Client, name string) ([]byte, error) {
	sec, err := c.Clientset.CoreV1().Secrets(c.Namespace).Get(ctx, EgressKeySecretName(name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("topology %q has no egress key Secret %s (made by an earlier release, or not applied); apply its "+
			"threegate_network first, which makes the key and a proxy that requires a per-message credential", name, EgressKeySecretName(name))
	}
	if err != nil {
		return nil, fmt.Errorf("topology %q: read its egress key Secret %s: %w", name, EgressKeySecretName(name), err)
	}
	if sec.Labels[ThreeGateLabelTopology] != name {
		return nil, fmt.Errorf("secret %s is not the egress key of topology %q (label %s)", sec.Name, name, ThreeGateLabelTopology)
	}
	k, err := proxy.ParseKey(string(sec.Data[EgressKeyField]))
	if err != nil {
		return nil, fmt.Errorf("topology %q: egress key Secret %s: %w", name, sec.Name, err)
	}
	return k, nil
}

// AnnotationTopologySpec on a topology's proxy Deployment is the
// topology's record (topospec.MarshalRecord).
const AnnotationTopologySpec = "meepa.io/threegate-spec"

// LiveTopology is topology name as its proxy Deployment records it: what
// a FETCH agent's apply checks the agent's egress policy against.
func LiveTopology(ctx context.Context, c *Client, name string) (topospec.Spec, error) {
	d, err := c.Clientset.AppsV1().Deployments(c.Namespace).Get(ctx, topospec.ProxyName(name), metav1.GetOptions{})
	if err != nil {
		return topospec.Spec{}, fmt.Errorf("topology %q: its proxy Deployment %s: %w", name, topospec.ProxyName(name), err)
	}
	if d.Labels[ThreeGateLabelTopology] != name {
		return topospec.Spec{}, fmt.Errorf("deployment %s is not the proxy of topology %q", d.Name, name)
	}
	text, ok := d.Annotations[AnnotationTopologySpec]
	if !ok {
		return topospec.Spec{}, fmt.Errorf("topology %q: its proxy Deployment carries no record (made by an earlier release); apply its threegate_network first", name)
	}
	s, err := topospec.ParseRecord(text)
	if err != nil {
		return s, fmt.Errorf("topology %q: the record on Deployment %s: %w", name, d.Name, err)
	}
	return s, nil
}
