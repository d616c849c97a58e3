package main

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestHostModeKeyNeverInWorkspace is the host-mode half of the runner's
// TestKeyNeverInWorkspace: the agent child never holds the key, yet a
// tool's output that carries it (built from pieces at run time, echoed by
// the model as its reply) and a message that carries it reach memory.db
// only scrubbed, through the relay on the child's inherited socket; the
// reply is redacted.
func TestHostModeKeyNeverInWorkspace(t *testing.T) {
	if landlock.DetectABI() < landlock.MinNetABI {
		t.Skip("kernel without Landlock ABI 4")
	}
	key := "sk-meepa-hostscrub-" + "5d0a93c1e7b4"
	build := `k="$(printf '%s%s' sk-meepa-host scrub-5d0a93c1e7b4)"; printf 'plain %s\nb64 %s\n' "$k" "$(printf '%s' "$k" | base64 -w0)"`
	model := testutil.NewFakeModel(t, map[string]string{"key": build})
	model.EchoTools = true
	for _, provider := range []string{agentspec.ProviderOffline, agentspec.ProviderOpenAI} {
		t.Run(provider, func(t *testing.T) {
			cfg := &agentspec.Config{
				AgentID:       "tf-host-keyscrub",
				Container:     agentspec.ContainerMode{TimeoutSeconds: 60},
				FileAccess:    landlock.FileAccess{AllowNetwork: true},
				RedactSecrets: true,
			}
			cfg.LLM.Provider, cfg.LLM.Model, cfg.LLM.BaseURL, cfg.LLM.APIKey = provider, "m", model.URL()+"/v1", key
			c, logs := hostServeConfig(t, cfg)
			msg := "key"
			if provider == agentspec.ProviderOffline {
				msg = "!sh " + build
			}
			for _, text := range []string{msg, "remember " + base64.StdEncoding.EncodeToString([]byte(key))} {
				status, m := post(t, c, text)
				if status != 200 {
					t.Fatalf("%q: %d %v\n%s", text, status, m, logs.String())
				}
				if s := fmt.Sprint(m); redact.NewRedactor(key).String(s) != s {
					t.Errorf("the reply holds the key: %s", s)
				}
			}
			red := redact.NewRedactor(key)
			files := 0
			testutil.Must(t, filepath.WalkDir(cfg.Workspace, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				files++
				if s := string(data); red.String(s) != s {
					t.Errorf("workspace file %s holds the key", p)
				}
				if strings.HasSuffix(p, agent.MemoryFile) && !strings.Contains(string(data), redact.Redacted) {
					t.Errorf("memory.db holds no scrubbed exchange")
				}
				return nil
			}))
			if files == 0 {
				t.Error("no file in the workspace: the test proves nothing")
			}
		})
	}
}
