package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// ErrNoProxy is returned when a topology has no ready proxy pod: a FETCH
// message then fails instead of running without its one way out.
var ErrNoProxy = errors.New("the topology's proxy has no ready pod")

// ProxyEnv is the environment that sends a FETCH execution pod's fetches
// to its topology's proxy: the ready proxy pod by address and port. The
// address is looked up for every pod made, since a replaced proxy pod has
// a new one (and a Service address needs a data plane not every cluster
// runs).
func ProxyEnv(ctx context.Context, c *Client, topologyName string) (map[string]string, error) {
	sel := labels.SelectorFromSet(ThreeGateProxyLabels(topologyName)).String()
	pods, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("find the proxy of topology %q: %w", topologyName, err)
	}
	for _, p := range pods.Items {
		u, ok := proxyURL(p)
		if ok {
			return map[string]string{"HTTP_PROXY": u, "HTTPS_PROXY": u, "http_proxy": u, "https_proxy": u}, nil
		}
	}
	return nil, fmt.Errorf("%w (topology %q, namespace %s)", ErrNoProxy, topologyName, c.Namespace)
}

// proxyURL is a ready, running proxy pod's http://ip:port.
func proxyURL(p corev1.Pod) (string, bool) {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || len(p.Spec.Containers) == 0 {
		return "", false
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return "", false
	}
	port := topospec.DefaultProxyPort
	if ps := p.Spec.Containers[0].Ports; len(ps) > 0 {
		port = int(ps[0].ContainerPort)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running == nil {
			return "", false
		}
	}
	return "http://" + netip.AddrPortFrom(ip, uint16(port)).String(), true
}

// EgressProxy is the URL of the FETCH topology's ready proxy pod, found
// afresh for each message (a replaced proxy pod has a new address): the
// runner puts the message's credential into it and revokes there. ""
// for a pod of another role or outside a topology.
func (k *Pods) EgressProxy(ctx context.Context) (string, error) {
	s := k.opts.Spec
	if s.Role != topospec.RoleFetch || s.Topology == "" {
		return "", nil
	}
	env, err := ProxyEnv(ctx, k.c, s.Topology)
	if err != nil {
		return "", err
	}
	return env["http_proxy"], nil
}
