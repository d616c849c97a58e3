package deploy

import (
	"context"
	"fmt"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

// Send is agentspec.Backend's: the runner's listener and token come from
// its config under the state directory.
func (s *Service) Send(ctx context.Context, id, text string, timeout time.Duration) (agentspec.MessageReply, error) {
	what := "sending a message to agent " + id
	cfg, err := s.runnerConfig(id)
	if err != nil {
		return agentspec.MessageReply{}, stepErr(agentspec.StepSend, "", what, err)
	}
	l, err := ParseListen(HostListen(cfg.Listen))
	if err != nil {
		return agentspec.MessageReply{}, stepErr(agentspec.StepSend, "", what, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc, base := l.Client(timeout)
	r, err := agentspec.PostMessage(ctx, hc, base, cfg.Token, text)
	if err != nil {
		return r, stepErr(agentspec.StepSend, "", what+" at "+l.Endpoint(), err)
	}
	return r, nil
}

// ShortToken is agentspec.Backend's: minted from the token in the
// runner's config file.
func (s *Service) ShortToken(_ context.Context, id string, ttl time.Duration) (string, time.Time, error) {
	cfg, err := s.runnerConfig(id)
	if err == nil {
		var tok string
		var exp time.Time
		if tok, exp, err = agentspec.NewShortToken(cfg.Token, id, ttl); err == nil {
			return tok, exp, nil
		}
	}
	return "", time.Time{}, stepErr(agentspec.StepToken, "", "making a short-lived token for agent "+id, err)
}

// runnerConfig is the config of agent id's runner under the state
// directory, which holds its token.
func (s *Service) runnerConfig(id string) (*agentspec.Config, error) {
	if !workspace.ValidID(id) {
		return nil, fmt.Errorf("%q is not an agent id (%s)", id, workspace.IDPattern)
	}
	cfg, err := agentspec.LoadConfig(s.Layout(id).ConfigFile)
	if err != nil {
		return nil, fmt.Errorf("no runner config for agent %q under %s: %w", id, s.o.StateDir, err)
	}
	return cfg, nil
}
