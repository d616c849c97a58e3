package kubetopology

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// listening is what the proxy logs once its socket is open.
const listening = `"proxy listening"`

// proxySelector selects the proxy pods of topology name.
func proxySelector(name string) string {
	return labels.SelectorFromSet(kube.ThreeGateProxyLabels(name)).String()
}

func (sv *Service) proxyPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	list, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: proxySelector(name)})
	if err != nil {
		return nil, fmt.Errorf("list proxy pods: %w", err)
	}
	return list.Items, nil
}

// proxyPod returns the running proxy pod of s's configuration, or why
// there is none; err only for a failed read.
func (sv *Service) proxyPod(ctx context.Context, s topospec.Spec) (*corev1.Pod, string, error) {
	pods, err := sv.proxyPods(ctx, s.Name)
	if err != nil {
		return nil, "", err
	}
	hash := ConfigHash(s)
	why := "no proxy pod exists"
	for i := range pods {
		p := &pods[i]
		switch {
		case p.DeletionTimestamp != nil:
			why = "the proxy pod " + p.Name + " is being deleted"
		case p.Annotations[AnnotationConfig] != hash:
			why = "the proxy pod " + p.Name + " runs an older configuration"
		case p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !kube.PodReady(p):
			why = "the proxy pod " + p.Name + " is " + kube.PodState(p)
		default:
			return p, "", nil
		}
	}
	return nil, why, nil
}

// waitProxy waits until a proxy pod of s's configuration runs, is the
// only one, and has logged that it listens. On failure the error says
// what the pods, their events and their output show.
func (sv *Service) waitProxy(ctx context.Context, s topospec.Spec) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, sv.o.ReadyTimeout)
	defer cancel()
	why := ""
	for {
		pod, w, err := sv.proxyPod(ctx, s)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		why = w
		if pod != nil && !sv.rolledOut(ctx, s.Name) {
			// After a Deployment edited out of band is restored, its old
			// pod still carries the current config annotation until the
			// controller replaces it.
			pod, why = nil, "the proxy Deployment has not rolled out its current template yet"
		}
		if pod != nil {
			pods, err := sv.proxyPods(ctx, s.Name)
			if err == nil && len(pods) == 1 && sv.listens(ctx, pod.Name) {
				return pod, nil
			}
			why = "the proxy pod " + pod.Name + " runs but has not logged that it listens"
		}
		if pods, err := sv.proxyPods(ctx, s.Name); err == nil {
			for i := range pods {
				if pods[i].Annotations[AnnotationConfig] == ConfigHash(s) {
					if err := kube.PodFailed(&pods[i]); err != nil {
						return nil, fmt.Errorf("%w\n%s", err, sv.describe(context.WithoutCancel(ctx), s.Name))
					}
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not ready after %s: %s\n%s", sv.o.ReadyTimeout, why, sv.describe(context.WithoutCancel(ctx), s.Name))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// rolledOut reports whether the proxy's Deployment runs its current
// template.
func (sv *Service) rolledOut(ctx context.Context, name string) bool {
	d, err := sv.c.Clientset.AppsV1().Deployments(sv.c.Namespace).Get(ctx, topospec.ProxyName(name), metav1.GetOptions{})
	return err == nil && kube.RolledOut(d)
}

// waitProxyGone waits until no proxy pod of the topology is left, so the
// policies outlive it.
func (sv *Service) waitProxyGone(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, sv.o.ReadyTimeout)
	defer cancel()
	for {
		pods, err := sv.proxyPods(ctx, name)
		if err == nil && len(pods) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("proxy pods of topology %q still exist after %s (%d left); its policies were kept: delete the pods and run again", name, sv.o.ReadyTimeout, len(pods))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// describe says what the proxy's pods show.
func (sv *Service) describe(ctx context.Context, name string) string {
	return kube.Describe(ctx, sv.c, topospec.ProxyName(name), proxySelector(name), proxyContainer)
}

// listens reports whether the proxy has logged that it listens. The line
// comes first, so the start of the log is read: the audit lines that
// follow would push it out of a tail.
func (sv *Service) listens(ctx context.Context, pod string) bool {
	limit := int64(16 << 10)
	raw, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: proxyContainer, LimitBytes: &limit,
	}).DoRaw(ctx)
	return err == nil && strings.Contains(string(raw), listening)
}
