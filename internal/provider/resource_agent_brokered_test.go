package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_brokeredSecret: a FETCH agent in a real topology binds a
// secret to one HTTPS API in the outside namespace (its own CA, trusted by
// the proxy through upstream_ca). Each message's fetch of the API arrives
// there with the real value in Authorization, while the reply (the API
// echoes its headers) shows only a placeholder, a different one each
// message; the proxy's audit names the brokered secret. A second HTTPS
// API, allowed but not bound, is tunnelled untouched: the sandbox meets
// its real certificate, which it does not trust, and the API sees
// nothing. The value is in no reply, no log of the runner or the proxy,
// and no container's inspect.
func TestAccAgent_brokeredSecret(t *testing.T) {
	cli, image, stateDir, out, bound, unbound := brokerFixture(t)
	tg, llm, fetch, egress, _ := freeTopology(t, cli)
	id := "tf-acc-brokered-" + runID
	cleanupAgent(t, cli, id)
	const secret = "s3cret-brokered-value-5b1e"
	cfg := fmt.Sprintf(`
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
    allow         = [%[8]q, %[9]q]
    allow_private = [%[10]q]
    upstream_ca   = %[11]q
  }
}

resource "meepa_agent" "fetch" {
  agent_id        = %[4]q
  llm             = { provider = "offline" }
  container_mode  = { enabled = true, image = %[3]q }
  threegate       = { network = threegate_network.tg.id, role = "fetch" }
  secrets         = { API_TOKEN = %[12]q }
  secret_bindings = { API_TOKEN = { hosts = [%[8]q], scheme = "Bearer" } }
}
`, stateDir, tg, image, id, llm, fetch, egress, out.Addr(8443), out.Addr(9443), out.Prefix, bound.CAPEM, secret)

	check := func(s *terraform.State) error {
		tok := s.RootModule().Resources["meepa_agent.fetch"].Primary.Attributes["token"]
		fetchURL := func(url string) (string, string, error) {
			return sendWithID(deploy.LayoutFor(stateDir, id).Socket, tok, agent.OfflineFetchPrefix+url)
		}
		msgs, _, err := checkBrokered(fetchURL, out, bound, unbound, secret)
		if err != nil {
			return err
		}
		// The proxy's audit names the brokered secret on both messages,
		// and no log holds the value.
		err = logEventually(cli, topospec.ProxyName(tg), func(audit string) error {
			for _, m := range msgs {
				if !auditHas(audit, func(r proxy.AuditRecord) bool {
					return r.Agent == id && r.Message == m && len(r.Brokered) == 1 && r.Brokered[0] == "API_TOKEN"
				}) {
					return fmt.Errorf("no audit line brokering API_TOKEN for message %s in:\n%s", m, audit)
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range []string{topospec.ProxyName(tg), deploy.ContainerName(id)} {
			log, err := containerLog(cli, name)
			if err != nil {
				return err
			}
			if strings.Contains(log, secret) {
				return fmt.Errorf("the log of %s holds the secret", name)
			}
		}
		return noContainerHolds(cli, id, secret)
	}
	testBrokered(t, cfg, check)
}

// TestAccAgent_brokeredSecretHostMode: the same for a host-mode agent
// (the runner container runs each message as a Landlock-restricted child
// that shares its network), whose runner brokers with a broker of its
// own, trusting the API's CA through egress_upstream_ca. The shell runs
// an ordinary Go client that sends $API_TOKEN, a placeholder; the
// runner's log has the broker's audit line naming the secret, and never
// the value.
func TestAccAgent_brokeredSecretHostMode(t *testing.T) {
	cli, image, stateDir, out, bound, unbound := brokerFixture(t)
	id := "tf-acc-brokered-host-" + runID
	cleanupAgent(t, cli, id)
	// The shell's client: a Go program, as an operator's tools would be,
	// which honours HTTPS_PROXY and SSL_CERT_FILE. Mounted read-only.
	tools := t.TempDir()
	if err := os.Chmod(tools, 0o755); err != nil {
		t.Fatal(err)
	}
	httpget := filepath.Join(tools, "httpget")
	if err := os.WriteFile(httpget, testutil.HTTPGet(t), 0o755); err != nil {
		t.Fatal(err)
	}
	get := httpgetCommand(httpget)
	const secret = "s3cret-host-brokered-9c2d"
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "meepa_agent" "h" {
  agent_id           = %[2]q
  llm                = { provider = "offline" }
  runner             = { image = %[3]q }
  file_access        = { allow_network = true, allow_read = [%[7]q] }
  secrets            = { API_TOKEN = %[4]q }
  secret_bindings    = { API_TOKEN = { hosts = [%[5]q], scheme = "Bearer" } }
  egress_upstream_ca = %[6]q
}
`, stateDir, id, image, secret, out.Addr(8443), bound.CAPEM, tools)

	check := func(s *terraform.State) error {
		tok := s.RootModule().Resources["meepa_agent.h"].Primary.Attributes["token"]
		send := func(text string) (string, string, error) {
			return sendWithID(deploy.LayoutFor(stateDir, id).Socket, tok, text)
		}
		fetchURL := func(url string) (string, string, error) {
			return send("!sh " + get(url, "Authorization: Bearer $API_TOKEN"))
		}
		msgs, placeholders, err := checkBrokered(fetchURL, out, bound, unbound, secret)
		if err != nil {
			return err
		}
		if err := sandboxHolds(send, get, out, bound, secret, placeholders[0]); err != nil {
			return err
		}
		return runnerBrokered(cli, id, msgs, secret)
	}
	testBrokered(t, cfg, check)
}

// TestAccAgent_brokeredSecretBridge: the same for a network = "bridge"
// agent's per-message containers. Their tools reach the runner's broker
// through its socket in the relay's directory, which agent-run serves on
// a loopback port; the container keeps its direct route, where a
// placeholder is worth nothing. The tools' client is curl, copied into the
// workspace with its libraries.
func TestAccAgent_brokeredSecretBridge(t *testing.T) {
	cli, image, stateDir, out, bound, unbound := brokerFixture(t)
	id := "tf-acc-brokered-br-" + runID
	cleanupAgent(t, cli, id)
	const secret = "s3cret-bridge-brokered-41fa"
	cfg := fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "meepa_agent" "b" {
  agent_id           = %[2]q
  llm                = { provider = "offline" }
  container_mode     = { enabled = true, image = %[3]q, network = "bridge" }
  secrets            = { API_TOKEN = %[4]q }
  secret_bindings    = { API_TOKEN = { hosts = [%[5]q], scheme = "Bearer" } }
  egress_upstream_ca = %[6]q
}
`, stateDir, id, image, secret, out.Addr(8443), bound.CAPEM)

	check := func(s *terraform.State) error {
		a := s.RootModule().Resources["meepa_agent.b"].Primary.Attributes
		// The tools' client here is curl, copied into the workspace with
		// its libraries.
		get := curlCommand(testutil.CurlKit(t, filepath.Join(a["workspace_path"], "curlkit"), "/workspace/curlkit"))
		send := func(text string) (string, string, error) {
			return sendWithID(deploy.LayoutFor(stateDir, id).Socket, a["token"], text)
		}
		fetchURL := func(url string) (string, string, error) {
			return send("!sh " + get(url, "Authorization: Bearer $API_TOKEN"))
		}
		msgs, placeholders, err := checkBrokered(fetchURL, out, bound, unbound, secret)
		if err != nil {
			return err
		}
		if err := sandboxHolds(send, get, out, bound, secret, placeholders[0]); err != nil {
			return err
		}
		// Past the broker, on the container's own route, the placeholder
		// is all a tool can send.
		reply, _, err := send("!sh HTTPS_PROXY= https_proxy= " + get("https://"+out.Addr(8443)+"/", "Authorization: Bearer $API_TOKEN"))
		if err != nil {
			return err
		}
		if !untrusted.MatchString(reply) {
			return fmt.Errorf("direct route: want the API's own certificate, which the sandbox does not trust, got %q", reply)
		}
		return runnerBrokered(cli, id, msgs, secret)
	}
	testBrokered(t, cfg, check)
}

// httpClient is a sandbox's HTTP client: the shell command that GETs url with
// one header.
type httpClient func(url, header string) string

// httpgetCommand is testutil.HTTPGet at path.
func httpgetCommand(path string) httpClient {
	return func(url, header string) string { return fmt.Sprintf(`%s %s "%s"`, path, url, header) }
}

// curlCommand is curl run as command (testutil.CurlKit's).
func curlCommand(command string) httpClient {
	return func(url, header string) string { return fmt.Sprintf(`%s -sS -H "%s" %s`, command, header, url) }
}

// untrusted is how Go and curl say that a server's certificate chains to
// no CA they trust.
var untrusted = regexp.MustCompile(`certificate signed by unknown authority|unable to get local issuer certificate`)

// sandboxHolds looks for the value where a tool could: its environment,
// every process's environment and command line it can read, the
// workspace, /tmp and the relay's directory; and replays an earlier
// message's placeholder, which the broker must pass through unchanged.
func sandboxHolds(send func(text string) (string, string, error), get httpClient, out *testutil.Outside, bound *testutil.TLSAPI, secret, old string) error {
	// The value is never written whole into a command line (the sweep's
	// own would match): the shell joins two halves into the pattern,
	// which grep reads from a here-document on fd 3.
	half := len(secret) / 2
	sweep := fmt.Sprintf(`A='%s'; B='%s'
echo "env=$API_TOKEN"
for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done | tr '\0' '\n' | grep -cF -f /dev/fd/3 3<<E
$A$B
E
grep -rlF -f /dev/fd/3 /workspace /tmp /run/meepa 3<<E 2>/dev/null | wc -l
$A$B
E`, secret[:half], secret[half:])
	reply, _, err := send("!sh " + sweep)
	if err != nil {
		return err
	}
	if !strings.Contains(reply, "env=meepa-placeholder-api_token-") || strings.Contains(reply, secret) || !regexp.MustCompile(`\n0\n\s*0\s*$`).MatchString(reply) {
		return fmt.Errorf("the sandbox's sweep for the value: want the placeholder in $API_TOKEN and 0 and 0 found, got %q", reply)
	}
	n := len(bound.Seen())
	if _, _, err := send("!sh " + get("https://"+out.Addr(8443)+"/", "Authorization: Bearer "+old)); err != nil {
		return err
	}
	got := bound.Seen()
	if len(got) != n+1 || got[n].Get("Authorization") != "Bearer "+old {
		return fmt.Errorf("an earlier message's placeholder, replayed: the API saw %d new requests, want one with the placeholder as sent", len(got)-n)
	}
	return nil
}

// brokerFixture is what the runner-broker tests share: the daemon, the
// runner image, a state directory, the outside namespace and its two
// HTTPS APIs (8443 to bind, 9443 to leave unbound).
func brokerFixture(t *testing.T) (cli *client.Client, image, stateDir string, out *testutil.Outside, bound, unbound *testutil.TLSAPI) {
	testutil.RequireDocker(t)
	cli = testutil.Docker(t)
	image = testutil.EnsureRunnerImage(t, cli)
	out = testutil.StartOutside(t)
	return cli, image, t.TempDir(), out, out.ServeTLSAPI(t, 8443), out.ServeTLSAPI(t, 9443)
}

// testBrokered applies cfg and runs check.
func testBrokered(t *testing.T, cfg string, check resource.TestCheckFunc) {
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps:                    []resource.TestStep{{Config: cfg, Check: check}},
	})
}

// runnerBrokered checks the runner's side of messages msgs of agent id:
// its broker's audit line naming API_TOKEN for each, the value in no log
// line and no container's inspect.
func runnerBrokered(cli client.APIClient, id string, msgs []string, secret string) error {
	err := logEventually(cli, deploy.ContainerName(id), func(log string) error {
		for _, m := range msgs {
			if !hasLine(log, "egress audit", m, "API_TOKEN") {
				return fmt.Errorf("no broker audit line naming API_TOKEN for message %s in:\n%s", m, log)
			}
		}
		if strings.Contains(log, secret) {
			return errors.New("the runner's log holds the secret")
		}
		return nil
	})
	if err != nil {
		return err
	}
	return noContainerHolds(cli, id, secret)
}

// hasLine says whether one line of log holds every one of parts.
func hasLine(log string, parts ...string) bool {
	for line := range strings.SplitSeq(log, "\n") {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

// noContainerHolds checks that no container of agent id (its runner and
// its prestarted sandbox) shows value anywhere in its inspect.
func noContainerHolds(cli interface {
	ContainerList(context.Context, container.ListOptions) ([]container.Summary, error)
	ContainerInspect(context.Context, string) (container.InspectResponse, error)
}, id, value string) error {
	ctx := context.Background()
	list, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("name", id))})
	if err != nil {
		return err
	}
	if len(list) == 0 {
		return fmt.Errorf("no container of %s to inspect", id)
	}
	for _, c := range list {
		info, err := cli.ContainerInspect(ctx, c.ID)
		if cerrdefs.IsNotFound(err) {
			continue // a used sandbox, removed since the list
		}
		if err != nil {
			return err
		}
		raw, _ := json.Marshal(info)
		if strings.Contains(string(raw), value) {
			return fmt.Errorf("container %s shows the secret in its inspect", strings.Join(c.Names, ","))
		}
	}
	return nil
}

// checkBrokered makes two fetches of the bound API (port 8443 of out) and
// one of the unbound one (9443), each a message, and checks what the APIs
// saw and the replies show: the value at the bound API each time, only a
// placeholder (a new one per message) in the replies, nothing at the
// unbound API, whose real certificate the sandbox refuses. It returns the
// two bound messages' ids and placeholders.
func checkBrokered(fetch func(url string) (reply, msgID string, err error), out *testutil.Outside, bound, unbound *testutil.TLSAPI, secret string) (msgs, placeholders []string, err error) {
	placeholder := regexp.MustCompile(`Authorization: Bearer (\S+)`)
	var seen []string
	for i := range 2 {
		reply, msgID, err := fetch("https://" + out.Addr(8443) + "/")
		if err != nil {
			return nil, nil, err
		}
		msgs = append(msgs, msgID)
		m := placeholder.FindStringSubmatch(reply)
		switch {
		case strings.Contains(reply, secret):
			return nil, nil, fmt.Errorf("message %d: the reply holds the secret: %q", i, reply)
		case m == nil || !strings.HasPrefix(m[1], "meepa-placeholder-api_token-"):
			return nil, nil, fmt.Errorf("message %d: want the API's echo of a placeholder, got %q", i, reply)
		}
		seen = append(seen, m[1])
	}
	if seen[0] == seen[1] {
		return nil, nil, fmt.Errorf("two messages got the same placeholder %s", seen[0])
	}
	got := bound.Seen()
	if len(got) != 2 {
		return nil, nil, fmt.Errorf("the bound API saw %d requests, want 2", len(got))
	}
	for i, h := range got {
		if a := h.Get("Authorization"); a != "Bearer "+secret {
			return nil, nil, fmt.Errorf("request %d reached the bound API with Authorization %q, want the value", i, a)
		}
		if h.Get("Proxy-Authorization") != "" {
			return nil, nil, fmt.Errorf("request %d reached the API with the egress credential", i)
		}
	}
	// Allowed but not bound: an opaque tunnel. The sandbox trusts the
	// agent's CA and the system's, not the API's, so TLS fails, and no
	// request (let alone a header) reaches the API.
	reply, _, err := fetch("https://" + out.Addr(9443) + "/")
	if err != nil {
		return nil, nil, err
	}
	if !untrusted.MatchString(reply) {
		return nil, nil, fmt.Errorf("unbound host: want the real server's certificate refused in the sandbox, got %q", reply)
	}
	if n := len(unbound.Seen()); n != 0 {
		return nil, nil, fmt.Errorf("the unbound API saw %d requests", n)
	}
	return msgs, seen, nil
}
