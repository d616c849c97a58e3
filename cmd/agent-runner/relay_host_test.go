package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// hostServeConfig runs `agent-runner serve` in host mode with cfg (its
// workspace, listen address and token filled in) and returns a client.
func hostServeConfig(t *testing.T, cfg *agentspec.Config) (*http.Client, *lockedBuffer) {
	t.Helper()
	bin := testutil.RunnerBinary(t)
	dir := testutil.SharedTempDir(t) // a root runner runs the agent under its own uid
	cfg.Workspace = filepath.Join(dir, "workspace")
	if err := os.Mkdir(cfg.Workspace, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "runner.sock")
	cfg.Listen, cfg.Token = "unix://"+sock, "test-token"
	cfgPath := filepath.Join(dir, "runner.json")
	if err := agentspec.WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfgPath)
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// An interrupt is serve's graceful stop: it must exit cleanly.
		if err := testutil.Gone(cmd.Process.Signal(os.Interrupt)); err != nil {
			t.Errorf("cleanup: interrupt serve: %v", err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("cleanup: serve after interrupt: %v\n%s", err, stderr.String())
		}
	})
	c := unixClient(sock)
	waitUp(t, c, 10*time.Second, stderr.String)
	return c, stderr
}

// toolOutput is the first tool call's output in a runner answer.
func toolOutput(t *testing.T, m map[string]any) string {
	t.Helper()
	steps, _ := m["steps"].([]any)
	for _, s := range steps {
		calls, _ := s.(map[string]any)["tool_calls"].([]any)
		for _, c := range calls {
			return fmt.Sprint(c.(map[string]any)["output"])
		}
	}
	t.Fatalf("no tool call in %v", m)
	return ""
}

var relayTokenRe = regexp.MustCompile(`meepa-relay-[0-9a-f]{64}`)

// In host mode the API key never reaches the agent child: its LLM calls go
// through the runner's relay on an inherited socket, and a tool finds the
// key in no environment, argv, file or process memory (the /proc/$PPID/mem
// probe of the issue), with or without inject_credentials_env; the model
// endpoint still gets the key. With injection, tools reach the relay with
// the message's token, which dies with the message; the relay forwards
// nothing but the model endpoint and never hands the key back.
func TestHostModeKeyStaysWithRunner(t *testing.T) {
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	const prefix = "sk-meepa-relaytest-"
	key := prefix + "7c41d09be2f35a18"
	relayCalls := `b="$OPENAI_BASE_URL"; h="Authorization: Bearer $OPENAI_API_KEY"
echo "== ok $(curl -s -o /dev/null -w '%{http_code}' -H "$h" -H 'Content-Type: application/json' -d '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}' "$b/chat/completions")"
echo "== echo $(curl -s -H "$h" -d '{"model":"m","max_tokens":16,"q":"ECHO-AUTH"}' "$b/chat/completions")"
echo "== models $(curl -s -o /dev/null -w '%{http_code}' -H "$h" "$b/models")"
echo "== foreign $(curl -s -o /dev/null -w '%{http_code}' -H "$h" -d '{}' "${b%/openai}/anthropic/v1/messages")"
echo "== token $OPENAI_API_KEY"`
	model := testutil.NewFakeModel(t, map[string]string{
		"probe": testutil.CredentialProbe(prefix),
		"relay": relayCalls,
	})
	for _, inject := range []bool{false, true} {
		t.Run(fmt.Sprintf("inject_credentials_env=%v", inject), func(t *testing.T) {
			cfg := &agentspec.Config{
				AgentID:              "tf-host-relay",
				Container:            agentspec.ContainerMode{TimeoutSeconds: 60},
				FileAccess:           landlock.FileAccess{AllowNetwork: true},
				InjectCredentialsEnv: inject,
				// A leak must show in the reply, not be masked in it.
				RedactSecrets: false,
			}
			cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL, cfg.LLM.APIKey = "openai", "m", model.URL()+"/v1", key
			c, logs := hostServeConfig(t, cfg)

			status, m := post(t, c, "probe")
			if status != 200 {
				t.Fatalf("probe message: %d %v\n%s", status, m, logs.String())
			}
			out := toolOutput(t, m)
			t.Logf("probe output:\n%s", out)
			if strings.Contains(out, key) {
				t.Errorf("a tool found the API key:\n%s", out)
			}
			// Either the probe reads the loop's memory, and finds the
			// token but never the key (a runner without a dedicated agent
			// uid), or the loop is out of its reach altogether: a root
			// runner gives the agent its own uid and the loop is
			// non-dumpable. A probe that could read and found no token
			// proves nothing.
			memLoop := out[strings.Index(out, "== mem "):]
			if !relayTokenRe.MatchString(memLoop) && !strings.Contains(memLoop, "Permission denied") {
				t.Errorf("the memory probe neither read the loop's memory nor was refused, so it proves nothing:\n%s", out)
			}
			for _, a := range model.Seen() {
				if a != "Bearer "+key {
					t.Errorf("the model endpoint got Authorization %q, want the key", a)
				}
			}
			if !logged(logs, "llm_input_tokens=26") {
				t.Errorf("the audit line does not count the relayed tokens:\n%s", logs.String())
			}
			if !inject {
				return
			}
			status, m = post(t, c, "relay")
			out = toolOutput(t, m)
			t.Logf("relay output:\n%s", out)
			// The endpoint's 401 echoes the key: the tool gets the relay's
			// own words for it instead.
			for _, want := range []string{"== ok 200", "the model endpoint answered 401", "== models 404", "== foreign 404"} {
				if !strings.Contains(out, want) {
					t.Errorf("relay from a tool: want %q in:\n%s", want, out)
				}
			}
			if status != 200 || strings.Contains(out, key) {
				t.Errorf("relay from a tool: %d, key in output: %v\n%s", status, strings.Contains(out, key), out)
			}
			old := relayTokenRe.FindString(out[strings.Index(out, "== token"):])
			if old == "" {
				t.Fatalf("no token in the tool's environment:\n%s", out)
			}
			// The previous message's token is dead in the next one.
			model.SetCommand("stale", `curl -s -o /dev/null -w 'stale %{http_code}' -H "Authorization: Bearer `+old+`" -d '{}' "$OPENAI_BASE_URL/chat/completions"`)
			_, m = post(t, c, "stale")
			if out := toolOutput(t, m); !strings.Contains(out, "stale 401") {
				t.Errorf("a token of an earlier message: %s, want 401", out)
			}
		})
	}
}
