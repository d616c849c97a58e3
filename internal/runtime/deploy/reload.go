package deploy

import (
	"context"
	"fmt"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"

	"github.com/docker/docker/client"
)

// TopicImageDrift is the Warning a Read gives for a runner that serves
// another per-message image than its config names.
const TopicImageDrift = "runner image drift"

// reloadsImage says a new container_mode.image reaches this agent's
// runner by a reload rather than a new runner (see Service.hash): a
// container-mode agent whose runner the provider runs from an image of its
// own (runner.image, even one equal to the per-message image today).
func reloadsImage(a agentspec.Agent) bool {
	return a.Config.Container.Enabled && a.Deployment() == agentspec.ModeContainer && a.Meta.RunnerImage != ""
}

// servedImage is the per-message image the runner on l says it serves;
// "" when it does not say.
func servedImage(ctx context.Context, l Listener) (string, error) {
	h, err := CheckHealth(ctx, l)
	if err != nil {
		return "", err
	}
	img, _ := h["image"].(string)
	return img, nil
}

// reloadImage makes a kept runner serve the per-message image its config
// file now names: SIGHUP (the runner reloads its config once the message
// in flight is done, discarding the container it prestarted from the old
// image), then /healthz until it names the new image. A runner that
// already serves it is left alone.
func (s *Service) reloadImage(ctx context.Context, cli client.APIClient, a agentspec.Agent, l Listener) error {
	id, want := a.Config.AgentID, a.Config.Container.Image
	name := ContainerName(id)
	if got, err := servedImage(ctx, l); err != nil {
		return stepErr(agentspec.StepHealth, "", "asking "+name+" which image it serves", err)
	} else if got == want {
		return nil
	}
	// The runner keeps its old config when the new image is missing; say
	// so now rather than after the wait.
	if _, err := cli.ImageInspect(ctx, want); err != nil {
		return stepErr(agentspec.StepDeploy, "container_mode.image", "checking the new per-message image of "+name, err)
	}
	if err := cli.ContainerKill(ctx, name, "HUP"); err != nil {
		return stepErr(agentspec.StepDeploy, "", "telling "+name+" to reload its config", err)
	}
	s.log.Info("runner reloading for a new per-message image", "agent_id", id, "container", name, "image", want)
	// The reload waits for the message in flight (at most its timeout).
	timeout := agentspec.StopTimeout(a.Config) + 30*time.Second
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got := ""
	for {
		var err error
		if got, err = servedImage(ctx, l); err == nil && got == want {
			s.log.Info("runner serves the new image", "agent_id", id, "image", want)
			return nil
		}
		select {
		case <-ctx.Done():
			return stepErr(agentspec.StepHealth, "container_mode.image", name+" did not take the new image",
				fmt.Errorf("after %s it still serves %q, not %q (its log says why: docker logs %s)", timeout, got, want, name))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// imageDrift says why a runner serves another per-message image than its
// config names (a reload that failed, or a runner too old to say), or "".
func imageDrift(ctx context.Context, a agentspec.Agent, l Listener) string {
	if !reloadsImage(a) {
		return ""
	}
	got, err := servedImage(ctx, l)
	if err != nil || got == a.Config.Container.Image {
		return ""
	}
	if got == "" {
		got = "an image it does not name"
	}
	return fmt.Sprintf("The runner %s serves the per-message image %s, but its config names %s (a reload that did not "+
		"take: see docker logs %s). The plan replaces the runner.", ContainerName(a.Config.AgentID), got, a.Config.Container.Image, ContainerName(a.Config.AgentID))
}
