package runner

import (
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestDefaultToolShellHoldsNoSecret: a TOOL-EXEC agent with the default
// inject_secrets_env and no redaction (so that whatever a tool can see
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
	cfg.InjectSecretsEnv = agentspec.DefaultInjectSecretsEnv
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
	// The control: asked for, the same shell does get it.
	cfg2 := testAgentConfig(t, cli, "secretasked")
	cfg2.Role, cfg2.InjectSecretsEnv, cfg2.RedactSecrets = "tool_exec", true, false
	b := startAgent(t, cfg2)
	if _, out := b.sh(t, `env`); !strings.Contains(out, "EXTRA="+cfg2.Secrets["EXTRA"]) {
		t.Errorf("inject_secrets_env = true no longer exports the secret:\n%s", out)
	}
}
