package provider

import (
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"

	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/docker/go-units"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

// minMemoryBytes is Docker's own lower bound for a container memory limit.
const minMemoryBytes = 6 << 20

// memoryLimitPattern is the spec's size form: a positive integer and an
// optional b/k/m/g unit ("512m", "1g"). Docker accepts more (fractions,
// "MiB"), but the spec's form is what the docs promise, and one form keeps
// config_hash stable.
var memoryLimitPattern = regexp.MustCompile(`^[0-9]+[bkmgBKMG]?$`)

// ParseMemoryLimit returns the bytes of a memory_limit or an error that says
// what is accepted.
func ParseMemoryLimit(s string) (int64, error) {
	if !memoryLimitPattern.MatchString(s) {
		return 0, fmt.Errorf("%q is not a size: write a positive number with an optional unit b, k, m or g, e.g. \"512m\" or \"1g\"", s)
	}
	n, err := units.RAMInBytes(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %v", s, err)
	}
	if n <= 0 {
		return 0, fmt.Errorf("%q: the limit must be positive, e.g. \"512m\"", s)
	}
	if n < minMemoryBytes {
		return 0, fmt.Errorf("%q is below Docker's minimum of 6m", s)
	}
	return n, nil
}

// memoryLimit validates memory_limit with the parser the runner uses.
func memoryLimit() validator.String {
	return stringCheck{
		summary: "Invalid Memory Limit",
		desc:    "a positive size with an optional unit b, k, m or g (e.g. `512m`, `1g`), at least `6m`",
		check: func(s string) error {
			_, err := ParseMemoryLimit(s)
			return err
		},
	}
}

// containerNetwork accepts the spec's two modes and explains why "host" is
// refused, instead of a bare "must be one of".
func containerNetwork() validator.String {
	return stringCheck{
		summary: "Invalid Container Network",
		desc:    "one of " + codeList(containerNetworks),
		check: func(v string) error {
			switch {
			case slices.Contains(containerNetworks, v):
				return nil
			case v == "host":
				return errors.New("\"host\" would put the per-message container in the host's network namespace: the agent could " +
					"reach every service listening on the host (including ones bound to 127.0.0.1) and its traffic would " +
					"bypass Docker's and ThreeGate's isolation. Use \"bridge\" for outbound access, \"none\" for no network, " +
					"or a threegate block for the ThreeGate topology")
			default:
				return fmt.Errorf("%q is not a container network mode; use one of %s", v, codeList(containerNetworks))
			}
		},
	}
}

// listenAddress validates runner.listen with the parser apply uses.
func listenAddress() validator.String {
	return stringCheck{
		summary: "Invalid Listen Address",
		desc:    "`unix:///<absolute path>` or `127.0.0.1:<port>`",
		check: func(s string) error {
			_, err := deploy.ParseListen(s)
			return err
		},
	}
}

// envNameSuggestion turns a name into one agent.EnvNamePattern accepts.
func envNameSuggestion(k string) string {
	b := []byte(strings.ToUpper(k))
	for i, c := range b {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) == 0 || b[0] >= '0' && b[0] <= '9' {
		b = append([]byte{'_'}, b...)
	}
	if agent.CheckToolEnvName(string(b)) != nil {
		// A name the sandbox reserves (HOME, PATH, …).
		return "SECRET_" + string(b)
	}
	return string(b)
}

// userPattern is a numeric uid or uid:gid: the provider must chown the
// workspace to it, and a name would mean something different in every image.
var userPattern = regexp.MustCompile(`^[0-9]{1,10}(:[0-9]{1,10})?$`)

// scoped wraps a string validator so that each error's detail starts with
// the attribute's path. Terraform's text output shows only the resource for
// an error inside a nested attribute; the path in the detail tells the user
// (and tests) which value is at fault.
func scoped(v validator.String) validator.String { return scopedValidator{v} }

type scopedValidator struct{ inner validator.String }

func (s scopedValidator) Description(ctx context.Context) string { return s.inner.Description(ctx) }
func (s scopedValidator) MarkdownDescription(ctx context.Context) string {
	return s.inner.MarkdownDescription(ctx)
}
func (s scopedValidator) ValidateString(ctx context.Context, req validator.StringRequest, resp *validator.StringResponse) {
	var inner validator.StringResponse
	s.inner.ValidateString(ctx, req, &inner)
	for _, d := range inner.Diagnostics {
		detail := d.Detail()
		if !strings.Contains(detail, req.Path.String()) {
			detail = req.Path.String() + ": " + detail
		}
		if d.Severity() == diag.SeverityError {
			resp.Diagnostics.AddAttributeError(req.Path, d.Summary(), detail)
		} else {
			resp.Diagnostics.AddAttributeWarning(req.Path, d.Summary(), detail)
		}
	}
}

// baseURL checks llm.base_url: the LLM clients join their paths onto it, so
// it must be an absolute http(s) URL.
func baseURL() validator.String {
	return stringCheck{
		summary: "Invalid Base URL",
		desc:    "an absolute `http://` or `https://` URL",
		check: func(s string) error {
			if s == "" {
				return nil
			}
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("%q is not an absolute http(s) URL; write e.g. \"https://api.openai.com/v1\" or \"http://llm-gateway:4000/v1\"", s)
			}
			return nil
		},
	}
}

// optionalImageReference is imageReference for an image that may be left
// empty (another attribute then supplies it).
func optionalImageReference() validator.String {
	return stringCheck{
		summary: "Invalid Image Reference",
		desc:    "a Docker image reference",
		check: func(s string) error {
			if s == "" {
				return nil
			}
			return image.ValidateImageRef(s)
		},
	}
}
