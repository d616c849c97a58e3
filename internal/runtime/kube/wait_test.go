package kube

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podWith(phase corev1.PodPhase, state corev1.ContainerState) *corev1.Pod {
	return &corev1.Pod{Status: corev1.PodStatus{Phase: phase, ContainerStatuses: []corev1.ContainerStatus{
		{Name: "sidecar", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
		{Name: ContainerName, State: state},
	}}}
}

// A pod start ends when the agent container runs, fails at once when it
// never will (image, config, early exit, deletion), and keeps waiting
// while the pod is merely pending.
func TestContainerRunning(t *testing.T) {
	deleting := podWith(corev1.PodPending, corev1.ContainerState{})
	deleting.DeletionTimestamp = &metav1.Time{}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		ok      bool
		errText string
	}{
		"pending, no status": {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}}, false, ""},
		"creating":           {podWith(corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}), false, ""},
		"running":            {podWith(corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}), true, ""},
		"never pulled":       {podWith(corev1.PodPending, corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImageNeverPull", Message: "not present"}}), false, "ErrImageNeverPull: not present"},
		"exited early":       {podWith(corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 127, Reason: "Error"}}), false, "exit 127"},
		"failed pod":         {&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}}, false, "Evicted"},
		"deleted":            {deleting, false, "pod deleted"},
	} {
		t.Run(name, func(t *testing.T) {
			ok, err := containerRunning(tc.pod)
			if ok != tc.ok || (tc.errText == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.errText)) {
				t.Errorf("containerRunning = %v, %v; want %v and an error containing %q", ok, err, tc.ok, tc.errText)
			}
		})
	}
	if _, err := containerRunning(deleting); !errors.Is(err, errPodGone) {
		t.Errorf("a pod being deleted: %v, want errPodGone", err)
	}
}

// Only the agent container's exit counts, not another container's.
func TestContainerTerminated(t *testing.T) {
	done := podWith(corev1.PodFailed, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}})
	if ok, _ := containerTerminated(done); !ok {
		t.Error("terminated agent container not seen")
	}
	running := podWith(corev1.PodRunning, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
	running.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}}
	if ok, _ := containerTerminated(running); ok {
		t.Error("another container's exit taken for the agent's")
	}
	unsched := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes: Insufficient memory"},
	}}}
	if got := describe(unsched); !strings.Contains(got, "Unschedulable: 0/1 nodes: Insufficient memory") {
		t.Errorf("describe = %q", got)
	}
}
