package kubetopology

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
)

// listening is what the proxy logs once its socket is open.
const listening = `"proxy listening"`

// fatalWaiting are reasons a container waits that no wait ends.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

func (sv *Service) proxyPods(ctx context.Context, name string) ([]corev1.Pod, error) {
	list, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.SelectorFromSet(kube.ThreeGateProxyLabels(name)).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("list proxy pods: %w", err)
	}
	return list.Items, nil
}

// proxyPod returns the running proxy pod of s's configuration, or why
// there is none; err only for a failed read.
func (sv *Service) proxyPod(ctx context.Context, s Spec) (*corev1.Pod, string, error) {
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
		case p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" || !containerReady(p):
			why = "the proxy pod " + p.Name + " is " + podState(p)
		default:
			return p, "", nil
		}
	}
	return nil, why, nil
}

func containerReady(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == proxyContainer {
			return cs.Ready && cs.State.Running != nil
		}
	}
	return false
}

// podState is a pod's phase and its container's state, in a few words.
func podState(p *corev1.Pod) string {
	out := "phase " + string(p.Status.Phase)
	for _, cs := range p.Status.ContainerStatuses {
		switch {
		case cs.State.Waiting != nil:
			out += fmt.Sprintf(", waiting: %s %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		case cs.State.Terminated != nil:
			out += fmt.Sprintf(", exited %d: %s", cs.State.Terminated.ExitCode, strings.TrimSpace(cs.State.Terminated.Message))
		case cs.State.Running != nil:
			out += fmt.Sprintf(", running, ready %v", cs.Ready)
		}
		if cs.RestartCount > 0 {
			out += fmt.Sprintf(", restarted %d times", cs.RestartCount)
		}
	}
	return out
}

// podFailed: the proxy container cannot start, or keeps exiting.
func podFailed(p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && fatalWaiting[w.Reason] {
			return fmt.Errorf("pod %s: %s: %s", p.Name, w.Reason, w.Message)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount >= 2 {
			return fmt.Errorf("pod %s: exited %d times, last with code %d (%s)", p.Name, cs.RestartCount, t.ExitCode, t.Reason)
		}
	}
	return nil
}

// waitProxy waits until a proxy pod of s's configuration runs, is the
// only one, and has logged that it listens. On failure the error says
// what the pods, their events and their output show.
func (sv *Service) waitProxy(ctx context.Context, s Spec) (*corev1.Pod, error) {
	ctx, cancel := context.WithTimeout(ctx, sv.o.ReadyTimeout)
	defer cancel()
	why := ""
	for {
		pod, w, err := sv.proxyPod(ctx, s)
		if err != nil && ctx.Err() == nil {
			return nil, err
		}
		why = w
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
					if err := podFailed(&pods[i]); err != nil {
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

// describe says what the proxy's pods show: state, last events and the
// last lines of output.
func (sv *Service) describe(ctx context.Context, name string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pods, err := sv.proxyPods(ctx, name)
	if err != nil {
		return err.Error()
	}
	if len(pods) == 0 {
		return "no proxy pod exists (deployment events: " + sv.events(ctx, ProxyName(name)) + ")"
	}
	var b strings.Builder
	for i := range pods {
		p := &pods[i]
		restarted := false
		for _, cs := range p.Status.ContainerStatuses {
			restarted = restarted || cs.RestartCount > 0
		}
		fmt.Fprintf(&b, "pod %s: %s\n  events: %s\n  output: %s\n", p.Name, podState(p), sv.events(ctx, p.Name), sv.logTail(ctx, p.Name, restarted))
	}
	return strings.TrimSpace(b.String())
}

// events are the last few events of an object, oldest first.
func (sv *Service) events(ctx context.Context, object string) string {
	list, err := sv.c.Clientset.CoreV1().Events(sv.c.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", object).String(),
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

// logTail is the proxy's last lines (of the run before, when it restarted).
func (sv *Service) logTail(ctx context.Context, pod string, previous bool) string {
	tail := int64(20)
	rc, err := sv.c.Clientset.CoreV1().Pods(sv.c.Namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: proxyContainer, TailLines: &tail, Previous: previous,
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
