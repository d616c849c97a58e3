package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"
)

// TestAgent_invalidInput: every bad input of the issue is a plan-time
// error on the right attribute, and nothing is created. A unit test: it
// drives the terraform CLI but no daemon, since validation and planning
// never reach Docker.
func TestAgent_invalidInput(t *testing.T) {
	stateDir := t.TempDir()
	long := strings.Repeat("a", 100)
	cases := []struct {
		name, body, attr, want string
	}{
		{"id dotdot", `agent_id = "../x"`, "agent_id", `must be 1-63 characters`},
		{"id space", `agent_id = "A B"`, "agent_id", `must be 1-63 characters`},
		{"id empty", `agent_id = ""`, "agent_id", `must be 1-63 characters`},
		{"id long", `agent_id = "` + long + `"`, "agent_id", `must be 1-63 characters`},
		{"memory unit", `container_mode = { memory_limit = "512x" }`, "container_mode.memory_limit", `Invalid Memory Limit`},
		{"memory zero", `container_mode = { memory_limit = "0" }`, "container_mode.memory_limit", `must be positive`},
		{"memory negative", `container_mode = { memory_limit = "-1m" }`, "container_mode.memory_limit", `Invalid Memory Limit`},
		{"timeout zero", `container_mode = { timeout_seconds = 0 }`, "container_mode.timeout_seconds", `between 1 and 86400`},
		{"timeout huge", `container_mode = { timeout_seconds = 100000 }`, "container_mode.timeout_seconds", `between 1 and 86400`},
		{"network host", `container_mode = { network = "host" }`, "container_mode.network", `host's network namespace`},
		{"relative allow_read", `file_access = { allow_read = ["data"] }`, "file_access.allow_read", `must be absolute`},
		{"relative rw", `file_access = { allow_read_write = ["./x"] }`, "file_access.allow_read_write", `must be absolute`},
		{"relative deny", `file_access = { deny = ["secret"] }`, "file_access.deny", `must be absolute`},
		{"unclean path", `file_access = { allow_read = ["/srv/../etc"] }`, "file_access.allow_read", `must be clean`},
		{"deny with unrestricted", `file_access = { unrestricted = true, deny = ["/srv/secret"] }`, "file_access.deny", `no effect with unrestricted`},
		{"threegate role without network", `threegate = { role = "core" }`, "threegate", `"network" is\s+required`},
		{"threegate bad role", `threegate = { network = "n", role = "boss" }`, "threegate.role", `value must be one of`},
		{"threegate with network", `container_mode = { network = "none" }
  threegate = { network = "n", role = "core" }`, "container_mode.network", `Network With ThreeGate`},
		{"listen public", `runner = { listen = "0.0.0.0:8080" }`, "runner.listen", `only 127.0.0.1`},
		{"no image", `image = ""`, "container_mode.image", `Missing Image`},
		{"user name", `container_mode = { user = "nobody" }`, "container_mode.user", `numeric uid`},
		{"user nobody", `container_mode = { user = "65534:65534" }`, "container_mode.user", `nobody \(65534\) is shared`},
		{"base url no scheme", `llm = { provider = "openai", base_url = "api.openai.com/v1" }`, "llm.base_url", `not an absolute http\(s\) URL`},
		{"image reference", `runner = { image = "Bad Image" }`, "runner.image", `Invalid Image Reference`},
		{"secret name", bound("gh-token", `hosts = ["api.example.com"]`), "secret_bindings", `Rename the secret \(e\.g\. "GH_TOKEN"\)`},
		{"binding on core", strings.Replace(bound("T", `hosts = ["api.example.com"]`), `"fetch"`, `"core"`, 1), "secret_bindings", `a core agent has no way out`},
		{"binding in a container", `container_mode = { enabled = true, network = "none" }
  secrets = { T = "x" }
  secret_bindings = { T = { hosts = ["api.example.com"] } }`, "secret_bindings", `network = "none" has no way out`},
		{"binding without network", `file_access = { allow_network = false }
  secrets = { T = "x" }
  secret_bindings = { T = { hosts = ["api.example.com"] } }`, "secret_bindings", `allow_network is false`},
		{"binding unrestricted", `file_access = { unrestricted = true }
  secrets = { T = "x" }
  secret_bindings = { T = { hosts = ["api.example.com"] } }`, "secret_bindings", `can read the runner's config`},
		{"upstream ca on fetch", bound("T", `hosts = ["api.example.com"]`) + "\n  egress_upstream_ca = " + fmt.Sprintf("%q", testCAPEM), "egress_upstream_ca", `topology's proxy.upstream_ca`},
		{"upstream ca not PEM", `egress_upstream_ca = "x"`, "egress_upstream_ca", `must be PEM certificates`},
		{"binding no secret", `threegate = { network = "n", role = "fetch" }
  secret_bindings = { T = { hosts = ["api.example.com"] } }`, "secret_bindings", `no secret "T" in secrets`},
		{"binding no hosts", bound("T", `hosts = []`), "secret_bindings", `hosts is empty`},
		{"binding bad host", bound("T", `hosts = ["https://api.example.com/"]`), "secret_bindings", `hosts\[0\]`},
		{"binding header Host", bound("T", `hosts = ["api.example.com"], header = "Host"`), "secret_bindings", `belongs to the proxy`},
		{"binding basic and scheme", bound("T", `hosts = ["api.example.com"], basic_user = "bot", scheme = "Bearer"`), "secret_bindings", `set one`},
		{"binding basic other header", bound("T", `hosts = ["api.example.com"], basic_user = "bot", header = "X-Key"`), "secret_bindings", `basic authentication, which is the Authorization header`},
		{"bound value newline", strings.Replace(bound("T", `hosts = ["api.example.com"]`), `"x"`, `"a\nb"`, 1), "secrets", `cannot hold a line break`},
		{"inject secrets", "inject_secrets_env = true", "inject_secrets_env", `Secrets Stay Out Of Sandboxes[\s\S]*secret_bindings`},
		{"token_version negative", `token_version = -1`, "token_version", `at least 0`},
		{"secret name reserved", bound("HOME", `hosts = ["api.example.com"]`), "secret_bindings", `fixed by the sandbox.*Rename the secret \(e\.g\. "SECRET_HOME"\)`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := agentConfigWith(stateDir, tc.body)
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config:      cfg,
					PlanOnly:    true,
					ExpectError: errorOn(tc.attr, tc.want),
				}},
			})
		})
	}
	// Nothing was created by any of them.
	entries, _ := os.ReadDir(stateDir)
	if len(entries) != 0 {
		t.Fatalf("state dir not empty after plan-time errors: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "agents")); !os.IsNotExist(err) {
		t.Fatal("agents dir created")
	}
}

// bound is a fetch agent's body whose secret k (value "x") has the
// binding attrs.
func bound(k, attrs string) string {
	return fmt.Sprintf(`threegate = { network = "n", role = "fetch" }
  secrets = { %[1]q = "x" }
  secret_bindings = { %[1]q = { %[2]s } }`, k, attrs)
}

// errorOn matches an error message (a regexp) and, when attr is set, the
// attribute's path, which every attribute-scoped error of this resource
// names in its detail. A space in want matches any run of white space.
func errorOn(attr, want string) *regexp.Regexp {
	want = strings.ReplaceAll(want, " ", `\s+`) // the CLI wraps a detail's lines
	if attr == "" {
		return regexp.MustCompile(`(?s)` + want)
	}
	name := regexp.QuoteMeta(attr)
	return regexp.MustCompile(`(?s)(` + want + `.*\b` + name + `\b|\b` + name + `\b.*` + want + `)`)
}

// agentConfigWith is a minimal valid agent with one override: an
// "agent_id = " body replaces the id, an "llm = " body the llm, an
// "image = " body the image, anything else is added.
func agentConfigWith(stateDir, body string) string {
	id := `agent_id = "tf-acc-bad"`
	llm := `llm = { provider = "offline" }`
	image := `container_mode = { enabled = false, image = "meepa-test/runner:latest" }`
	extra := body
	switch {
	case strings.HasPrefix(body, "agent_id"):
		id, extra = body, ""
	case strings.HasPrefix(body, "llm = "):
		llm, extra = body, ""
	case strings.HasPrefix(body, "image = "):
		image, extra = "", ""
	case strings.HasPrefix(body, "container_mode"):
		image = ""
		extra = strings.Replace(body, "container_mode = { ", `container_mode = { enabled = false, image = "meepa-test/runner:latest", `, 1)
	}
	return fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  %s
  %s
  %s
  %s
}
`, stateDir, id, llm, image, extra)
}

// TestAgent_unknownInputs: inputs that come from other resources are
// unknown while planning; validation and ModifyPlan must wait for them
// instead of erroring (here the whole container_mode, and an image, come
// from terraform_data outputs). No daemon needed.
func TestAgent_unknownInputs(t *testing.T) {
	stateDir := t.TempDir()
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "terraform_data" "cm" {
  input = { enabled = true, image = "meepa-test/runner:latest" }
}

resource "terraform_data" "img" {
  input = "meepa-test/runner:latest"
}

resource "meepa_agent" "whole" {
  agent_id       = "tf-acc-unknown-cm"
  llm            = { provider = "offline" }
  container_mode = terraform_data.cm.output
}

resource "meepa_agent" "image" {
  agent_id       = "tf-acc-unknown-img"
  llm            = { provider = "offline" }
  container_mode = { enabled = true, image = terraform_data.img.output }
}
`, stateDir),
			PlanOnly:           true,
			ExpectNonEmptyPlan: true,
		}},
	})
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state dir not empty after a plan: %v", entries)
	}
}

// TestAgent_unknownThenInvalid: a container_mode that is unknown at
// plan and turns out to have no image is refused when it becomes known (in
// the plan Terraform makes at apply), before anything is made.
func TestAgent_unknownThenInvalid(t *testing.T) {
	stateDir := t.TempDir()
	resource.UnitTest(t, resource.TestCase{
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "terraform_data" "cm" {
  input = { enabled = true }
}

resource "meepa_agent" "t" {
  agent_id       = "tf-acc-unknown-bad"
  llm            = { provider = "offline" }
  container_mode = terraform_data.cm.output
}
`, stateDir),
			ExpectError: errorOn("container_mode.image", `Missing Image`),
		}},
	})
	if entries, _ := os.ReadDir(stateDir); len(entries) != 0 {
		t.Fatalf("state dir not empty after a refused apply: %v", entries)
	}
}

// TestAgent_modeMustBeStated: a misspelled enabled reaches the provider as
// no enabled at all (Terraform drops the unknown key), which would be host
// mode; the plan refuses it, and a container_mode that leaves the mode
// unsaid, on container_mode.enabled. No daemon needed.
func TestAgent_modeMustBeStated(t *testing.T) {
	stateDir := t.TempDir()
	for name, cm := range map[string]string{
		"typo":     `container_mode = { enabeld = true, image = "meepa-test/runner:latest" }`,
		"unstated": `container_mode = { image = "meepa-test/runner:latest", memory_limit = "512m" }`,
	} {
		t.Run(name, func(t *testing.T) {
			resource.UnitTest(t, resource.TestCase{
				TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
				ProtoV6ProviderFactories: testAccProviders,
				Steps: []resource.TestStep{{
					Config: fmt.Sprintf(`
provider "meepa" {
  state_dir = %q
}

resource "meepa_agent" "t" {
  agent_id       = "tf-acc-mode"
  llm            = { provider = "offline" }
  %s
}
`, stateDir, cm),
					PlanOnly:    true,
					ExpectError: errorOn("container_mode.enabled", `Container Mode Must Say enabled`),
				}},
			})
		})
	}
}

// testCAPEM is a CA certificate (its key thrown away) for plan-time
// checks of the upstream CA attributes, which only parse it.
const testCAPEM = `-----BEGIN CERTIFICATE-----
MIIBkjCCATegAwIBAgIUX6BGrLP6pNuZB+HsWecBJa+/fQMwCgYIKoZIzj0EAwIw
HTEbMBkGA1UEAwwSbWVlcGEgcGxhbi10ZXN0IENBMCAXDTI2MTIwNjAwNTIxMFoY
DzIxMjYxMTEyMDA1MjEwWjAdMRswGQYDVQQDDBJtZWVwYSBwbGFuLXRlc3QgQ0Ew
WTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASdFTYdXBqW+YNq6EUYy884/Tcx+l3h
ZT0Mwkf5s077LV5Im2+pRxpAKRPsed460dC8iyH8yddpSUK8oaC+T+4Mo1MwUTAd
BgNVHQ4EFgQUDY3zUqPHDRoY/oCJplRcOo9jCJMwHwYDVR0jBBgwFoAUDY3zUqPH
DRoY/oCJplRcOo9jCJMwDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNJADBG
AiEA8QntsqbfZWbvriI3BszdPZ8/ABZBsNm5tHHvUrYBnA0CIQDg1fxV1hv3si38
VcwSRj4fMn2MbNdzd/o1JfsIUQttIg==
-----END CERTIFICATE-----
`
