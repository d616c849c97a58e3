package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestFunctions runs the provider functions through the real CLI with no
// daemon: the values a module gets at plan, and the errors it gets for
// input the resources would refuse.
func TestFunctions(t *testing.T) {
	const id = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	// The hash the resource's build computes for the same inputs.
	hash := image.ContentHash(id, image.Spec{BaseImage: "x", Packages: []string{"jq", "curl"}, Env: map[string]string{"A": "1"}})
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: `
output "plain" { value = provider::meepa::isolated_image("alpine") }
output "hashed" { value = provider::meepa::isolated_image("registry.example:5000/team/base:v1") }
output "own" { value = provider::meepa::isolated_image("meepa-sandbox:${provider::meepa::content_hash("` + id + `", ["curl", "jq"], "auto", { A = "1" })}") }
output "hash" { value = provider::meepa::content_hash("` + id + `", ["jq", "curl"], "auto", { A = "1" }) }
output "allow" { value = provider::meepa::allowlist(["API.Example.com.", "*.cdn.example.org:8443", "1.2.3.4", "[2001:db8::1]", "api.example.com:443"]) }
`,
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					// Known at plan: that is the point of a function.
					plancheck.ExpectKnownOutputValue("hash", knownvalue.StringExact(hash)),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownOutputValue("plain", knownvalue.StringExact(image.IsolatedTag("0.1.0-test", "alpine"))),
					statecheck.ExpectKnownOutputValue("hashed", knownvalue.StringExact(image.IsolatedTag("0.1.0-test", "registry.example:5000/team/base:v1"))),
					statecheck.ExpectKnownOutputValue("own", knownvalue.StringExact("meepagateway-isolated:0.1.0-test-meepa-sandbox-"+hash)),
					statecheck.ExpectKnownOutputValue("allow", knownvalue.ListExact([]knownvalue.Check{
						knownvalue.StringExact("api.example.com:443"),
						knownvalue.StringExact("*.cdn.example.org:8443"),
						knownvalue.StringExact("1.2.3.4:443"),
						knownvalue.StringExact("[2001:db8::1]:443"),
					})),
				},
			},
			{
				Config:      `output "x" { value = provider::meepa::allowlist(["example.com", "https://example.com/path"]) }`,
				ExpectError: errRE(`allow\[1\]: allow pattern "https://example.com/path"`),
			},
			{
				Config:      `output "x" { value = provider::meepa::allowlist(["*.com"]) }`,
				ExpectError: errRE(`a wildcard needs at least two labels`),
			},
			{
				Config:      `output "x" { value = provider::meepa::content_hash("alpine:3", ["jq"], "auto", {}) }`,
				ExpectError: errRE(`want an image id, sha256: and 64 lowercase hex digits`),
			},
			{
				Config:      `output "x" { value = provider::meepa::content_hash("` + id + `", [], "auto", {}) }`,
				ExpectError: errRE(`no packages and no env_vars`),
			},
			{
				Config:      `output "x" { value = provider::meepa::content_hash("` + id + `", ["jq; rm -rf /"], "auto", {}) }`,
				ExpectError: errRE(`invalid image spec`),
			},
			{
				Config:      `output "x" { value = provider::meepa::content_hash("` + id + `", ["jq"], "yum", {}) }`,
				ExpectError: errRE(`unknown package manager "yum"`),
			},
			{
				Config:      `output "x" { value = provider::meepa::isolated_image("alpine latest") }`,
				ExpectError: errRE(`is not an image reference`),
			},
		},
	})
}

// TestAccFunctionsAgreeWithTheImage builds an image and checks that the
// functions, known at plan, named what the build then made.
func TestAccFunctionsAgreeWithTheImage(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureFakeApkBase(t, cli)
	baseID := imageID(t, cli, base)
	config := imageConfig(base, []string{"jq"}, false) + fmt.Sprintf(`
locals {
  hash = provider::meepa::content_hash(%q, meepa_isolation_image.test.packages, "auto", meepa_isolation_image.test.env_vars)
}
output "content_hash" { value = local.hash }
output "isolated_image" { value = provider::meepa::isolated_image("meepa-sandbox:${local.hash}") }
`, baseID)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: config,
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectKnownOutputValue("content_hash", knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f]{12}$`))),
				plancheck.ExpectKnownOutputValue("isolated_image", knownvalue.StringRegexp(isolatedTag)),
			}},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources[imgAddr].Primary.Attributes
				out := s.RootModule().Outputs
				if out["content_hash"].Value != a["content_hash"] || out["isolated_image"].Value != a["isolated_image"] {
					return fmt.Errorf("functions said %v, %v; the build made %s, %s",
						out["content_hash"].Value, out["isolated_image"].Value, a["content_hash"], a["isolated_image"])
				}
				return nil
			},
		}},
	})
}

// TestFunctionExamples applies the documented examples, so the docs never
// show a call that fails or a result the function does not give.
func TestFunctionExamples(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "functions", name, "function.tf"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{Config: read("isolated_image"), ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("agent_image", knownvalue.StringRegexp(regexp.MustCompile(`^meepagateway-isolated:0\.1\.0-test-registry\.internal-5000-team-agent-base-2026\.11-[0-9a-f]{12}$`))),
			}},
			{Config: read("content_hash"), ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("container_image", knownvalue.StringRegexp(sandboxTag)),
				statecheck.ExpectKnownOutputValue("isolated_image", knownvalue.StringRegexp(isolatedTag)),
			}},
			{Config: read("allowlist"), ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownOutputValue("allow", knownvalue.ListExact([]knownvalue.Check{
					knownvalue.StringExact("api.github.com:443"),
					knownvalue.StringExact("*.pythonhosted.org:443"),
					knownvalue.StringExact("pypi.org:443"),
				})),
			}},
		},
	})
}
