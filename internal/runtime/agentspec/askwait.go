package agentspec

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrAskTargetNotDeployed: an ask target has no runner config yet (it is
// applied in the same run); the plan cannot check it, the apply waits for
// it (WaitForAsk).
var ErrAskTargetNotDeployed = errors.New("not deployed yet")

// AskWait bounds how long an apply waits for ask targets that are not
// deployed yet. Agents planned in one run with no reference between them
// (one for_each over a fleet) are applied side by side, so a core agent
// may be applied before the agents it asks; their runner config appears
// early in their apply.
const AskWait = 5 * time.Minute

// WaitForAsk calls resolve until it finds every target, fails for another
// reason than a target not deployed yet, or wait has passed.
func WaitForAsk(ctx context.Context, wait time.Duration, resolve func() ([]AskTarget, error)) ([]AskTarget, error) {
	deadline := time.Now().Add(wait)
	for {
		targets, err := resolve()
		if err == nil || !onlyNotDeployed(err) {
			return targets, err
		}
		if time.Now().After(deadline) {
			return targets, fmt.Errorf("%w (after waiting %s for agents applied in the same run; is a meepa_agent with that agent_id in the configuration?)", err, wait)
		}
		select {
		case <-ctx.Done():
			return targets, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// onlyNotDeployed: every error joined in err is a target not deployed yet.
func onlyNotDeployed(err error) bool {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return errors.Is(err, ErrAskTargetNotDeployed)
	}
	for _, e := range j.Unwrap() {
		if !errors.Is(e, ErrAskTargetNotDeployed) {
			return false
		}
	}
	return true
}
