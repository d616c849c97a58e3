package kubedeploy

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// fatalWaiting are reasons a runner container waits that no wait ends.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

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
		if err := podFailed(p); err != nil {
			return nil, err
		}
		if rolledOut(d) && podReady(p) && len(pods) == 1 {
			return p, nil
		}
	}
	return nil, nil
}

func rolledOut(d *appsv1.Deployment) bool {
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.Replicas == 1 && st.UpdatedReplicas == 1 && st.AvailableReplicas == 1
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podFailed: the runner container cannot start, or keeps exiting.
func podFailed(p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			return fmt.Errorf("runner pod %s: %s: %s", p.Name, w.Reason, w.Message)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount >= 2 {
			return fmt.Errorf("runner pod %s: exited %d times, last with code %d (%s)", p.Name, cs.RestartCount, t.ExitCode, t.Reason)
		}
	}
	return nil
}

func (s *Service) runnerPods(ctx context.Context, id string) ([]corev1.Pod, error) {
	list, err := s.o.Client.Clientset.CoreV1().Pods(s.o.Client.Namespace).List(ctx, metav1.ListOptions{LabelSelector: Selector(id)})
	if err != nil {
		return nil, fmt.Errorf("list runner pods: %w", err)
	}
	return list.Items, nil
}

// describeRunner says what the runner's pods show: phase, container
// state, the last events and the last lines of output.
func (s *Service) describeRunner(ctx context.Context, id string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := s.runnerPods(ctx, id)
	if err != nil {
		return err.Error()
	}
	if len(pods) == 0 {
		return "no runner pod exists (see the Deployment's events: " + s.events(ctx, NamesFor(id).Base) + ")"
	}
	var b strings.Builder
	for i := range pods {
		p := &pods[i]
		fmt.Fprintf(&b, "pod %s: phase %s", p.Name, p.Status.Phase)
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			switch {
			case cs.State.Waiting != nil:
				fmt.Fprintf(&b, "; waiting: %s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
			case cs.State.Terminated != nil:
				fmt.Fprintf(&b, "; exited %d: %s", cs.State.Terminated.ExitCode, strings.TrimSpace(cs.State.Terminated.Message))
			case cs.State.Running != nil:
				fmt.Fprintf(&b, "; running, ready %v", cs.Ready)
			}
			if t := cs.LastTerminationState.Terminated; t != nil {
				restarted = true
				fmt.Fprintf(&b, "; restarted %d times, last exit %d: %s", cs.RestartCount, t.ExitCode, strings.TrimSpace(t.Message))
			}
		}
		fmt.Fprintf(&b, "\n  events: %s\n  output: %s\n", s.events(ctx, p.Name), s.logTail(ctx, p.Name, restarted))
	}
	return strings.TrimSpace(b.String())
}

// events are the last few events of an object, oldest first.
func (s *Service) events(ctx context.Context, name string) string {
	list, err := s.o.Client.Clientset.CoreV1().Events(s.o.Client.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", name).String(),
	})
	if err != nil {
		return "(" + err.Error() + ")"
	}
	items := list.Items
	sort.Slice(items, func(i, j int) bool { return items[i].LastTimestamp.Before(&items[j].LastTimestamp) })
	if len(items) > 6 {
		items = items[len(items)-6:]
	}
	var out []string
	for _, e := range items {
		out = append(out, fmt.Sprintf("%s %s: %s", e.Type, e.Reason, strings.TrimSpace(e.Message)))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// logTail is the runner's last lines (of the run before, when it restarted).
func (s *Service) logTail(ctx context.Context, pod string, previous bool) string {
	tail := int64(20)
	rc, err := s.o.Client.Clientset.CoreV1().Pods(s.o.Client.Namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: containerName, TailLines: &tail, Previous: previous,
	}).Stream(ctx)
	if err != nil {
		return "(no logs: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }() // read-only stream
	raw, err := io.ReadAll(io.LimitReader(rc, 16<<10))
	if err != nil {
		return "(log read: " + err.Error() + ")"
	}
	return strings.TrimSpace(string(raw))
}
