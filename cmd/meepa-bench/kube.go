package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/docker/docker/client"
	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kubedeploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testimage"
)

// benchKube is the Kubernetes section, run only when MEEPA_KUBECONFIG names
// a cluster (export MEEPA_KUBECONFIG=$(scripts/k8s-up.sh)). Interleaved,
// round by round, on the same image and hardened pod:
//
//	(n) a bare pod: create, until the API reports its container exited, delete;
//	(o) a message round trip through the pod backend, prestart off;
//	(p) the same with prestart on, sent when the next pod is ready;
//
// (o) and (p) run confined as an agent's pods are: under a message policy,
// each waiting until its policy holds before it reads its request;
//
// and prints `bench-k8s: o/n=<x> p/n=<x>` (targets: o/n ≤ 1.10, p/n ≤ 0.25).
func benchKube(ctx context.Context, cli *client.Client, kubeconfig, tmp string, rounds int) error {
	if err := testimage.ImportToCluster(ctx, cli, ".", runnerImage); err != nil {
		return err
	}
	base, err := kube.Connect(kube.Config{ConfigPath: kubeconfig})
	if err != nil {
		return err
	}
	ns := "meepa-bench-" + runID
	if _, err := base.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("namespace: %w", err)
	}
	defer func() {
		if err := base.Clientset.CoreV1().Namespaces().Delete(context.WithoutCancel(ctx), ns, metav1.DeleteOptions{}); err != nil {
			fmt.Fprintf(os.Stderr, "meepa-bench: delete namespace %s: %v\n", ns, err)
		}
	}()
	c, err := kube.Connect(kube.Config{ConfigPath: kubeconfig, Namespace: ns})
	if err != nil {
		return err
	}
	if err := kube.WaitDefaultServiceAccount(ctx, c); err != nil {
		return err
	}
	ws := filepath.Join(tmp, "k8s-ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		return err
	}
	if err := os.Chown(ws, agentspec.DefaultUID, agentspec.DefaultGID); err != nil {
		return err
	}
	remove, err := kube.HostPathClaim(ctx, c, "ws", ws)
	if err != nil {
		return err
	}
	defer func() {
		if err := remove(context.WithoutCancel(ctx)); err != nil {
			fmt.Fprintf(os.Stderr, "meepa-bench: %v\n", err)
		}
	}()
	spec := kube.PodSpec{AgentID: agentName("k8s"), Image: runnerImage, ImagePullPolicy: corev1.PullNever, WorkspaceClaim: "ws"}
	// Each message pod is confined as an agent's is: under its agent's
	// message policy, and it waits until the policy holds before it reads
	// its request.
	if spec.AwaitBlocked, err = confine(ctx, c, spec.AgentID, agentName("k8s-warm")); err != nil {
		return err
	}
	k, l, m, err := kubeRounds(ctx, c, spec, rounds)
	if err != nil {
		return err
	}
	fmt.Printf("(n) k8s bare pod create -> exited (API) -> delete median %7.1f ms  (n=%d)\n", ms(median(k)), len(k))
	fmt.Printf("(o) k8s message round trip, prestart off      median %7.1f ms\n", ms(median(l)))
	fmt.Printf("(p) k8s message round trip, prestart on, idle median %7.1f ms\n", ms(median(m)))
	fmt.Printf("bench-k8s: o/n=%.3f p/n=%.3f\n", ratio(l, k), ratio(m, k))
	return nil
}

// confine puts the message pods of the given agents under a "none" message
// policy, as kubedeploy does, and returns the address their pods must find
// blocked: the API server, as this process reaches it.
func confine(ctx context.Context, c *kube.Client, agents ...string) ([]string, error) {
	for _, id := range agents {
		pol, err := kubedeploy.MessagePolicy(kubedeploy.NamesFor(id), c.Namespace, id, "none", kube.ClusterNetwork{})
		if err != nil {
			return nil, err
		}
		if _, err := c.Clientset.NetworkingV1().NetworkPolicies(c.Namespace).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("message policy: %w", err)
		}
	}
	u, err := url.Parse(c.REST.Host)
	if err != nil || u.Port() == "" {
		return nil, fmt.Errorf("API server address %q: want https://host:port", c.REST.Host)
	}
	return []string{u.Host}, nil
}

func kubeRounds(ctx context.Context, c *kube.Client, spec kube.PodSpec, rounds int) (k, l, m []time.Duration, err error) {
	// MEEPA_BENCH_DEBUG=1 prints each message's reply and exit-state times.
	log := hclog.NewNullLogger()
	kube.RouteClientLogs(log) // client-go's stream-teardown lines, not the bench's
	if os.Getenv("MEEPA_BENCH_DEBUG") != "" {
		log = hclog.New(&hclog.LoggerOptions{Level: hclog.Debug, Output: os.Stderr})
	}
	cold, err := kube.NewPods(ctx, c, kube.Options{Spec: spec, Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() { err = errors.Join(err, cold.Close(context.WithoutCancel(ctx))) }()
	warmSpec := spec
	warmSpec.AgentID = agentName("k8s-warm")
	warm, err := kube.NewPods(ctx, c, kube.Options{Spec: warmSpec, Prestart: true, Logger: log})
	if err != nil {
		return nil, nil, nil, err
	}
	defer func() { err = errors.Join(err, warm.Close(context.WithoutCancel(ctx))) }()
	request, _ := json.Marshal(agent.Request{AgentID: spec.AgentID, Message: agent.Message{ID: "bench", Text: benchText}, LLM: agentspec.LLMConfig{Provider: "offline"}})
	send := func(p *kube.Pods) error {
		out, err := p.Run(ctx, sandbox.Job{MessageID: "bench", Stdin: request, Timeout: time.Minute})
		if err != nil {
			return err
		}
		if out.ExitCode != 0 {
			return fmt.Errorf("exit %d: %s", out.ExitCode, out.StderrTail)
		}
		return checkReply(out.Stdout)
	}
	for i := 0; i <= rounds; i++ {
		tk, err := timed(func() error { return barePod(ctx, c, spec) })
		if err != nil {
			return nil, nil, nil, fmt.Errorf("(n): %w", err)
		}
		tl, err := timed(func() error { return send(cold) })
		if err != nil {
			return nil, nil, nil, fmt.Errorf("(o): %w", err)
		}
		if err := waitPrestarted(ctx, warm); err != nil {
			return nil, nil, nil, err
		}
		tm, err := timed(func() error { return send(warm) })
		if err != nil {
			return nil, nil, nil, fmt.Errorf("(p): %w", err)
		}
		// The replacement starts now; let it finish before the next round.
		if err := waitPrestarted(ctx, warm); err != nil {
			return nil, nil, nil, err
		}
		if i > 0 { // round 0 warms caches and connections
			k, l, m = append(k, tk), append(l, tl), append(m, tm)
		}
	}
	return k, l, m, nil
}

func waitPrestarted(ctx context.Context, p *kube.Pods) error {
	for deadline := time.Now().Add(2 * time.Minute); !p.Ready(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.New("no prestarted pod became ready")
		}
	}
	return nil
}

// barePod creates the hardened pod running `agent-runner version`, waits
// until the API reports its container exited, and deletes it.
func barePod(ctx context.Context, c *kube.Client, spec kube.PodSpec) error {
	spec.Command = []string{"agent-runner", "version"}
	pod, err := kube.HardenedPod(spec, c.Namespace, "bare")
	if err != nil {
		return err
	}
	pods := c.Clientset.CoreV1().Pods(c.Namespace)
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	defer func() {
		_ = pods.Delete(context.WithoutCancel(ctx), created.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	}()
	w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", created.Name).String(), ResourceVersion: created.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	timeout := time.After(time.Minute)
	for {
		select {
		case ev, open := <-w.ResultChan():
			if !open {
				return errors.New("watch ended")
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Modified {
				for _, s := range p.Status.ContainerStatuses {
					if t := s.State.Terminated; t != nil {
						if t.ExitCode != 0 {
							return fmt.Errorf("bare pod exited %d", t.ExitCode)
						}
						return nil
					}
				}
			}
		case <-timeout:
			return errors.New("bare pod did not exit within a minute")
		}
	}
}
