// Messages to a running agent, and a look at the container one runs in.

package provider

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// sendMessage posts a message over the runner's unix socket; token "" sends
// no Authorization header.
func sendMessage(sock, token, text string) (agent.Reply, int, error) {
	return sendTo(deploy.Listener{Unix: sock}, token, text)
}

// sendTo posts a message to a runner's listener (unix socket or TCP).
func sendTo(l deploy.Listener, token, text string) (agent.Reply, int, error) {
	var r agent.Reply
	hc, base := l.Client(2 * time.Minute)
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return r, 0, err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &r); err != nil {
			return r, resp.StatusCode, fmt.Errorf("reply %q: %w", raw, err)
		}
	}
	return r, resp.StatusCode, nil
}

// whileMessageRuns sends a message that keeps its container busy for a few
// seconds, finds that container by its labels while it runs (a prestarted
// one waits on stdin and runs no sleep), and hands its inspect to check.
func whileMessageRuns(cli client.APIClient, sock, token, id string, check func(container.InspectResponse, []byte) error) error {
	done := make(chan error, 1)
	go func() {
		reply, code, err := sendMessage(sock, token, "!sh sleep 4; echo slept")
		if err == nil && (code != 200 || !strings.Contains(reply.Reply, "slept")) {
			err = fmt.Errorf("sleep message: %d %+v", code, reply)
		}
		done <- err
	}()
	ctx := context.Background()
	seen := false
	var checkErr error
	deadline := time.Now().Add(30 * time.Second)
	for !seen && time.Now().Before(deadline) {
		list, err := cli.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", engine.LabelManagedBy+"="+engine.ManagedByValue),
			filters.Arg("label", engine.LabelComponent+"="+sandbox.Component),
			filters.Arg("label", sandbox.LabelAgent+"="+id),
		)})
		if err != nil {
			return err
		}
		for _, c := range list {
			top, err := cli.ContainerTop(ctx, c.ID, nil)
			if err != nil || !strings.Contains(fmt.Sprint(top.Processes), "sleep") {
				continue
			}
			ci, raw, err := cli.ContainerInspectWithRaw(ctx, c.ID, false)
			if err != nil {
				return err
			}
			seen = true
			checkErr = check(ci, raw)
			break
		}
		if !seen {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		return err
	}
	if !seen {
		return fmt.Errorf("no running message container seen for %s", id)
	}
	return checkErr
}
