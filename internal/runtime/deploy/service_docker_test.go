package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// A program other than terraform brings a container-mode agent up with the
// service alone, sends it a message, sees the runner stale once its config
// changes on disk, and takes it down; a runner that cannot become healthy
// is rolled back with the new agent's files.
func TestServiceContainerAgent(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	ctx := context.Background()
	state := t.TempDir()
	log := &recordingLogger{}
	svc := NewService(Options{StateDir: state, Version: "test", Logger: log,
		Docker: func(context.Context) (client.APIClient, error) { return cli, nil }, HealthTimeout: time.Minute})
	id := "meepa-test-svc"
	t.Cleanup(func() {
		if err := Remove(context.Background(), cli, id, time.Second); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	a := agentspec.Agent{
		Config: agentspec.Config{
			AgentID: id,
			Container: agentspec.ContainerMode{Enabled: true, Image: image, MemoryLimit: agentspec.SizeOf(64 << 20), TimeoutSeconds: 30, Network: "none",
				PidsLimit: 64, Runtime: agentspec.DefaultRuntime},
			FileAccess: landlock.FileAccess{AllowNetwork: true},
			LLM:        agentspec.LLMConfig{Provider: "offline"},
			MaxSteps:   agentspec.DefaultMaxSteps,
		},
		Meta: agentspec.Meta{Soul: "test", Deployment: agentspec.ModeContainer},
	}
	out, err := svc.Apply(ctx, a, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if out.RunnerStatus != agentspec.StatusRunning || out.RunnerContainerID == "" {
		t.Fatalf("Apply = %+v", out)
	}
	reply := sendTestMessage(t, svc.Layout(id).Socket, out.Token, "hello")
	if reply != agent.OfflineAnswer("hello") {
		t.Fatalf("reply %q", reply)
	}
	a.Config.Token = out.Token
	obs, err := svc.Read(ctx, a)
	if err != nil || obs.RunnerStatus != agentspec.StatusRunning || obs.RunnerContainerID != out.RunnerContainerID || obs.ConfigHash != out.ConfigHash {
		t.Fatalf("Read = %+v, %v; want the runner Apply made", obs, err)
	}
	// A config edited on disk leaves the runner stale.
	cfgFile := svc.Layout(id).ConfigFile
	raw, err := os.ReadFile(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgFile, bytes.Replace(raw, []byte(`"timeout_seconds": 30`), []byte(`"timeout_seconds": 31`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if obs, _ := svc.Read(ctx, a); obs.RunnerStatus != agentspec.StatusStale {
		t.Errorf("Read after an edit: %+v, want stale", obs)
	}
	if err := svc.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if st, _ := Inspect(ctx, cli, id); st.State != agentspec.StatusMissing {
		t.Errorf("runner after Remove: %+v", st)
	}
	if _, err := os.Stat(filepath.Join(state, "agents", id, "SOUL.md")); err != nil {
		t.Errorf("workspace not kept: %v", err)
	}
	if !strings.Contains(log.text(), "runner container created") || !strings.Contains(log.text(), "runner container removed") {
		t.Errorf("the runner's creation and removal are not logged:\n%s", log.text())
	}

	// An image without agent-runner never becomes healthy: the container
	// and the new agent's files (its secrets) go.
	bad := a
	bad.Config.Token = ""
	bad.Config.AgentID = id
	bad.Config.Container.Image = testutil.EnsureBusybox(t, cli)
	if _, err := svc.Apply(ctx, bad, nil, true); err == nil {
		t.Fatal("a runner without agent-runner came up")
	}
	if st, _ := Inspect(ctx, cli, id); st.State != agentspec.StatusMissing {
		t.Errorf("the failed runner stayed: %+v", st)
	}
	if _, err := os.Stat(svc.Layout(id).Dir); !os.IsNotExist(err) {
		t.Errorf("the failed new agent's runner files stayed: %v", err)
	}
}

func sendTestMessage(t *testing.T, socket, token, text string) string {
	t.Helper()
	c, base := Listener{Unix: socket}.Client(time.Minute)
	body, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var r agent.Reply
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("message: %d %v %+v", resp.StatusCode, err, r)
	}
	return r.Reply
}
