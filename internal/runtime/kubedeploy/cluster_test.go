package kubedeploy

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/testkube"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// The acceptance tests run against the project's own cluster:
//
//	export MEEPA_KUBECONFIG=$(flock -o /tmp/meepa-acc.lock scripts/k8s-up.sh)
//	TF_ACC=1 flock -o /tmp/meepa-acc.lock go test ./internal/runtime/kubedeploy/

// workspaceVolume reserves a volume for the agent's workspace claim (the
// test cluster has no provisioner) and returns the volume's name, for
// Workspace.Volume.
func workspaceVolume(t *testing.T, c *kube.Client, agentID string) string {
	t.Helper()
	claim := NamesFor(agentID).Claim
	testkube.ReservedVolume(t, c, claim, DefaultWorkspaceSize)
	return c.Namespace + "-" + claim
}

// send posts a message and returns the HTTP status and the decoded body.
func send(t *testing.T, addr, token, text string) (int, map[string]any) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"text": text})
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/messages", bytes.NewReader(body))
	testutil.Must(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	testutil.Must(t, err)
	defer func() { _ = resp.Body.Close() }()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("reply %d %q: %v", resp.StatusCode, raw, err)
	}
	return resp.StatusCode, out
}
