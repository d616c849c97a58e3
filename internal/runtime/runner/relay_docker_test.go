package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

var relayTokenRe = regexp.MustCompile(`meepa-relay-[0-9a-f]{64}`)

// keyPrefix is testAPIKey's start: the credential probe searches for it
// without holding the key itself.
const keyPrefix = "sk-meepa-test-"

// firstToolOutput is the first tool call's output in a raw runner answer.
func firstToolOutput(t *testing.T, raw []byte) string {
	t.Helper()
	var r struct {
		Steps []struct {
			ToolCalls []struct {
				Output string `json:"output"`
			} `json:"tool_calls"`
		} `json:"steps"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Steps {
		for _, c := range s.ToolCalls {
			return c.Output
		}
	}
	t.Fatalf("no tool call in %s", raw)
	return ""
}

// In container mode the API key never enters a per-message container: the
// loop's LLM calls go through the runner's relay on a unix socket mounted
// read-only into a container with network "none", and a tool finds the key
// in no environment, argv, file or process memory, nor in `docker inspect`
// of the running container; the model endpoint gets the key. With
// inject_credentials_env, tools reach the relay through the loop's loopback
// forwarder, and only the model endpoint.
func TestContainerKeyStaysWithRunner(t *testing.T) { containerKeyStaysWithRunner(t, "") }

// The same under gVisor: the relay socket is reached through runsc's
// --host-uds=open (scripts/runsc.sh), the key still out of reach.
func TestContainerKeyStaysWithRunnerRunsc(t *testing.T) { containerKeyStaysWithRunner(t, "runsc") }

func containerKeyStaysWithRunner(t *testing.T, runtime string) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	if runtime != "" {
		testutil.RequireRuntime(t, cli, runtime)
	}
	model := testutil.NewFakeModel(t, map[string]string{"probe": testutil.CredentialProbe(keyPrefix), "relay": relayCalls})
	var mu sync.Mutex
	var inspected []string
	for _, inject := range []bool{false, true} {
		t.Run(fmt.Sprintf("inject_credentials_env=%v", inject), func(t *testing.T) {
			cfg := testAgentConfig(t, cli, fmt.Sprintf("relay%v%s", inject, runtime))
			cfg.Container.Runtime = runtime
			cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL = "openai", "m", model.URL()+"/v1"
			cfg.RedactSecrets, cfg.InjectCredentialsEnv = false, inject
			model.OnCall = func() {
				// `docker inspect` of the agent's containers while the
				// message runs.
				for _, c := range containersOf(t, cli, cfg.AgentID) {
					_, raw, err := cli.ContainerInspectWithRaw(context.Background(), c.ID, false)
					mu.Lock()
					if err == nil && bytes.Contains(raw, []byte(testAPIKey)) {
						inspected = append(inspected, c.ID[:12])
					}
					mu.Unlock()
				}
			}
			a := startAgent(t, cfg)
			checkKeyStaysWithRunner(t, a, model, inject)
			mu.Lock()
			defer mu.Unlock()
			if len(inspected) > 0 {
				t.Errorf("the key is in docker inspect of %v", inspected)
			}
		})
	}
}

// relayCalls is a tool's use of the relay with inject_credentials_env: a
// model call (allowed), a /models call (refused) and the token it holds.
const relayCalls = `b="$OPENAI_BASE_URL"; h="Authorization: Bearer $OPENAI_API_KEY"
wget -q -O /dev/null --header "$h" --header 'Content-Type: application/json' --post-data '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}' "$b/chat/completions"; echo "== ok $?"
wget -q -O /dev/null --header "$h" "$b/models" 2>&1; echo "== models $?"
echo "== token $OPENAI_API_KEY"`

// checkKeyStaysWithRunner sends the credential probe (model command
// "probe") and, with inject, the relay calls (command "relay") to a
// running agent whose config carries testAPIKey, and checks that no tool
// found the key while the model endpoint got it on every call.
func checkKeyStaysWithRunner(t *testing.T, a *liveAgent, model *testutil.FakeModel, inject bool) {
	t.Helper()
	a.waitReady(t)
	ans := a.send(t, "probe")
	if ans.status != 200 {
		t.Fatalf("probe: %d %s", ans.status, ans.raw)
	}
	out := firstToolOutput(t, ans.raw)
	t.Logf("probe output:\n%s", out)
	if strings.Contains(out, testAPIKey) || bytes.Contains(ans.raw, []byte(testAPIKey)) {
		t.Errorf("a tool found the API key:\n%s", out)
	}
	// Either the probe reads the loop's memory and finds the token but
	// never the key, or the loop (non-dumpable) is out of its reach
	// altogether. A probe that could read and found no token proves
	// nothing.
	if i := strings.Index(out, "== mem "); i < 0 || (!relayTokenRe.MatchString(out[i:]) && !strings.Contains(out[i:], "Permission denied")) {
		t.Errorf("the memory probe neither read the loop's memory nor was refused, so it proves nothing:\n%s", out)
	}
	seen := model.Seen()
	if len(seen) == 0 {
		t.Errorf("the model endpoint got no call")
	}
	for _, got := range seen {
		if got != "Bearer "+testAPIKey {
			t.Errorf("the model endpoint got Authorization %q, want the key", got)
		}
	}
	if !inject {
		return
	}
	a.waitReady(t)
	ans = a.send(t, "relay")
	out = firstToolOutput(t, ans.raw)
	t.Logf("relay output:\n%s", out)
	if !strings.Contains(out, "== ok 0") || strings.Contains(out, "== models 0") || !relayTokenRe.MatchString(out) || strings.Contains(out, testAPIKey) {
		t.Errorf("tools and the relay: want the model call to work, /models refused, a token, no key:\n%s", out)
	}
}

// A TOOL-EXEC agent's shell runs in a container with no interface but lo
// and no route, though its config names a network, while the same
// message's LLM calls (two: the tool call, then the answer) reach the model
// through the relay.
func TestToolExecShellHasNoNetwork(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	// A host service on every host address: a container with any network
	// would reach it through its gateway; this one must find no route.
	port := testutil.HostService(t)
	model := testutil.NewFakeModel(t, map[string]string{
		"ifaces": fmt.Sprintf(`echo "== ifaces $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ' ')"; echo "== routes $(tail -n +2 /proc/net/route | wc -l)"; nc -w 3 172.17.0.1 %d </dev/null 2>&1; echo "== nc $?"`, port),
	})
	cfg := testAgentConfig(t, cli, "toolexec")
	cfg.Role = "tool_exec"
	cfg.Container.Network, cfg.Container.Networks = "", []string{"bridge"}
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL = "openai", "m", model.URL()+"/v1"
	a := startAgent(t, cfg)
	ans := a.send(t, "ifaces")
	if ans.status != 200 || ans.reply != "done" {
		t.Fatalf("message: %d %s", ans.status, ans.raw)
	}
	out := firstToolOutput(t, ans.raw)
	t.Logf("TOOL-EXEC shell:\n%s", out)
	if !strings.Contains(out, "== ifaces lo \n") || !strings.Contains(out, "== routes 0") || strings.Contains(out, "== nc 0") || !strings.Contains(out, "Network is unreachable") {
		t.Errorf("the TOOL-EXEC shell has a network:\n%s", out)
	}
	if n := len(model.Seen()); n != 2 {
		t.Errorf("the model got %d calls, want 2", n)
	}
}

// A prestarted container's agent has its workspace and memory.db open
// before any message, yet its relay token comes only with the message:
// each message gets its own, and the token of a message that is over is
// refused even to the next message's tools, while that message's own works.
func TestPrestartedAgentGetsItsOwnToken(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	model := testutil.NewFakeModel(t, map[string]string{"token": `echo "== token $OPENAI_API_KEY"`})
	cfg := testAgentConfig(t, cli, "pretoken")
	cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL = "openai", "m", model.URL()+"/v1"
	cfg.RedactSecrets, cfg.InjectCredentialsEnv = false, true
	a := startAgent(t, cfg)
	a.waitReady(t)
	// The waiting agent prepared before any message: memory.db exists.
	db := filepath.Join(cfg.Workspace, agent.MemoryFile)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(db); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the prestarted agent did not open memory.db before its message")
		}
	}
	var tokens []string
	for range 2 {
		a.waitReady(t)
		ans := a.send(t, "token")
		tok := relayTokenRe.FindString(firstToolOutput(t, ans.raw))
		if ans.status != 200 || tok == "" {
			t.Fatalf("token message: %d %s", ans.status, ans.raw)
		}
		tokens = append(tokens, tok)
	}
	if tokens[0] == tokens[1] {
		t.Fatalf("two messages got the same token %s", tokens[0])
	}
	call := `wget -q -O /dev/null --header "Authorization: Bearer %s" --header 'Content-Type: application/json' --post-data '{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}' "$OPENAI_BASE_URL/chat/completions"`
	model.SetCommand("replay", fmt.Sprintf(call+`; echo "== old $?"; `+call+`; echo "== own $?"`, tokens[0], "$OPENAI_API_KEY"))
	a.waitReady(t)
	ans := a.send(t, "replay")
	out := firstToolOutput(t, ans.raw)
	if ans.status != 200 || !strings.Contains(out, "== own 0") || !strings.Contains(out, "== old ") || strings.Contains(out, "== old 0") {
		t.Errorf("replay of an earlier message's token: want it refused and this message's own accepted: %d\n%s", ans.status, out)
	}
}
