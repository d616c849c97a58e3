package runner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// modelSwap is a TOOL-EXEC shell's try at the owner's key with models the
// owner never chose (a search model, an OpenRouter ":online" variant), and
// at fan-out, through the relay token inject_credentials_env hands it;
// then one call as the loop makes it.
const modelSwap = `b="$OPENAI_BASE_URL"; h="Authorization: Bearer $OPENAI_API_KEY"
call() { wget -q -O /dev/null --header "$h" --header 'Content-Type: application/json' --post-data "$2" "$b/chat/completions" 2>/dev/null; echo "== $1 $?"; }
msgs='"messages":[{"role":"user","content":"hi"}]'
call search "{\"model\":\"gpt-4o-search-preview\",\"max_tokens\":16,$msgs}"
call online "{\"model\":\"openai/gpt-4o:online\",\"max_tokens\":16,$msgs}"
call fallback "{\"model\":\"m\",\"models\":[\"openai/gpt-4o:online\"],\"max_tokens\":16,$msgs}"
call fanout "{\"model\":\"m\",\"n\":8,\"max_tokens\":16,$msgs}"
call huge "{\"model\":\"m\",\"max_tokens\":100000000,$msgs}"
call own "{\"model\":\"m\",\"max_tokens\":16,$msgs}"`

// From a TOOL-EXEC agent's shell (no network, the relay token in its
// environment), a request naming another model, or more than one answer or
// more tokens than the cap, never reaches the endpoint with the key; the
// agent's own model still does.
func TestToolExecCannotSwapModel(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	model := testutil.NewFakeModel(t, map[string]string{"swap": modelSwap})
	cfg := testAgentConfig(t, cli, "swap")
	cfg.Role = "tool_exec"
	cfg.InjectCredentialsEnv, cfg.RedactSecrets = true, false
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL = "openai", "m", model.URL()+"/v1"
	a := startAgent(t, cfg)
	ans := a.send(t, "swap")
	if ans.status != 200 {
		t.Fatalf("message: %d %s", ans.status, ans.raw)
	}
	out := firstToolOutput(t, ans.raw)
	t.Logf("TOOL-EXEC shell:\n%s", out)
	for _, refused := range []string{"search", "online", "fallback", "fanout", "huge"} {
		if !strings.Contains(out, "== "+refused+" ") || strings.Contains(out, "== "+refused+" 0") {
			t.Errorf("the %s call was not refused", refused)
		}
	}
	if !strings.Contains(out, "== own 0") {
		t.Errorf("the agent's own model was refused")
	}
	// The loop's two calls (the tool call, the answer) and the shell's own.
	if n := len(model.Seen()); n != 3 {
		t.Errorf("the model endpoint got %d calls with the key, want 3: %s", n, fmt.Sprint(model.Seen()))
	}
}
