package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/runner"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// `agent-runner serve` killed with SIGKILL mid-message leaves that
// message's container behind; started again, it removes it (found by
// label), reports that message interrupted from its journal (asked for by
// its Idempotency-Key), and the next message works. SIGTERM in the middle of a message
// lets it finish, then stops with no container left.
func TestServeKilledMidMessageRestartsClean(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	bin := testutil.RunnerBinary(t)
	sockDir, err := os.MkdirTemp("", "meepa-serve-")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Cleanup(t, "remove "+sockDir, func() error { return os.RemoveAll(sockDir) })
	ws := t.TempDir()
	cfg := &agentspec.Config{
		AgentID:   "tf-acc-serve-kill-" + fmt.Sprint(os.Getpid()),
		Workspace: ws,
		Listen:    "unix://" + filepath.Join(sockDir, "r.sock"),
		Token:     "serve-test-token",
		Container: agentspec.ContainerMode{Enabled: true, Image: testutil.EnsureRunnerImage(t, cli), TimeoutSeconds: 120, Network: "none", Prestart: true},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
		Journal:   filepath.Join(sockDir, "journal"),
	}
	cfgPath := filepath.Join(sockDir, "runner.json")
	if err := agentspec.WriteConfig(cfgPath, cfg); err != nil {
		t.Fatal(err)
	}
	client := unixClient(strings.TrimPrefix(cfg.Listen, "unix://"))
	agentContainers := func() map[string]string {
		list, err := cli.ContainerList(context.Background(), container.ListOptions{All: true, Filters: sandbox.OrphanFilter(cfg.AgentID)})
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]string{}
		for _, c := range list {
			ids[c.ID] = c.Labels[sandbox.LabelMessage] + " " + c.State + " " + c.Status
		}
		return ids
	}
	testutil.Cleanup(t, "remove orphan containers", func() error {
		_, err := sandbox.RemoveOrphans(context.Background(), cli, cfg.AgentID)
		return err
	})

	serve := func() *exec.Cmd {
		cmd := exec.Command(bin, "serve", "--config", cfgPath)
		logs := &lockedBuffer{}
		cmd.Stderr = logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := testutil.Gone(cmd.Process.Kill()); err != nil {
				t.Errorf("cleanup: kill serve: %v", err)
			}
			_ = cmd.Wait() // "signal: killed": the kill above
			if t.Failed() {
				t.Logf("serve logs:\n%s", logs.String())
			}
		})
		// Up when healthz says a prestarted container waits.
		for deadline := time.Now().Add(90 * time.Second); ; {
			resp, err := client.Get("http://r/healthz")
			if err == nil {
				var h runner.Health
				testutil.Must(t, json.NewDecoder(resp.Body).Decode(&h))
				_ = resp.Body.Close()
				if h.Ready {
					return cmd
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve not ready: %v\n%s", err, logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	sendKey := func(key, text string) (int, string) {
		body, _ := json.Marshal(runner.MessageRequest{Text: text})
		req, _ := http.NewRequest(http.MethodPost, "http://r/v1/messages", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
		if key != "" {
			req.Header.Set(runner.IdempotencyKeyHeader, key)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	send := func(text string) (int, string) { return sendKey("", text) }

	first := serve()
	go sendKey("killed", "!sh touch /workspace/started; sleep 100")
	for deadline := time.Now().Add(60 * time.Second); ; {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message never started")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait() // "signal: killed": the kill above
	before := agentContainers()
	if len(before) == 0 {
		t.Fatal("no container survived the runner; the test proves nothing")
	}

	second := serve()
	// A create that the daemon was still finishing for the killed runner can
	// slip past the start-up sweep; the janitor's first pass (3s) takes it.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		after, left := agentContainers(), []string{}
		for id := range before {
			if after[id] != "" {
				left = append(left, id[:12]+" "+after[id])
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphans survived the restart: %v", left)
		}
	}
	if code, body := sendKey("killed", "!sh touch /workspace/ran-twice"); code != 500 || !strings.Contains(body, runner.KindInterrupted) {
		t.Errorf("the killed message after the restart: %d %s", code, body)
	}
	if _, err := os.Stat(filepath.Join(ws, "ran-twice")); err == nil {
		t.Error("the repeated key ran a message")
	}
	if code, body := send("!sh echo again"); code != 200 || !strings.Contains(body, `exit 0\nagain`) {
		t.Fatalf("next message: %d %s", code, body)
	}
	// SIGTERM while a message runs: that message still gets its reply.
	testutil.Must(t, os.Remove(filepath.Join(ws, "started")))
	type result struct {
		code int
		body string
	}
	inflight := make(chan result, 1)
	go func() {
		code, body := send("!sh touch /workspace/started; sleep 2; echo finished")
		inflight <- result{code, body}
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(ws, "started")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message never started")
		}
	}
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if r := <-inflight; r.code != 200 || !strings.Contains(r.body, `exit 0\nfinished`) {
		t.Errorf("message in flight at SIGTERM: %d %s", r.code, r.body)
	}
	if err := second.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v", err)
	}
	// Removal of the last message's container runs just after its reply;
	// the SIGTERM path waits for it and discards the prestarted one.
	if left := agentContainers(); len(left) != 0 {
		t.Errorf("containers left after SIGTERM: %v", left)
	}
}
