package agentspec

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

// Validate checks what a runner needs before it listens, beyond the
// owner's settings (ValidateSettings, which it runs too). The runner runs
// it at start and the provider's cluster plan on the config it would
// write (both through kube.ValidateConfig, which adds the message pod's
// own check), so a plan refuses what the runner would.
func Validate(c *Config) error {
	var errs []error
	if c.AgentID == "" {
		errs = append(errs, errors.New("agent_id is empty"))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("token is empty"))
	}
	if c.Listen == "" {
		errs = append(errs, errors.New("listen is empty"))
	}
	if c.Workspace == "" {
		errs = append(errs, errors.New("workspace is empty"))
	}
	if err := CheckRole(c.Role); err != nil {
		errs = append(errs, err)
	}
	if c.Role == RoleToolExec && !c.Container.Enabled && c.FileAccess.Unrestricted {
		errs = append(errs, errors.New("role tool_exec runs its tools with no network, which an unrestricted host-mode agent cannot enforce; turn container mode on or file_access.unrestricted off"))
	}
	if len(c.Ask) > 0 && c.Role != RoleCore {
		// Depth one: only CORE asks, and only FETCH and TOOL-EXEC answer.
		errs = append(errs, fmt.Errorf("ask: only a core agent may ask other agents, and this one's role is %q", c.Role))
	}
	for i, a := range c.Ask {
		switch {
		case a.AgentID == "" || a.AgentID == c.AgentID:
			errs = append(errs, fmt.Errorf("ask[%d]: agent_id %q: want another agent's id", i, a.AgentID))
		case a.Role != RoleFetch && a.Role != RoleToolExec:
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s has role %q; a core agent asks only fetch and tool_exec agents", i, a.AgentID, a.Role))
		case c.Kubernetes == nil && (a.Token == "" || a.Port != 0 || !validAskListen(a.Listen)):
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s: want its runner's listen (unix:///path or 127.0.0.1:PORT) and token", i, a.AgentID))
		case c.Kubernetes != nil && (a.Token == "" || a.Listen != "" || a.Port < 1 || a.Port > 65535):
			errs = append(errs, fmt.Errorf("ask[%d]: agent %s: on kubernetes want its runner's port and token, and no listen (its pod is found by its labels)", i, a.AgentID))
		}
	}
	if err := validateEgress(c); err != nil {
		errs = append(errs, err)
	}
	if c.Container.Enabled && c.Container.Image == "" {
		errs = append(errs, errors.New("container_mode.image is empty"))
	}
	if within(c.Path, c.Workspace) {
		errs = append(errs, fmt.Errorf("the config file %s lies inside the workspace, where the agent can read and change it; keep it outside", c.Path))
	}
	switch {
	case c.Journal != "" && (!filepath.IsAbs(c.Journal) || filepath.Clean(c.Journal) != c.Journal):
		errs = append(errs, fmt.Errorf("journal_dir %q: want an absolute, clean path", c.Journal))
	case within(c.Journal, c.Workspace) || within(c.Workspace, c.Journal):
		errs = append(errs, fmt.Errorf("journal_dir %s and the workspace overlap; the journal holds message text the agent must not read or change", c.Journal))
	}
	// Env is set on the sandbox, where `docker inspect` and /proc show it;
	// a secret there would outlive the message. Secrets stay here.
	if red := Redactor(c); len(c.Env) > 0 {
		for _, k := range slices.Sorted(maps.Keys(c.Env)) {
			v := c.Env[k]
			switch {
			case !EnvNamePattern.MatchString(k) || strings.ContainsRune(v, 0):
				// "HOME=/x y" would set HOME in host mode, where the
				// environment is a list exec reads first-match.
				errs = append(errs, fmt.Errorf("env %q: want a variable name and a value without NUL", k))
			case red.String(v) != v:
				errs = append(errs, fmt.Errorf("env %s holds the API key or a secret value; pass secrets in secrets and bind them (secret_bindings), never in env", k))
			}
		}
	}
	for _, k := range BoundSecretNames(c) {
		if _, ok := c.Secrets[k]; !ok {
			errs = append(errs, fmt.Errorf("secret_bindings[%q]: no secret of that name", k))
		}
	}
	errs = append(errs, validateKubernetes(c))
	// What the owner chose is checked as the provider's plan checks it.
	errs = append(errs, ValidateSettings(c))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner config: %w", err)
	}
	return nil
}

// Redactor knows the values never to show: the API key and the secrets,
// in every spelling redact.Redactor knows.
func Redactor(c *Config) *redact.Redactor {
	v := []string{c.LLM.APIKey}
	for _, s := range c.Secrets {
		v = append(v, s)
	}
	return redact.NewRedactor(v...)
}

// validateKubernetes checks what a runner in a cluster can honour; it
// fails closed where the Docker meaning of a setting has no pod
// equivalent yet. What the message pod itself needs is kube's to check
// (kube.ValidateConfig).
func validateKubernetes(c *Config) error {
	k := c.Kubernetes
	if k == nil {
		return nil
	}
	var errs []error
	if !c.Container.Enabled {
		errs = append(errs, errors.New("kubernetes: needs container_mode.enabled: messages run in pods, there is no host mode in a cluster"))
	}
	if (k.Topology == "") != (c.Role == "") {
		// On a cluster a role's network is its topology's NetworkPolicies,
		// which find the pods by these labels: a role without them would
		// run with the cluster network open.
		errs = append(errs, fmt.Errorf("kubernetes: role %q and threegate_topology %q: a threegate role needs its topology and the other way round", c.Role, k.Topology))
	}
	if len(c.Container.Networks) > 0 {
		errs = append(errs, errors.New("kubernetes: container_mode.networks are Docker networks; pods are placed by labels and NetworkPolicies"))
	}
	// Without a role, container_mode.network "none" (or empty) and
	// "bridge" are accepted: a pod always joins the cluster network, and
	// kubedeploy puts the agent's message pods under a NetworkPolicy of
	// their own before the runner starts (kubedeploy.MessagePolicy). The
	// runner cannot see that policy, so it makes each pod wait until the
	// API server is blocked before agent-run reads its request
	// (kube.PolicyProbe): a pod the policy does not cover never runs a
	// message.
	if c.Role == "" && !OwnPolicy(c) {
		errs = append(errs, fmt.Errorf("kubernetes: container_mode.network %q: a cluster has no Docker networks; use none or bridge", c.Container.Network))
	}
	return errors.Join(errs...)
}

// within says path is dir or lies inside it (both set).
func within(path, dir string) bool {
	if path == "" || dir == "" {
		return false
	}
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// validAskListen: an ask target's runner listens on a unix socket (an
// absolute path) or on 127.0.0.1 with a numeric port, nothing else: the
// ask carries that runner's token.
func validAskListen(listen string) bool {
	if p, ok := strings.CutPrefix(listen, "unix://"); ok {
		return strings.HasPrefix(p, "/") && p == filepath.Clean(p)
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil || host != "127.0.0.1" {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536 && strconv.Itoa(n) == port
}
