package kube

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
)

// errPodGone: the pod was deleted while it was waited for.
var errPodGone = errors.New("pod deleted")

// fatalWaiting are the reasons a container waits that no wait will end.
// CrashLoopBackOff only comes to a pod that restarts its containers (a
// Deployment's); a message's pod never does.
var fatalWaiting = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
}

// hopeless reports whether a container that waits for w will never start.
// The kubelet also reports CreateContainerConfigError while its cache of a
// Secret or ConfigMap the pod names has not synced yet ("failed to sync
// secret cache: timed out waiting for the condition"), seen on a loaded
// node for a Secret created a moment before the pod; it retries that, so
// the wait goes on.
func hopeless(w *corev1.ContainerStateWaiting) bool {
	return w != nil && fatalWaiting[w.Reason] && !strings.Contains(w.Message, "failed to sync")
}

// waitPod watches a pod until done says so (or fails), from the state in
// from when it has a resource version, else from a fresh read. A watch the
// server ends is started again.
func (k *Pods) waitPod(ctx context.Context, from *corev1.Pod, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, error) {
	pods := k.c.Clientset.CoreV1().Pods(k.c.Namespace)
	last := from
	for {
		if last.ResourceVersion == "" {
			p, err := pods.Get(ctx, from.Name, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			last = p
		}
		if ok, err := done(last); ok || err != nil {
			return last, err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{
			FieldSelector:   fields.OneTermEqualSelector("metadata.name", from.Name).String(),
			ResourceVersion: last.ResourceVersion,
		})
		if err != nil {
			return nil, fmt.Errorf("watch: %w", err)
		}
		p, ok, err := watchUntil(ctx, w, done)
		w.Stop()
		switch {
		case ok || (err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled)):
			return p, err
		case err != nil:
			return nil, fmt.Errorf("%w (%s)", err, describe(last))
		case p != nil:
			last = p
		}
		// The watch ended: read afresh and watch again.
		last = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: from.Name}}
	}
}

func watchUntil(ctx context.Context, w watch.Interface, done func(*corev1.Pod) (bool, error)) (*corev1.Pod, bool, error) {
	var last *corev1.Pod
	for {
		select {
		case <-ctx.Done():
			return last, false, ctx.Err()
		case ev, open := <-w.ResultChan():
			if !open {
				return last, false, nil
			}
			switch ev.Type {
			case watch.Deleted:
				return nil, false, errPodGone
			case watch.Added, watch.Modified:
				p, isPod := ev.Object.(*corev1.Pod)
				if !isPod {
					continue
				}
				last = p
				if ok, err := done(p); ok || err != nil {
					return p, ok, err
				}
			case watch.Error:
				return last, false, nil
			}
		}
	}
}

func containerStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == ContainerName {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// containerRunning: the agent container runs; an error when it never will.
func containerRunning(p *corev1.Pod) (bool, error) {
	if p.DeletionTimestamp != nil {
		return false, errPodGone
	}
	if cs := containerStatus(p); cs != nil {
		switch {
		case cs.State.Running != nil:
			return true, nil
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			return false, fmt.Errorf("container exited before its message: exit %d, %s %s", t.ExitCode, t.Reason, t.Message)
		case hopeless(cs.State.Waiting):
			return false, fmt.Errorf("container %s: %s", cs.State.Waiting.Reason, cs.State.Waiting.Message)
		}
	}
	if p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
		return false, fmt.Errorf("pod %s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message)
	}
	return false, nil
}

// containerTerminated: the agent container has exited.
func containerTerminated(p *corev1.Pod) (bool, error) {
	cs := containerStatus(p)
	return cs != nil && cs.State.Terminated != nil, nil
}

// describe says why a pod is not there yet, for a start that timed out.
func describe(p *corev1.Pod) string {
	if p == nil {
		return "no status"
	}
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			return fmt.Sprintf("phase %s, %s %s: %s", p.Status.Phase, c.Type, c.Reason, c.Message)
		}
	}
	if cs := containerStatus(p); cs != nil && cs.State.Waiting != nil {
		return fmt.Sprintf("phase %s, waiting %s: %s", p.Status.Phase, cs.State.Waiting.Reason, cs.State.Waiting.Message)
	}
	return "phase " + string(p.Status.Phase)
}
