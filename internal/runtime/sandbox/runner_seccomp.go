package sandbox

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// LandlockSyscalls are what the host backend needs from a seccomp profile
// to restrict its per-message child with Landlock.
var LandlockSyscalls = []string{"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"}

// RunnerSeccompProfile is the seccomp profile for a runner container in
// host mode (deployment "container" without container mode): Docker's
// default profile, as the moby/profiles module has it, with the Landlock
// syscalls allowed. Pass it as HostConfig.SecurityOpt
// "seccomp=<profile JSON>".
//
// Why not the daemon's own default: Docker Engines before the default
// profile learned the landlock_* syscalls answer them with EPERM, so the
// runner would see "no Landlock" and, failing closed, refuse every message.
// (Docker 20.10.24 on this project's CI already allows them: the runner
// measured ABI 7 inside a container with the default profile; older
// engines and distributions' builds differ.) Never unconfined: the runner
// container keeps everything the default profile denies.
func RunnerSeccompProfile() ([]byte, error) {
	p, err := defaultSeccompProfile()
	if err != nil {
		return nil, err
	}
	allowed := false
	for _, s := range p.Syscalls {
		unconditional := s.Includes == nil || (len(s.Includes.Caps) == 0 && len(s.Includes.Arches) == 0 && s.Includes.MinKernel == nil)
		if s.Action == specs.ActAllow && len(s.Args) == 0 && unconditional && slices.Contains(s.Names, LandlockSyscalls[0]) {
			allowed = true
		}
	}
	if !allowed {
		p.Syscalls = append(p.Syscalls, &seccomp.Syscall{
			LinuxSyscall: specs.LinuxSyscall{Names: LandlockSyscalls, Action: specs.ActAllow},
			Comment:      "meepa host mode: Landlock for the per-message child",
		})
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("runner seccomp profile: %w", err)
	}
	return raw, nil
}
