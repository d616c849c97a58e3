package deploy

import (
	"context"
	"fmt"

	"github.com/bogpad/terraform-provider-meepa/internal/version"
)

// VersionDrift is a running runner whose build is not the provider's: one
// deployed by another release (or another snapshot of the same version), or
// one too old to say. The provider and the runner share the runner's
// config, its /healthz and the sandbox protocol; a mismatch there is found
// by the plan (the runner is replaced) rather than by the next message.
type VersionDrift struct {
	Runner   version.Info // zero when the runner did not report its build
	Provider version.Info
}

func (d *VersionDrift) Error() string {
	runner := d.Runner.String()
	if d.Runner.Version == "" {
		runner = "a build too old to report its version"
	}
	return fmt.Sprintf("The running agent-runner is %s; this provider is %s. "+
		"The plan redeploys the runner. Its image must carry the provider's agent-runner: "+
		"meepa_isolation_image rebuilds when the provider's runner changes; an image made otherwise must be rebuilt.", runner, d.Provider)
}

// Build is the runner's build as its /healthz reports it; ok is false for a
// runner that does not report one.
func (h Health) Build() (version.Info, bool) {
	v, _ := h["version"].(string)
	c, _ := h["commit"].(string)
	if v == "" {
		return version.Info{}, false
	}
	return version.Info{Version: v, Commit: c}, true
}

// CompareBuild compares a runner's /healthz with this binary's build: nil
// when they are the same, a *VersionDrift otherwise.
func CompareBuild(h Health) *VersionDrift {
	want := version.Current()
	got, ok := h.Build()
	if ok && got == want {
		return nil
	}
	return &VersionDrift{Runner: got, Provider: want}
}

// RunnerVersionDrift asks the runner listening on listen for its /healthz
// and compares its build with this binary's. A runner that does not answer
// is not version drift (its container state says what is wrong, and a
// restarting runner answers on the next plan): nil then, as for a match.
func RunnerVersionDrift(ctx context.Context, listen string) *VersionDrift {
	l, err := ParseListen(listen)
	if err != nil {
		return nil
	}
	h, err := CheckHealth(ctx, l)
	if err != nil {
		return nil
	}
	return CompareBuild(h)
}
