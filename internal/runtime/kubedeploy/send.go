package kubedeploy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// Send is agentspec.Backend's: the token comes from the agent's Secret,
// and the message goes to a ready runner pod through a port-forward of
// the API server (the provider's host has no route into the cluster's pod
// network, and needs none).
func (b *Backend) Send(ctx context.Context, id, text string, timeout time.Duration) (agentspec.MessageReply, error) {
	what := "sending a message to agent " + id
	fail := func(err error) (agentspec.MessageReply, error) {
		return agentspec.MessageReply{}, stepErr(agentspec.StepSend, "", what, err)
	}
	cfg, err := b.runnerConfig(ctx, id)
	if err != nil {
		return fail(err)
	}
	pods, err := b.s.runnerPods(ctx, id)
	if err != nil {
		return fail(err)
	}
	pod := readyPod(pods)
	if pod == "" {
		return fail(fmt.Errorf("no runner pod is ready: %s", b.s.describeRunner(ctx, id)))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr, stop, err := b.forward(ctx, pod)
	if err != nil {
		return fail(fmt.Errorf("port-forward to runner pod %s: %w", pod, err))
	}
	defer stop()
	r, err := agentspec.PostMessage(ctx, &http.Client{Timeout: timeout}, "http://"+addr, cfg.Token, text)
	if err != nil {
		return r, stepErr(agentspec.StepSend, "", what+" (runner pod "+pod+")", err)
	}
	return r, nil
}

// ShortToken is agentspec.Backend's: minted from the token in the
// agent's Secret.
func (b *Backend) ShortToken(ctx context.Context, id string, ttl time.Duration) (string, time.Time, error) {
	cfg, err := b.runnerConfig(ctx, id)
	if err == nil {
		var tok string
		var exp time.Time
		if tok, exp, err = agentspec.NewShortToken(cfg.Token, id, ttl); err == nil {
			return tok, exp, nil
		}
	}
	return "", time.Time{}, stepErr(agentspec.StepToken, "", "making a short-lived token for agent "+id, err)
}

// runnerConfig is the runner config in agent id's Secret, which holds its
// token.
func (b *Backend) runnerConfig(ctx context.Context, id string) (*agentspec.Config, error) {
	if !workspace.ValidID(id) {
		return nil, fmt.Errorf("%q is not an agent id (%s)", id, workspace.IDPattern)
	}
	cfg, _, err := b.s.secretState(ctx, NamesFor(id))
	if err == nil && cfg == nil {
		err = fmt.Errorf("no readable runner config in Secret %s/%s", b.s.o.Client.Namespace, NamesFor(id).Base)
	}
	return cfg, err
}

// readyPod names a runner pod that is ready and not going away.
func readyPod(pods []corev1.Pod) string {
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				return p.Name
			}
		}
	}
	return ""
}

// forward opens a port-forward from a loopback port of this host to the
// runner's port of pod, until stop or ctx ends.
func (b *Backend) forward(ctx context.Context, pod string) (addr string, stop func(), err error) {
	c := b.s.o.Client
	tr, up, err := spdy.RoundTripperFor(c.REST)
	if err != nil {
		return "", nil, err
	}
	u := c.Clientset.CoreV1().RESTClient().Post().Resource("pods").Namespace(c.Namespace).Name(pod).SubResource("portforward").URL()
	stopCh, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(spdy.NewDialer(up, &http.Client{Transport: tr}, http.MethodPost, u),
		[]string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", DefaultPort)}, stopCh, ready, io.Discard, io.Discard)
	if err != nil {
		return "", nil, err
	}
	done := make(chan error, 1)
	go func() { done <- fw.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return "", nil, err
	case <-ctx.Done():
		close(stopCh)
		return "", nil, ctx.Err()
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) == 0 {
		close(stopCh)
		return "", nil, errors.Join(errors.New("port-forward gave no local port"), err)
	}
	return fmt.Sprintf("127.0.0.1:%d", ports[0].Local), func() { close(stopCh) }, nil
}
