package kube

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func deploymentPod(name string, cs ...corev1.ContainerStatus) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "x"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: cs},
	}
}

// A Deployment's pod has failed when a container can't start or keeps
// exiting; a pod that is merely starting, or restarted once, has not.
func TestPodFailed(t *testing.T) {
	waitingFor := func(reason, why string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: why}}}
	}
	waiting := func(reason string) corev1.ContainerStatus { return waitingFor(reason, "why") }
	exited := func(restarts int32) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "c", RestartCount: restarts,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}}
	}
	for name, tc := range map[string]struct {
		pod     *corev1.Pod
		errText string
	}{
		"creating":      {deploymentPod("p", waiting("ContainerCreating")), ""},
		"restarted":     {deploymentPod("p", exited(1)), ""},
		"image missing": {deploymentPod("p", waiting("ErrImageNeverPull")), "pod p: ErrImageNeverPull: why"},
		"crash loop":    {deploymentPod("p", waiting("CrashLoopBackOff")), "pod p: CrashLoopBackOff: why"},
		"secret missing": {deploymentPod("p", waitingFor("CreateContainerConfigError", `secret "k" not found`)),
			`pod p: CreateContainerConfigError: secret "k" not found`},
		"secret cache not synced yet": {deploymentPod("p",
			waitingFor("CreateContainerConfigError", "failed to sync secret cache: timed out waiting for the condition")), ""},
		"keeps exiting": {deploymentPod("p", waiting("ContainerCreating"), exited(2)), "pod p: exited 2 times, last with code 3 (Error)"},
	} {
		t.Run(name, func(t *testing.T) {
			err := PodFailed(tc.pod)
			if (tc.errText == "") != (err == nil) || (err != nil && err.Error() != tc.errText) {
				t.Errorf("PodFailed = %v, want %q", err, tc.errText)
			}
		})
	}
}

func TestPodReady(t *testing.T) {
	p := deploymentPod("p")
	if PodReady(p) {
		t.Error("a pod with no Ready condition taken for ready")
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}, {Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if PodReady(p) {
		t.Error("Ready False taken for ready")
	}
	p.Status.Conditions[1].Status = corev1.ConditionTrue
	if !PodReady(p) {
		t.Error("Ready True not seen")
	}
}

func TestPodState(t *testing.T) {
	p := deploymentPod("p",
		corev1.ContainerStatus{Name: "a", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off"}},
			RestartCount: 4, LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 2, Message: "bad flag\n"}}},
		corev1.ContainerStatus{Name: "b", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
	)
	want := "phase Running, waiting: CrashLoopBackOff back-off, restarted 4 times, last exit 2: bad flag, running, ready true"
	if got := PodState(p); got != want {
		t.Errorf("PodState =\n %q, want\n %q", got, want)
	}
}

// Describe names each selected pod with its state, events and output, and
// with no pod the Deployment's events.
func TestDescribe(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	c := &Client{Clientset: cs, Namespace: "ns"}
	event := func(name, object string) {
		t.Helper()
		_, err := cs.CoreV1().Events("ns").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Name: object},
			Type:           "Warning", Reason: "FailedCreate", Message: " quota exceeded ",
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	event("e1", "dep")
	got := Describe(ctx, c, "dep", "app=x", "c")
	if want := "no pod of deployment dep exists (its events: Warning FailedCreate: quota exceeded)"; got != want {
		t.Errorf("Describe with no pod = %q, want %q", got, want)
	}

	for _, p := range []*corev1.Pod{
		deploymentPod("p1", corev1.ContainerStatus{Name: "c", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff"}}}),
		{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "ns", Labels: map[string]string{"app": "y"}}},
	} {
		if _, err := cs.CoreV1().Pods("ns").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	got = Describe(ctx, c, "dep", "app=x", "c")
	for _, want := range []string{"pod p1: phase Running, waiting: ImagePullBackOff", "\n  events: Warning FailedCreate: quota exceeded", "\n  output: fake logs"} {
		if !strings.Contains(got, want) {
			t.Errorf("Describe = %q, want it to hold %q", got, want)
		}
	}
	if strings.Contains(got, "other") {
		t.Errorf("Describe = %q names a pod the selector does not select", got)
	}
}

// Events keeps the last six, oldest first, whatever order the API gives.
func TestEvents(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset()
	c := &Client{Clientset: cs, Namespace: "ns"}
	if got := Events(ctx, c, "dep"); got != "none" {
		t.Errorf("Events with none = %q", got)
	}
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, i := range []int{5, 2, 7, 0, 3, 6, 1, 4} {
		_, err := cs.CoreV1().Events("ns").Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: fmt.Sprint("e", i), Namespace: "ns"},
			InvolvedObject: corev1.ObjectReference{Name: "dep"},
			LastTimestamp:  metav1.NewTime(start.Add(time.Duration(i) * time.Minute)),
			Type:           "Normal", Reason: fmt.Sprint("R", i),
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := "Normal R2: ; Normal R3: ; Normal R4: ; Normal R5: ; Normal R6: ; Normal R7: "
	if got := Events(ctx, c, "dep"); got != want {
		t.Errorf("Events =\n %q, want\n %q", got, want)
	}
}
