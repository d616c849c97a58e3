package kube

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

// What a wait for a Deployment's pods (an agent's runner, a topology's
// proxy) reports when it fails, and when it gives up early.

// PodFailed is an error when a container of p cannot start, or keeps
// exiting: no wait will make the pod ready.
func PodFailed(p *corev1.Pod) error {
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; hopeless(w) {
			return fmt.Errorf("pod %s: %s: %s", p.Name, w.Reason, w.Message)
		}
		if t := cs.LastTerminationState.Terminated; t != nil && cs.RestartCount >= 2 {
			return fmt.Errorf("pod %s: exited %d times, last with code %d (%s)", p.Name, cs.RestartCount, t.ExitCode, t.Reason)
		}
	}
	return nil
}

// PodReady reports whether p's Ready condition holds: every container runs
// and passes its readiness probe.
func PodReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// PodState is p's phase and its containers' states, in a few words.
func PodState(p *corev1.Pod) string {
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
		if t := cs.LastTerminationState.Terminated; t != nil {
			out += fmt.Sprintf(", restarted %d times, last exit %d: %s", cs.RestartCount, t.ExitCode, strings.TrimSpace(t.Message))
		}
	}
	return out
}

// restarted reports whether a container of p has run before.
func restarted(p *corev1.Pod) bool {
	for _, cs := range p.Status.ContainerStatuses {
		if cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	return false
}

// Describe says what the pods of a Deployment show, for an error: each
// pod's state, its last events and the last lines of the container's output
// (of the run before, when it restarted); with no pod, the Deployment's
// events. selector is a label selector of the pods.
func Describe(ctx context.Context, c *Client, deployment, selector, container string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := c.Clientset.CoreV1().Pods(c.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fmt.Sprintf("list pods of deployment %s: %v", deployment, err)
	}
	if len(list.Items) == 0 {
		return "no pod of deployment " + deployment + " exists (its events: " + Events(ctx, c, deployment) + ")"
	}
	var b strings.Builder
	for i := range list.Items {
		p := &list.Items[i]
		fmt.Fprintf(&b, "pod %s: %s\n  events: %s\n  output: %s\n", p.Name, PodState(p), Events(ctx, c, p.Name), LogTail(ctx, c, p.Name, container, restarted(p)))
	}
	return strings.TrimSpace(b.String())
}

// Events are the last few events of the object named, oldest first.
func Events(ctx context.Context, c *Client, object string) string {
	list, err := c.Clientset.CoreV1().Events(c.Namespace).List(ctx, metav1.ListOptions{
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

// LogTail is the last lines a container of pod wrote (of the run before,
// when previous), or why they can't be read.
func LogTail(ctx context.Context, c *Client, pod, container string, previous bool) string {
	tail := int64(20)
	rc, err := c.Clientset.CoreV1().Pods(c.Namespace).GetLogs(pod, &corev1.PodLogOptions{
		Container: container, TailLines: &tail, Previous: previous,
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

// RolledOut reports whether a one-replica Deployment runs its current
// template and nothing else: the controller has seen the latest spec, and
// its one pod is updated and available.
func RolledOut(d *appsv1.Deployment) bool {
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.Replicas == 1 && st.UpdatedReplicas == 1 && st.AvailableReplicas == 1
}
