package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/image"
)

func validateString(v validator.String, s string) (bool, string) {
	req := validator.StringRequest{Path: path.Root("x"), ConfigValue: types.StringValue(s)}
	var resp validator.StringResponse
	v.ValidateString(context.Background(), req, &resp)
	if resp.Diagnostics.HasError() {
		return false, resp.Diagnostics.Errors()[0].Summary()
	}
	return true, ""
}

// The hostile table goes through the validator the schema uses, and every
// rejection is an attribute error with a Title Case summary.
func TestPackageNameValidator(t *testing.T) {
	for _, p := range []string{"jq;id", "jq curl", "$(id)", "`id`", "'jq'", "\"jq\"", "jq\nid", "-y", "--force", "jq&&id", "jq|sh", "jq>x"} {
		if ok, summary := validateString(packageName(), p); ok || summary != "Invalid Package Name" {
			t.Errorf("%q: ok=%v summary=%q", p, ok, summary)
		}
	}
	for _, p := range []string{"jq", "curl=7.88.1-10+deb12u5", "libc6:amd64", "py3-pip"} {
		if ok, _ := validateString(packageName(), p); !ok {
			t.Errorf("rejected %q", p)
		}
	}
	for _, n := range []string{"1X", "A-B", "A B", "HOME"} {
		if ok, _ := validateString(envVarName(), n); ok {
			t.Errorf("env name %q accepted", n)
		}
	}
	if ok, _ := validateString(envVarValue(), "a\nRUN id"); ok {
		t.Error("env value with a newline accepted")
	}
}

// package_manager and pull: the description names exactly the values the
// validator accepts, because both come from one list.
func TestOneOfFromOneList(t *testing.T) {
	var resp resource.SchemaResponse
	NewIsolationImageResource().Schema(context.Background(), resource.SchemaRequest{}, &resp)
	check := func(attr string, vals []string, bad string) {
		a := resp.Schema.Attributes[attr].(schema.StringAttribute)
		for _, v := range vals {
			if !strings.Contains(a.MarkdownDescription, "`"+v+"`") {
				t.Errorf("%s description does not name %q", attr, v)
			}
			if ok, _ := validateString(a.Validators[0], v); !ok {
				t.Errorf("%s rejects %q", attr, v)
			}
		}
		if ok, _ := validateString(a.Validators[0], bad); ok {
			t.Errorf("%s accepts %q", attr, bad)
		}
	}
	check("package_manager", stringsOf(image.Managers), "pacman")
	check("pull", stringsOf(image.Pulls), "sometimes")
	for name, a := range resp.Schema.Attributes {
		if a.GetMarkdownDescription() == "" {
			t.Errorf("%s has no MarkdownDescription", name)
		}
	}
}
