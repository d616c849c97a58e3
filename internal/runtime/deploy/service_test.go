package deploy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// recordingLogger keeps every line, formatted, for the assertions below.
type recordingLogger struct {
	mu    sync.Mutex
	lines []string
}

func (l *recordingLogger) add(level, msg string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf("%s %s %v", level, msg, args))
}
func (l *recordingLogger) Trace(m string, a ...any) { l.add("TRACE", m, a) }
func (l *recordingLogger) Debug(m string, a ...any) { l.add("DEBUG", m, a) }
func (l *recordingLogger) Info(m string, a ...any)  { l.add("INFO", m, a) }
func (l *recordingLogger) Warn(m string, a ...any)  { l.add("WARN", m, a) }
func (l *recordingLogger) Error(m string, a ...any) { l.add("ERROR", m, a) }

func (l *recordingLogger) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// noDocker fails the test if the service asks for the daemon: an agent
// whose runner an operator runs, in host mode, needs none.
func noDocker(t *testing.T) func(context.Context) (client.APIClient, error) {
	return func(context.Context) (client.APIClient, error) {
		t.Error("the service asked for the Docker daemon")
		return nil, errors.New("no daemon in this test")
	}
}

func externalAgent() agentspec.Agent {
	return agentspec.Agent{
		Config: agentspec.Config{
			AgentID: "a1",
			Container: agentspec.ContainerMode{MemoryLimit: agentspec.SizeOf(agentspec.DefaultMemoryBytes), TimeoutSeconds: 60, Network: agentspec.DefaultNetwork,
				PidsLimit: agentspec.DefaultPidsLimit, Runtime: agentspec.DefaultRuntime, Prestart: true},
			FileAccess: landlock.FileAccess{AllowNetwork: true},
			LLM:        agentspec.LLMConfig{Provider: "offline", APIKey: "sk-test-secret-key"},
			Secrets:    map[string]string{"TOOL_TOKEN": "tool-secret-value"},
			MaxSteps:   agentspec.DefaultMaxSteps, RedactSecrets: true,
		},
		Meta: agentspec.Meta{Soul: "be brief", Memory: "nothing yet", Deployment: agentspec.ModeExternal},
	}
}

// The whole lifecycle of an agent whose runner an operator runs, with no
// daemon and no terraform: apply writes the workspace and the runner's
// files, read finds what apply recorded, import restores the agent, and
// remove keeps the workspace unless forced. Every step is logged, and no
// line holds a secret.
func TestServiceExternalLifecycle(t *testing.T) {
	ctx := context.Background()
	state := t.TempDir()
	log := &recordingLogger{}
	svc := NewService(Options{StateDir: state, Version: "test", Docker: noDocker(t), Logger: log})
	a := externalAgent()

	out, err := svc.Apply(ctx, a, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	layout := svc.Layout("a1")
	ws := filepath.Join(state, "agents", "a1")
	if out.Token == "" || out.WorkspacePath != ws || out.RunnerStatus != agentspec.StatusExternal || out.RunnerContainerID != "" ||
		out.Reported != agentspec.NotReported || out.Endpoint != "unix://"+layout.Socket || out.ConfigHash == "" {
		t.Fatalf("Apply = %+v", out)
	}
	for _, f := range []string{layout.ConfigFile, MetaFile(layout), layout.HashKeyFile} {
		if st, err := os.Stat(f); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v %v, want a 0600 file", f, st, err)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(ws, "SOUL.md")); err != nil || string(raw) != "be brief" {
		t.Errorf("SOUL.md = %q, %v", raw, err)
	}
	cfg, err := agentspec.LoadConfig(layout.ConfigFile)
	if err != nil || cfg.Token != out.Token || cfg.Workspace != ws || cfg.LLM.APIKey != "sk-test-secret-key" {
		t.Fatalf("config on disk: %+v %v", cfg, err)
	}
	if err := kube.ValidateConfig(cfg); err != nil {
		t.Errorf("the runner would refuse the config apply wrote: %v", err)
	}

	// Plan, with the token apply made, foresees the hash apply recorded;
	// Read finds it on disk.
	a.Config.Token = out.Token
	if p := svc.Plan(ctx, a); p.ConfigHash != out.ConfigHash || p.WorkspacePath != ws || p.Endpoint != out.Endpoint {
		t.Errorf("Plan = %+v, want the hash %s", p, out.ConfigHash)
	}
	obs, err := svc.Read(ctx, a)
	if err != nil || obs.ConfigHash != out.ConfigHash || obs.WorkspacePath != ws || obs.RunnerStatus != agentspec.StatusExternal || obs.Soul != "be brief" {
		t.Fatalf("Read = %+v, %v", obs, err)
	}
	// A changed secret changes the hash (the keyed part).
	b := a
	b.Config.Secrets = map[string]string{"TOOL_TOKEN": "another"}
	if svc.Plan(ctx, b).ConfigHash == out.ConfigHash {
		t.Error("a changed secret left the hash alone")
	}
	// An edited config file is drift.
	cfg.Container.TimeoutSeconds = 61
	if err := agentspec.WriteConfig(layout.ConfigFile, cfg); err != nil {
		t.Fatal(err)
	}
	if obs, _ := svc.Read(ctx, a); obs.ConfigHash == out.ConfigHash {
		t.Error("an edited config file was not seen")
	}

	imp, err := svc.Import(ctx, "a1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(imp.Agent.Meta, agentspec.Meta{Soul: "be brief", Memory: "nothing yet", Deployment: agentspec.ModeExternal}) ||
		imp.Agent.Config.Token != out.Token || imp.Endpoint != out.Endpoint || imp.Reported != agentspec.NotReported {
		t.Errorf("Import = %+v", imp)
	}
	if _, err := svc.Import(ctx, "../a1"); err == nil {
		t.Error("an import id with a path in it was accepted")
	}

	if err := svc.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(layout.Dir); !os.IsNotExist(err) {
		t.Errorf("runner files left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ws, "SOUL.md")); err != nil {
		t.Errorf("the workspace went without force_destroy_workspace: %v", err)
	}
	if _, err := svc.Apply(ctx, a, nil, true); err != nil {
		t.Fatal(err)
	}
	a.Meta.ForceDestroyWorkspace = true
	if err := svc.Remove(ctx, a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ws); !os.IsNotExist(err) {
		t.Errorf("the workspace stayed with force_destroy_workspace: %v", err)
	}

	text := log.text()
	for _, want := range []string{"workspace created", "runner config written", "agent metadata written", "runner files removed",
		"keeping the agent's workspace", "workspace removed"} {
		if !strings.Contains(text, want) {
			t.Errorf("no %q in the log:\n%s", want, text)
		}
	}
	for _, secret := range []string{out.Token, "sk-test-secret-key", "tool-secret-value"} {
		if strings.Contains(text, secret) {
			t.Errorf("a secret is in the log:\n%s", text)
		}
	}
}

// A workspace gone between applies is made again, and the owner is told
// that what the agent wrote there is lost.
func TestServiceWarnsOfARecreatedWorkspace(t *testing.T) {
	ctx := context.Background()
	svc := NewService(Options{StateDir: t.TempDir(), Docker: noDocker(t)})
	a := externalAgent()
	out, err := svc.Apply(ctx, a, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(out.WorkspacePath); err != nil {
		t.Fatal(err)
	}
	a.Config.Token = out.Token
	again, err := svc.Apply(ctx, a, &agentspec.Prior{Deployment: agentspec.ModeExternal, RunnerStatus: agentspec.StatusExternal, Reported: agentspec.NotReported}, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Warnings) != 1 || again.Warnings[0].Topic != "workspace recreated" || !strings.Contains(again.Warnings[0].Detail, out.WorkspacePath) {
		t.Errorf("warnings %+v", again.Warnings)
	}
	if again.Token != out.Token || again.ConfigHash != out.ConfigHash {
		t.Errorf("a second apply changed the token or the hash: %+v", again)
	}
}

// A bad listen address is refused before anything is made, naming the
// setting at fault.
func TestServiceRefusesABadListenAddress(t *testing.T) {
	state := t.TempDir()
	svc := NewService(Options{StateDir: state, Docker: noDocker(t)})
	a := externalAgent()
	a.Config.Listen = "0.0.0.0:8080"
	_, err := svc.Apply(context.Background(), a, nil, true)
	var se *fault.StepError
	if !errors.As(err, &se) || se.Step != agentspec.StepListen || se.Field != "listen" {
		t.Fatalf("Apply = %v, want a listen StepError", err)
	}
	if entries, _ := os.ReadDir(state); len(entries) != 0 {
		t.Errorf("something was made: %v", entries)
	}
}

func TestListenRewrite(t *testing.T) {
	l := Listener{Port: 8701}
	if got := ServedListen(agentspec.ModeContainer, l); got != "0.0.0.0:8701" {
		t.Errorf("container runner listens on %q", got)
	}
	if got := ServedListen(agentspec.ModeExternal, l); got != "127.0.0.1:8701" {
		t.Errorf("external runner listens on %q", got)
	}
	if got := ServedListen(agentspec.ModeContainer, Listener{Unix: "/s/r.sock"}); got != "unix:///s/r.sock" {
		t.Errorf("unix listener %q", got)
	}
	if got := HostListen(ServedListen(agentspec.ModeContainer, l)); got != l.String() {
		t.Errorf("HostListen does not undo ServedListen: %q", got)
	}
}

func TestWorkspaceOwner(t *testing.T) {
	me := os.Getuid()
	o, warn := WorkspaceOwner(agentspec.Config{})
	if o == nil || o.UID != me || warn != "" {
		t.Errorf("host mode: %+v %q, want this process's user", o, warn)
	}
	o, warn = WorkspaceOwner(agentspec.Config{Container: agentspec.ContainerMode{Enabled: true, User: userSpec(t, "1000:2000")}})
	switch {
	case me == 0 && (o == nil || o.UID != 1000 || o.GID != 2000):
		t.Errorf("root hands the workspace to the container user: %+v", o)
	case me != 0 && me != 1000 && (o != nil || !strings.Contains(warn, "cannot hand the workspace")):
		t.Errorf("a non-root provider cannot chown: %+v %q", o, warn)
	}
	want := agentspec.AgentUser("a1")
	if o, _ := WorkspaceOwner(agentspec.Config{AgentID: "a1", Container: agentspec.ContainerMode{Enabled: true}}); me == 0 && (o == nil || o.UID != want.UID || o.GID != want.GID) {
		t.Errorf("default user: %+v, want the agent's own %s", o, want)
	}
}
