package runner

import (
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestDefaultToolShellHoldsNoSecret: a TOOL-EXEC agent with a secret and
// no redaction (so that whatever a tool can see
// would show in the reply) runs a shell in a real per-message container
// that reads every environment and command line it can and the files it
// can reach: no secret value and no key is among them. The loop itself is
// non-dumpable, so its own /proc entries are not readable.
func TestDefaultToolShellHoldsNoSecret(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	cfg := testAgentConfig(t, cli, "nosecret")
	cfg.Role = "tool_exec"
	cfg.InjectCredentialsEnv = true
	cfg.RedactSecrets = false
	a := startAgent(t, cfg)
	code, out := a.sh(t, `env; echo ==; for p in /proc/[0-9]*; do echo "$p: $(tr '\0' ' ' < $p/cmdline 2>&1) | $(tr '\0' ' ' < $p/environ 2>&1)"; done; echo ==; ls -la /workspace /tmp; for f in /workspace/* /tmp/*; do test -f "$f" && cat "$f"; done; echo done`)
	if code != 0 || !strings.Contains(out, "PATH=") || !strings.Contains(out, "/proc/1:") || !strings.Contains(out, "done") {
		t.Fatalf("tool shell: exit %d %q", code, out)
	}
	for name, v := range map[string]string{"the secret": cfg.Secrets["EXTRA"], "the API key": testAPIKey} {
		if strings.Contains(out, v) {
			t.Errorf("a default tool shell sees %s:\n%s", name, out)
		}
	}
	if strings.Contains(out, "EXTRA=") {
		t.Errorf("the secret's name is in a tool's environment:\n%s", out)
	}
	// Asking for the old export is refused before any runner starts.
	cfg.InjectSecretsEnv = true
	if err := agentspec.ValidateSettings(cfg); err == nil || !strings.Contains(err.Error(), "secret_bindings") {
		t.Errorf("inject_secrets_env = true: %v, want a refusal that points at secret_bindings", err)
	}
}
