package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// benchGates measures the ThreeGate execution layer (issue 10), in rounds
// like the others and with containers prestarted:
//
//	(i) a TOOL-EXEC message with one shell call (network none);
//	(j) a CORE message that asks the TOOL-EXEC agent once, through the
//	    runners (CORE's container, its runner, TOOL-EXEC's runner and
//	    container, and back).
func benchGates(ctx context.Context, dir string, rounds int) (i, j time.Duration, err error) {
	teID, coreID := agentName("te"), agentName("core")
	// Each agent's containers run as its own user.
	mk := func(name, id string) (string, error) {
		ws := filepath.Join(dir, name)
		if err := os.Mkdir(ws, 0o755); err != nil {
			return "", err
		}
		u := agentspec.AgentUser(id)
		return ws, os.Chown(ws, u.UID, u.GID)
	}
	wsTE, err := mk("gate-te", teID)
	if err != nil {
		return 0, 0, err
	}
	wsCore, err := mk("gate-core", coreID)
	if err != nil {
		return 0, 0, err
	}
	te := &agentspec.Config{
		AgentID: teID, Workspace: wsTE, Listen: "unix://" + filepath.Join(dir, "te.sock"), Token: "bench-te", Role: agentspec.RoleToolExec,
		Container: agentspec.ContainerMode{Enabled: true, Image: runnerImage, TimeoutSeconds: 60, Network: "none", Prestart: true},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
	}
	teR, err := serveRunner(ctx, te, nil)
	if err != nil {
		return 0, 0, err
	}
	defer teR.close()
	core := &agentspec.Config{
		AgentID: coreID, Workspace: wsCore, Listen: "unix://" + filepath.Join(dir, "core.sock"), Token: "bench-core", Role: agentspec.RoleCore,
		Container: agentspec.ContainerMode{Enabled: true, Image: runnerImage, TimeoutSeconds: 60, Network: "none", Prestart: true},
		LLM:       agentspec.LLMConfig{Provider: "offline"},
		Ask:       []agentspec.AskTarget{{AgentID: teID, Role: agentspec.RoleToolExec, Listen: te.Listen, Token: te.Token}},
	}
	coreR, err := serveRunner(ctx, core, nil)
	if err != nil {
		return 0, 0, err
	}
	defer coreR.close()

	var is, js []time.Duration
	for n := 0; n <= rounds; n++ {
		for _, r := range []*benchRunner{teR, coreR} {
			if err := r.waitReady(); err != nil {
				return 0, 0, err
			}
		}
		ti, err := timed(func() error { return teR.sendText("!sh echo 42", "exit 0\n42") })
		if err != nil {
			return 0, 0, fmt.Errorf("(i): %w", err)
		}
		for _, r := range []*benchRunner{teR, coreR} {
			if err := r.waitReady(); err != nil {
				return 0, 0, err
			}
		}
		tj, err := timed(func() error { return coreR.sendText("!ask "+teID+" !sh echo 42", "exit 0\n42") })
		if err != nil {
			return 0, 0, fmt.Errorf("(j): %w", err)
		}
		time.Sleep(150 * time.Millisecond)
		if n == 0 {
			continue // warm-up
		}
		is, js = append(is, ti), append(js, tj)
	}
	return median(is), median(js), nil
}

// sendText sends text and checks the reply holds want.
func (r *benchRunner) sendText(text, want string) error {
	body := fmt.Sprintf(`{"text":%q}`, text)
	req, _ := http.NewRequest(http.MethodPost, "http://runner/v1/messages", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+r.token)
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }() // read-only
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), strings.ReplaceAll(want, "\n", `\n`)) {
		return fmt.Errorf("status %d: %s", resp.StatusCode, out)
	}
	return nil
}
