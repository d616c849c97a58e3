package kubedeploy

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// waitAvailable waits until the Deployment has rolled out and its one pod,
// of the config hash given, is ready (its /healthz answers). On failure the
// error says what the pod, its container and its events show.
func (s *Service) waitAvailable(ctx context.Context, id, hash string) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.ReadyTimeout)
	defer cancel()
	for {
		pod, err := s.runnerState(ctx, id, hash)
		if pod != nil {
			return pod, nil
		}
		if err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("%w\n%s", err, s.describeRunner(context.WithoutCancel(ctx), id))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("not available after %s\n%s", s.o.ReadyTimeout, s.describeRunner(context.WithoutCancel(ctx), id))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// runnerState returns the ready runner pod of hash once the Deployment is
// rolled out; an error when the pod will not get there by waiting.
func (s *Service) runnerState(ctx context.Context, id, hash string) (*corev1.Pod, error) {
	n := NamesFor(id)
	d, err := s.o.Client.Clientset.AppsV1().Deployments(s.o.Client.Namespace).Get(ctx, n.Base, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("deployment %s: %w", n.Base, err)
	}
	pods, err := s.runnerPods(ctx, id)
	if err != nil {
		return nil, err
	}
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Annotations[AnnotationConfigHash] != hash {
			continue
		}
		if err := kube.PodFailed(p); err != nil {
			return nil, err
		}
		if kube.RolledOut(d) && kube.PodReady(p) && len(pods) == 1 {
			return p, nil
		}
	}
	return nil, nil
}

func (s *Service) runnerPods(ctx context.Context, id string) ([]corev1.Pod, error) {
	list, err := s.o.Client.Clientset.CoreV1().Pods(s.o.Client.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector(id)})
	if err != nil {
		return nil, fmt.Errorf("list runner pods: %w", err)
	}
	return list.Items, nil
}

// describeRunner says what the runner's pods show.
func (s *Service) describeRunner(ctx context.Context, id string) string {
	return kube.Describe(ctx, s.o.Client, NamesFor(id).Base, Selector(id), containerName)
}
