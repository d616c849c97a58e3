package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/hashicorp/terraform-plugin-testing/compare"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/engine"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

const imgAddr = "meepa_isolation_image.test"

var (
	hexID       = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	sandboxTag  = regexp.MustCompile(`^meepa-sandbox:[0-9a-f]{12}$`)
	isolatedTag = regexp.MustCompile(`^meepagateway-isolated:0\.1\.0-test-meepa-sandbox-[0-9a-f]{12}$`)
)

func fileSHA256(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func imageConfig(base string, packages []string, keep bool) string {
	pk := ""
	if packages != nil {
		pk = fmt.Sprintf("packages = [%s]", quoteList(packages))
	}
	return fmt.Sprintf(`
resource "meepa_isolation_image" "test" {
  base_image = %q
  %s
  env_vars = {
    GREETING = "hello \"quoted\" $HOME world"
    RUN_ID   = %q
  }
  keep_locally = %t
}
`, base, pk, runID, keep)
}

func quoteList(l []string) string {
	q := make([]string, len(l))
	for i, s := range l {
		q[i] = fmt.Sprintf("%q", s)
	}
	return strings.Join(q, ", ")
}

// stateAttrs copies attributes of the image resource out of state, so later
// steps can ask Docker about the images an earlier step made.
func stateAttrs(into map[string]string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		rs, ok := s.RootModule().Resources[imgAddr]
		if !ok {
			return fmt.Errorf("%s not in state", imgAddr)
		}
		for k := range into {
			into[k] = rs.Primary.Attributes[k]
		}
		return nil
	}
}

// checkImagesInDocker asks the daemon that the tags in state name the ids in
// state, and that the isolation image runs and prints the version in state.
func checkImagesInDocker(t *testing.T, cli *client.Client) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		a := s.RootModule().Resources[imgAddr].Primary.Attributes
		for tag, id := range map[string]string{a["image"]: a["image_id"], a["isolated_image"]: a["isolated_image_id"]} {
			if got := imageID(t, cli, tag); got != id {
				return fmt.Errorf("docker has %s at %q, state says %s", got, tag, id)
			}
		}
		out, code, err := runIn(cli, a["isolated_image"], "agent-runner", "version")
		if err != nil || code != 0 {
			return fmt.Errorf("docker run %s agent-runner version: exit %d, %v: %s", a["isolated_image"], code, err, out)
		}
		if v, _ := image.ParseRunnerVersion(out); v != a["runner_version"] {
			return fmt.Errorf("agent-runner version in the image printed %q, state has runner_version %q", out, a["runner_version"])
		}
		return nil
	}
}

func checkGone(t *testing.T, cli *client.Client, attrs map[string]string, keys ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, k := range keys {
			if ref := attrs[k]; ref == "" {
				return fmt.Errorf("no recorded %s", k)
			} else if id := imageID(t, cli, ref); id != "" {
				return fmt.Errorf("%s %s is still on the daemon (%s)", k, ref, id)
			}
		}
		return nil
	}
}

func checkPresent(t *testing.T, cli *client.Client, attrs map[string]string, keys ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, k := range keys {
			if id := imageID(t, cli, attrs[k]); id == "" {
				return fmt.Errorf("%s %q is not on the daemon", k, attrs[k])
			}
		}
		return nil
	}
}

// checkDestroyed asks Docker that every image the test made is gone.
func checkDestroyed(t *testing.T, cli *client.Client, attrSets ...map[string]string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		for _, a := range attrSets {
			if a["isolated_image"] == "" {
				return fmt.Errorf("no image was recorded to check")
			}
			for _, k := range []string{"image", "isolated_image", "isolated_image_id"} {
				if a[k] == "" || strings.HasPrefix(a[k], bareBase) {
					continue
				}
				if id := imageID(t, cli, a[k]); id != "" {
					return fmt.Errorf("after destroy %s %s is still on the daemon", k, a[k])
				}
			}
		}
		return nil
	}
}

// TestAccIsolationImage_lifecycle is the whole life of one image: create,
// an empty second plan, import, a package change (new tag, old gone), the
// same with keep_locally (old kept), removal and a moved tag out of band
// (both rebuilt), a new runner binary (new image, same tag) and destroy.
func TestAccIsolationImage_lifecycle(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureFakeApkBase(t, cli)
	runner := testutil.RunnerBinary(t)

	first := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	kept := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	beforeRunner := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	final := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	cur := map[string]string{"isolated_image": ""}
	// keep_locally left these behind on purpose.
	testutil.Cleanup(t, "remove kept images", func() error {
		return errors.Join(removeImage(cli, kept["isolated_image"]), removeImage(cli, kept["image"]))
	})

	newTag := statecheck.CompareValue(compare.ValuesDiffer())
	keptTag := statecheck.CompareValue(compare.ValuesDiffer())
	sameIsolatedTag := statecheck.CompareValue(compare.ValuesSame())
	newIsolatedID := statecheck.CompareValue(compare.ValuesDiffer())
	newRunner := buildRunnerVersion(t, "0.1.0-newrunner")

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             checkDestroyed(t, cli, first, final),
		Steps: []resource.TestStep{
			{
				Config: imageConfig(base, []string{"jq"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionCreate),
					// The Dockerfile is in the plan, before anything is built.
					plancheck.ExpectKnownValue(imgAddr, tfjsonpath.New("dockerfile"), knownvalue.StringExact(
						"FROM "+base+"\n"+
							"RUN set -e; \\\n"+
							"    if command -v apt-get >/dev/null 2>&1; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*; \\\n"+
							"    elif command -v apk >/dev/null 2>&1; then apk add --no-cache jq; \\\n"+
							"    elif command -v dnf >/dev/null 2>&1; then dnf install -y --setopt=install_weak_deps=False jq && dnf clean all; \\\n"+
							"    else echo 'meepa: no apt-get, apk or dnf in the base image; set package_manager' >&2; exit 1; fi\n"+
							`ENV GREETING="hello \"quoted\" \$HOME world" \`+"\n"+
							`    RUN_ID="`+runID+`"`+"\n")),
					plancheck.ExpectKnownValue(imgAddr, tfjsonpath.New("image"), knownvalue.StringRegexp(sandboxTag)),
					plancheck.ExpectUnknownValue(imgAddr, tfjsonpath.New("isolated_image_id")),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("image"), knownvalue.StringRegexp(sandboxTag)),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("isolated_image"), knownvalue.StringRegexp(isolatedTag)),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("id"), knownvalue.StringRegexp(isolatedTag)),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("image_id"), knownvalue.StringRegexp(hexID)),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("isolated_image_id"), knownvalue.StringRegexp(hexID)),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("content_hash"), knownvalue.StringRegexp(regexp.MustCompile(`^[0-9a-f]{12}$`))),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("runner_sha256"), knownvalue.StringExact(fileSHA256(t, runner))),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("runner_version"), knownvalue.StringRegexp(regexp.MustCompile(`^\S+$`))),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("package_manager"), knownvalue.StringExact("auto")),
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("pull"), knownvalue.StringExact("missing")),
					newTag.AddStateValue(imgAddr, tfjsonpath.New("image")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					stateAttrs(first),
					checkImagesInDocker(t, cli),
					// The image tag and the isolated tag are one scheme.
					func(s *terraform.State) error {
						a := s.RootModule().Resources[imgAddr].Primary.Attributes
						want := "meepagateway-isolated:0.1.0-test-" + strings.ReplaceAll(a["image"], ":", "-")
						if a["isolated_image"] != want || a["image"] != "meepa-sandbox:"+a["content_hash"] {
							return fmt.Errorf("tags %q, %q do not follow from content_hash %q", a["image"], a["isolated_image"], a["content_hash"])
						}
						// The package manager ran, the env var is literal, and the
						// isolation layer's environment is there.
						out, code, err := runIn(cli, a["isolated_image"], "sh", "-c",
							`cat /var/lib/fake-apk/installed; echo "$GREETING"; echo "$HOME $TMPDIR $(pwd)"`)
						want = "jq\nhello \"quoted\" $HOME world\n/workspace /tmp /workspace\n"
						if err != nil || code != 0 || out != want {
							return fmt.Errorf("inside the image: exit %d, %v, output %q, want %q", code, err, out, want)
						}
						return nil
					},
				),
			},
			{
				// A second plan with the same configuration is empty.
				Config: imageConfig(base, []string{"jq"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectEmptyPlan(),
				}},
			},
			{
				ResourceName:      imgAddr,
				ImportState:       true,
				ImportStateVerify: true,
			},
			{
				// A changed package list: new tags, the old images gone.
				Config: imageConfig(base, []string{"jq", "curl"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					newTag.AddStateValue(imgAddr, tfjsonpath.New("image")),
					keptTag.AddStateValue(imgAddr, tfjsonpath.New("image")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					stateAttrs(kept),
					checkGone(t, cli, first, "image", "isolated_image", "isolated_image_id"),
					checkImagesInDocker(t, cli),
				),
			},
			{
				// keep_locally alone changes no image.
				Config: imageConfig(base, []string{"curl", "jq"}, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionUpdate),
				}},
			},
			{
				// With keep_locally the replaced images stay.
				Config: imageConfig(base, []string{"jq", "curl", "git"}, true),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					keptTag.AddStateValue(imgAddr, tfjsonpath.New("image")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					stateAttrs(cur),
					checkPresent(t, cli, kept, "image", "isolated_image", "isolated_image_id"),
					checkImagesInDocker(t, cli),
				),
			},
			{
				// The isolation image removed out of band: the plan rebuilds it.
				PreConfig: func() {
					if err := removeImage(cli, cur["isolated_image"]); err != nil {
						t.Fatal(err)
					}
				},
				Config: imageConfig(base, []string{"jq", "curl", "git"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionCreate),
				}},
				Check: checkImagesInDocker(t, cli),
			},
			{
				// The tag moved to another image out of band: drift, replaced.
				PreConfig: func() {
					if err := cli.ImageTag(context.Background(), testutil.BusyboxImage, cur["isolated_image"]); err != nil {
						t.Fatal(err)
					}
				},
				Config: imageConfig(base, []string{"jq", "curl", "git"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionReplace),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					sameIsolatedTag.AddStateValue(imgAddr, tfjsonpath.New("isolated_image")),
					newIsolatedID.AddStateValue(imgAddr, tfjsonpath.New("isolated_image_id")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					stateAttrs(beforeRunner),
					checkImagesInDocker(t, cli),
					func(*terraform.State) error {
						if imageID(t, cli, testutil.BusyboxImage) == "" {
							return fmt.Errorf("the foreign image was removed")
						}
						return nil
					},
				),
			},
			{
				// A new agent-runner binary: a new isolation image under the
				// same tag, the old one removed.
				PreConfig: func() { t.Setenv("MEEPA_AGENT_RUNNER", newRunner) },
				Config:    imageConfig(base, []string{"jq", "curl", "git"}, false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction(imgAddr, plancheck.ResourceActionReplace),
					plancheck.ExpectKnownValue(imgAddr, tfjsonpath.New("runner_sha256"), knownvalue.StringExact(fileSHA256(t, newRunner))),
				}},
				ConfigStateChecks: []statecheck.StateCheck{
					statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("runner_version"), knownvalue.StringExact("0.1.0-newrunner")),
					sameIsolatedTag.AddStateValue(imgAddr, tfjsonpath.New("isolated_image")),
					newIsolatedID.AddStateValue(imgAddr, tfjsonpath.New("isolated_image_id")),
				},
				Check: resource.ComposeAggregateTestCheckFunc(
					stateAttrs(final),
					checkImagesInDocker(t, cli),
					checkGone(t, cli, beforeRunner, "isolated_image_id"),
				),
			},
		},
	})
}

// TestAccIsolationImage_noPackages layers the runner straight onto the base
// and measures what that layer adds.
func TestAccIsolationImage_noPackages(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureBareBase(t, cli)
	baseID := imageID(t, cli, base)
	tag := image.IsolatedTag("0.1.0-test", base)
	// The reference's '/' and ':' were replaced, so the tag ends in a hash
	// of the raw reference (isolation tags are unique per base).
	if want := regexp.MustCompile(`^meepagateway-isolated:0\.1\.0-test-meepa-test-tf-acc-image-bare-` + runID + `-latest-[0-9a-f]{12}$`); !want.MatchString(tag) {
		t.Fatalf("tag scheme: %s, want %s", tag, want)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			if imageID(t, cli, tag) != "" {
				return fmt.Errorf("%s still there after destroy", tag)
			}
			if imageID(t, cli, base) != baseID {
				return fmt.Errorf("destroy touched the base image %s", base)
			}
			return nil
		},
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "meepa_isolation_image" "test" {
  base_image = %q
  pull       = "never"
}`, base),
			ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
				plancheck.ExpectKnownValue(imgAddr, tfjsonpath.New("isolated_image"), knownvalue.StringExact(tag)),
				plancheck.ExpectKnownValue(imgAddr, tfjsonpath.New("dockerfile"), knownvalue.StringExact("")),
			}},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("image"), knownvalue.StringExact(base)),
				statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("image_id"), knownvalue.StringExact(baseID)),
				statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("isolated_image"), knownvalue.StringExact(tag)),
			},
			Check: resource.ComposeAggregateTestCheckFunc(
				checkImagesInDocker(t, cli),
				func(s *terraform.State) error {
					a := s.RootModule().Resources[imgAddr].Primary.Attributes
					iso, err := cli.ImageInspect(context.Background(), a["isolated_image_id"])
					if err != nil {
						return err
					}
					b, err := cli.ImageInspect(context.Background(), baseID)
					if err != nil {
						return err
					}
					st, err := os.Stat(os.Getenv("MEEPA_AGENT_RUNNER"))
					if err != nil {
						return err
					}
					added := iso.Size - b.Size
					t.Logf("runner layer adds %d bytes to %s (%d -> %d bytes); agent-runner is %d bytes",
						added, base, b.Size, iso.Size, st.Size())
					// The layer is the binary plus a directory entry or two.
					if added < st.Size() || added > st.Size()+64<<10 {
						return fmt.Errorf("runner layer adds %d bytes for a %d-byte binary", added, st.Size())
					}
					if iso.Config.Labels[engine.LabelManagedBy] != engine.ManagedByValue {
						return fmt.Errorf("isolation image lacks ownership labels: %v", iso.Config.Labels)
					}
					return nil
				},
			),
		}},
	})
}

// TestAccIsolationImage_aptInstall installs a real package with apt into a
// debootstrapped Debian base and runs it.
func TestAccIsolationImage_aptInstall(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureDebianBase(t, cli)
	made := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             checkDestroyed(t, cli, made),
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "meepa_isolation_image" "test" {
  base_image      = %q
  packages        = ["jq"]
  package_manager = "apt"
  pull            = "never"
  env_vars        = { RUN_ID = %q }
}`, base, runID),
			Check: resource.ComposeAggregateTestCheckFunc(
				stateAttrs(made),
				checkImagesInDocker(t, cli),
				func(s *terraform.State) error {
					a := s.RootModule().Resources[imgAddr].Primary.Attributes
					out, code, err := runIn(cli, a["isolated_image"], "sh", "-c", `echo '{"a":[1,2]}' | jq -c .a; jq --version`)
					if err != nil || code != 0 || !regexp.MustCompile(`^\[1,2\]\njq-1\.\d`).MatchString(out) {
						return fmt.Errorf("jq in %s: exit %d, %v: %q", a["isolated_image"], code, err, out)
					}
					t.Logf("jq in the isolation image: %s", strings.TrimSpace(out))
					return nil
				},
			),
		}},
	})
}

// errRE matches across terraform's line wrapping: a space is any whitespace.
func errRE(re string) *regexp.Regexp {
	return regexp.MustCompile("(?s)" + strings.ReplaceAll(re, " ", `\s+`))
}

// TestIsolationImage_planErrors: bad input fails at plan time on its
// attribute. A unit test: validation never reaches Docker.
func TestIsolationImage_planErrors(t *testing.T) {
	cfg := func(body string) string {
		return fmt.Sprintf("resource \"meepa_isolation_image\" \"test\" {\n%s\n}\n", body)
	}
	planErr := func(body, re string) resource.TestStep {
		return resource.TestStep{Config: cfg(body), PlanOnly: true, ExpectError: errRE(re)}
	}
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			planErr(`packages = ["jq; rm -rf /"]`, `Invalid Package Name`),
			planErr(`packages = ["$(id)"]`, `Invalid Package Name`),
			planErr(`packages = ["--allow-unauthenticated"]`, `Invalid Package Name`),
			planErr("packages = [\"jq\\ncurl\"]", `Invalid Package Name`),
			planErr(`
  packages        = ["ImageMagick"]
  package_manager = "apt"`, `Invalid Package Name.*"ImageMagick" is not a valid apt package`),
			planErr(`
  packages        = ["jq"]
  package_manager = "none"`, `Packages Without A Package Manager`),
			planErr(`package_manager = "pacman"`, `package_manager.*value must be one of`),
			planErr(`env_vars = { "1BAD" = "x" }`, `Invalid Environment Variable Name`),
			planErr(`env_vars = { HOME = "/root" }`, `HOME is set by the isolation image`),
			planErr("env_vars = { X = \"a\\nRUN touch /pwned\" }", `Invalid Environment Variable Value`),
			planErr(`pull = "sometimes"`, `value must be one of`),
		},
	})
}

// TestAccIsolationImage_errors: build-time faults fail with a clear error
// (bad input fails at plan time: TestIsolationImage_planErrors).
func TestAccIsolationImage_errors(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	fake := ensureFakeApkBase(t, cli)
	foreign := patchedArchBinary(t, testutil.RunnerBinary(t))
	cfg := func(body string) string {
		return fmt.Sprintf("resource \"meepa_isolation_image\" \"test\" {\n%s\n}\n", body)
	}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{
			{
				Config: cfg(`
  base_image = "meepa-test/tf-acc-does-not-exist:1"
  pull       = "never"`),
				ExpectError: errRE(`not on the Docker daemon and pull is "never"`),
			},
			{
				// Only loopback is ever contacted: nothing listens there.
				Config:      cfg(`base_image = "127.0.0.1:1/meepa-test/nope:1"`),
				ExpectError: errRE(`pull base image 127\.0\.0\.1:1/meepa-test/nope:1`),
			},
			{
				Config: cfg(fmt.Sprintf(`
  base_image = %q
  packages   = ["jq", "broken"]`, fake)),
				ExpectError: errRE(`Image Build Failed.*last lines of the build log.*unable to select packages`),
			},
			{
				Config:      fmt.Sprintf("provider \"meepa\" {\n  runner_binary = %q\n}\n", foreign) + cfg(fmt.Sprintf(`base_image = %q`, fake)),
				ExpectError: errRE(`agent-runner architecture does not match the Docker daemon.*exec format error`),
			},
		},
	})
}

// TestAccIsolationImage_unknownBase takes base_image from a value known only
// at apply: the plan leaves the computed attributes unknown, apply fills
// them, and the next plan is empty.
func TestAccIsolationImage_unknownBase(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureFakeApkBase(t, cli)
	made := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             checkDestroyed(t, cli, made),
		Steps: []resource.TestStep{{
			Config: fmt.Sprintf(`
resource "terraform_data" "base" {
  input = %q
}

resource "meepa_isolation_image" "test" {
  base_image = terraform_data.base.output
  packages   = ["jq"]
  env_vars   = { RUN_ID = %q }
}`, base, runID),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{
					plancheck.ExpectUnknownValue(imgAddr, tfjsonpath.New("dockerfile")),
					plancheck.ExpectUnknownValue(imgAddr, tfjsonpath.New("content_hash")),
					plancheck.ExpectUnknownValue(imgAddr, tfjsonpath.New("isolated_image")),
				},
				PostApplyPostRefresh: []plancheck.PlanCheck{plancheck.ExpectEmptyPlan()},
			},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("isolated_image"), knownvalue.StringRegexp(isolatedTag)),
				statecheck.ExpectKnownValue(imgAddr, tfjsonpath.New("dockerfile"), knownvalue.StringExact("FROM "+base+"\n"+
					"RUN set -e; \\\n"+
					"    if command -v apt-get >/dev/null 2>&1; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*; \\\n"+
					"    elif command -v apk >/dev/null 2>&1; then apk add --no-cache jq; \\\n"+
					"    elif command -v dnf >/dev/null 2>&1; then dnf install -y --setopt=install_weak_deps=False jq && dnf clean all; \\\n"+
					"    else echo 'meepa: no apt-get, apk or dnf in the base image; set package_manager' >&2; exit 1; fi\n"+
					`ENV RUN_ID="`+runID+`"`+"\n")),
			},
			Check: resource.ComposeAggregateTestCheckFunc(stateAttrs(made), checkImagesInDocker(t, cli)),
		}},
	})
}

// TestAccIsolationImage_destroyInUse: destroy refuses, naming the container,
// while a container uses the image; once it is gone destroy removes it.
func TestAccIsolationImage_destroyInUse(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	base := ensureBareBase(t, cli)
	made := map[string]string{"image": "", "isolated_image": "", "isolated_image_id": ""}
	name := "tf-acc-image-user-" + runID
	config := fmt.Sprintf(`
resource "meepa_isolation_image" "test" {
  base_image = %q
  env_vars   = { RUN_ID = %q }
}`, base, runID)
	removeUser := func() error {
		return testutil.Gone(cli.ContainerRemove(context.Background(), name, container.RemoveOptions{Force: true}))
	}
	testutil.Cleanup(t, "remove container "+name, removeUser)
	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy:             checkDestroyed(t, cli, made),
		Steps: []resource.TestStep{
			{Config: config, Check: stateAttrs(made)},
			{
				PreConfig: func() {
					if _, err := cli.ContainerCreate(context.Background(), &container.Config{Image: made["isolated_image"], Cmd: []string{"true"}},
						nil, nil, nil, name); err != nil {
						t.Fatal(err)
					}
				},
				Config:      config,
				Destroy:     true,
				ExpectError: errRE(`Isolation Image In Use.*used by container\(s\) ` + name),
			},
			{
				PreConfig: func() {
					if err := removeUser(); err != nil {
						t.Fatal(err)
					}
				},
				Config: config,
				Check:  checkPresent(t, cli, made, "image", "isolated_image"),
			},
		},
	})
}
