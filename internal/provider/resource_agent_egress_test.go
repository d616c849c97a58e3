package provider

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_egressIdentity: two FETCH agents in one real topology
// (real daemon, the proxy container, an outside namespace as the web).
// Agent A narrows the topology's list to one port; its sibling B keeps
// the whole list. Each message's requests carry that message's
// credential: the proxy's audit names agent and message, the runner's
// message line counts them. From a container on fetchnet, a CONNECT with
// no, a forged, an expired or an ended message's credential gets 407,
// while a live one minted with the agent's real key gets through. A plan
// that widens A past the topology is refused on the attribute.
func TestAccAgent_egressIdentity(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	out := testutil.StartOutside(t, 443, 8443)
	tg, llm, fetch, egress, spec := freeTopology(t, cli)
	idA, idB := "tf-acc-egress-a-"+runID, "tf-acc-egress-b-"+runID
	cleanupAgent(t, cli, idA)
	cleanupAgent(t, cli, idB)
	cfg := func(aAllow string) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "threegate_network" "tg" {
  provider         = meepa
  name             = %[2]q
  llmnet_subnet    = %[5]q
  fetchnet_subnet  = %[6]q
  egressnet_subnet = %[7]q
  firewall         = { enabled = false }
  proxy = {
    image         = %[3]q
    allow         = [%[9]q, %[10]q]
    allow_private = [%[11]q]
  }
}

resource "meepa_agent" "a" {
  agent_id       = %[4]q
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = %[3]q }
  threegate      = { network = threegate_network.tg.id, role = "fetch" }
  egress         = { allow = [%[12]s] }
}

resource "meepa_agent" "b" {
  agent_id       = %[8]q
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = %[3]q }
  threegate      = { network = threegate_network.tg.id, role = "fetch" }
}
`, stateDir, tg, image, idA, llm, fetch, egress, idB, out.Addr(443), out.Addr(8443), out.Prefix, aAllow)
	}
	// https to a banner server: through the proxy the tunnel opens and TLS
	// then fails (the banner is no TLS server); a refusal is the proxy's
	// status, which Go's client reports as the CONNECT's error.
	allowed := regexp.MustCompile(`tls|TLS|EOF|record`)
	fetchAs := func(s *terraform.State, addr, id, target string) (reply, msgID string, err error) {
		tok := s.RootModule().Resources[addr].Primary.Attributes["token"]
		return sendWithID(deploy.LayoutFor(stateDir, id).Socket, tok, agent.OfflineFetchPrefix+"https://"+target+"/")
	}

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg(fmt.Sprintf("%q", out.Addr(443))),
			Check: func(s *terraform.State) error {
				var ids []string
				for _, c := range []struct {
					addr, id, target string
					allowed          bool
				}{
					{"meepa_agent.a", idA, out.Addr(443), true},
					{"meepa_agent.a", idA, out.Addr(8443), false}, // A's own list
					{"meepa_agent.b", idB, out.Addr(8443), true},  // B keeps the topology's
				} {
					reply, msgID, err := fetchAs(s, c.addr, c.id, c.target)
					if err != nil {
						return err
					}
					ids = append(ids, msgID)
					switch {
					case c.allowed && (!allowed.MatchString(reply) || strings.Contains(reply, "Forbidden")):
						return fmt.Errorf("%s fetching %s: want the tunnel open (TLS fails on the banner), got %q", c.id, c.target, reply)
					case !c.allowed && !strings.HasSuffix(reply, ": Forbidden"):
						return fmt.Errorf("%s fetching %s: want the proxy's 403, got %q", c.id, c.target, reply)
					}
				}
				// The proxy's audit names agent and message for each. It
				// writes a line after answering, so the last revoke may
				// reach the log a moment after the reply.
				err := logEventually(cli, topospec.ProxyName(tg), func(audit string) error {
					for i, want := range []struct{ agent, decision string }{{idA, "allow"}, {idA, "deny"}, {idB, "allow"}} {
						if !auditHas(audit, func(r proxy.AuditRecord) bool {
							return r.Agent == want.agent && r.Message == ids[i] && r.Role == agentspec.RoleFetch && r.Decision == want.decision
						}) {
							return fmt.Errorf("no %s audit line for agent %s message %s in:\n%s", want.decision, want.agent, ids[i], audit)
						}
						if !auditHas(audit, func(r proxy.AuditRecord) bool { return r.Message == ids[i] && r.Decision == proxy.DecisionRevoke }) {
							return fmt.Errorf("message %s was not revoked at its end:\n%s", ids[i], audit)
						}
					}
					return nil
				})
				if err != nil {
					return err
				}
				// The runner's message line carries the proxy's counts.
				line := regexp.MustCompile(`message_id=` + ids[1] + ` .* egress_requests=1 egress_refused=1 `)
				err = logEventually(cli, deploy.ContainerName(idA), func(runnerLog string) error {
					if !line.MatchString(runnerLog) {
						return fmt.Errorf("runner log has no egress_requests=1 egress_refused=1 for message %s:\n%s", ids[1], runnerLog)
					}
					return nil
				})
				if err != nil {
					return err
				}
				return checkCredentials(cli, stateDir, idA, ids[0], spec, image, out.Addr(443))
			},
		}, {
			// A cannot widen past the topology: refused at plan, on the entry.
			Config:      cfg(fmt.Sprintf("%q, %q", out.Addr(443), "elsewhere.example.com")),
			PlanOnly:    true,
			ExpectError: regexp.MustCompile(`(?s)Egress Widens The Topology.*egress.allow\[1\].*elsewhere.example.com:443 is not inside`),
		}},
	})
}

// checkCredentials runs CONNECTs from a container on fetchnet with each
// kind of credential for agent id (whose key is in its runner config) to
// target: none, forged, expired and ended (message ended, the one the
// agent just ran) get 407; a live one minted with the same key, 200.
func checkCredentials(cli client.APIClient, stateDir, id, ended string, spec topospec.Spec, image, target string) error {
	raw, err := os.ReadFile(deploy.LayoutFor(stateDir, id).ConfigFile)
	if err != nil {
		return err
	}
	var c agentspec.Config
	if err := json.Unmarshal(raw, &c); err != nil {
		return err
	}
	if c.Egress == nil {
		return fmt.Errorf("runner config of %s has no egress block", id)
	}
	key, err := hex.DecodeString(c.Egress.Key)
	if err != nil {
		return err
	}
	mint := func(k []byte, msg string, expiry time.Time) string {
		cred, err := proxy.Mint(k, proxy.Claims{Agent: id, Role: agentspec.RoleFetch, Message: msg, Expiry: expiry.Unix()})
		if err != nil {
			panic(err)
		}
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(id+":"+cred))
	}
	later := time.Now().Add(time.Minute)
	other := bytes.Repeat([]byte{7}, proxy.KeySize)
	for _, c := range []struct {
		name, auth, want string
	}{
		{"no credential", "", probe.AuthRequired},
		{"forged", mint(other, "forged-1", later), probe.AuthRequired},
		{"expired", mint(key, "expired-1", time.Now().Add(-time.Second)), probe.AuthRequired},
		{"ended message", mint(key, ended, later), probe.AuthRequired},
		{"live", mint(key, "live-1", later), probe.Allowed},
	} {
		got, err := connectFromFetchnet(cli, spec, image, c.auth, target)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if got != c.want {
			return fmt.Errorf("%s credential: CONNECT %s observed %q, want %q", c.name, target, got, c.want)
		}
	}
	return nil
}

// connectFromFetchnet runs the probe's CONNECT from a container on
// fetchnet (as a FETCH sandbox is) and returns what it observed.
func connectFromFetchnet(cli client.APIClient, spec topospec.Spec, image, auth, target string) (observed string, err error) {
	ctx := context.Background()
	via := topology.ProxyURL(spec)
	via = strings.TrimPrefix(via, "http://")
	var env []string
	if auth != "" {
		env = []string{probe.EnvProxyAuthorization + "=" + auth}
	}
	name := fmt.Sprintf("%s-egress-probe-%d", spec.Name, time.Now().UnixNano()%1e6)
	resp, err := cli.ContainerCreate(ctx, &container.Config{
		Image: image, Entrypoint: []string{"/usr/local/bin/agent-runner"}, Env: env, User: topology.ProxyUser,
		Cmd: []string{"probe", "--timeout", "5s", probe.Check{Kind: probe.Connect, Via: via, Target: target}.String()},
	}, &container.HostConfig{NetworkMode: container.NetworkMode(spec.Network(topospec.FetchNet).Name)}, nil, nil, name)
	if err != nil {
		return "", err
	}
	defer func() {
		if rmErr := testutil.Gone(cli.ContainerRemove(context.WithoutCancel(ctx), resp.ID, container.RemoveOptions{Force: true})); rmErr != nil && err == nil {
			err = fmt.Errorf("remove probe: %w", rmErr)
		}
	}()
	if err := cli.ContainerStart(ctx, resp.ID, container.StartOptions{}); err != nil {
		return "", err
	}
	wait, errc := cli.ContainerWait(ctx, resp.ID, container.WaitConditionNotRunning)
	select {
	case <-wait:
	case err := <-errc:
		return "", err
	case <-time.After(30 * time.Second):
		return "", fmt.Errorf("probe did not finish")
	}
	logs, err := containerLog(cli, resp.ID)
	if err != nil {
		return "", err
	}
	var r probe.Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(logs)), &r); err != nil {
		return "", fmt.Errorf("probe output %q: %w", logs, err)
	}
	return r.Observed, nil
}

func containerLog(cli client.APIClient, name string) (string, error) {
	rc, err := cli.ContainerLogs(context.Background(), name, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return "", err
	}
	defer func() { _ = rc.Close() }()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, rc); err != nil {
		return "", err
	}
	return stdout.String() + stderr.String(), nil
}

// logEventually reads container name's log until check passes, for up to
// 10 s: a line written after a reply reaches the log a moment later.
func logEventually(cli client.APIClient, name string, check func(log string) error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		log, err := containerLog(cli, name)
		if err == nil {
			err = check(log)
		}
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func auditHas(log string, match func(proxy.AuditRecord) bool) bool {
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var r proxy.AuditRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil && match(r) {
			return true
		}
	}
	return false
}

// sendWithID posts a message and returns the reply's text and the
// message's id.
func sendWithID(sock, token, text string) (string, string, error) {
	hc, base := deploy.Listener{Unix: sock}.Client(2 * time.Minute)
	body, _ := json.Marshal(map[string]string{"text": text})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	raw, _ := io.ReadAll(resp.Body)
	var r agent.Reply
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &r) != nil {
		return "", "", fmt.Errorf("message: %d %s", resp.StatusCode, raw)
	}
	return r.Reply, resp.Header.Get("X-Message-Id"), nil
}
