package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

func TestParseMemoryLimit(t *testing.T) {
	good := map[string]int64{"512m": 512 << 20, "1g": 1 << 30, "6m": 6 << 20, "7000000": 7000000, "2G": 2 << 30, "65536k": 64 << 20}
	for in, want := range good {
		got, err := ParseMemoryLimit(in)
		if err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"512x", "0", "-1m", "", "1.5g", "5m", "m", "512 m", "512mb", "1e9"} {
		if _, err := ParseMemoryLimit(bad); err == nil {
			t.Errorf("ParseMemoryLimit(%q) accepted", bad)
		}
	}
}

func TestAgentSchemaImplementation(t *testing.T) {
	ctx := context.Background()
	var resp resource.SchemaResponse
	NewAgentResource().Schema(ctx, resource.SchemaRequest{}, &resp)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	if diags := resp.Schema.ValidateImplementation(ctx); diags.HasError() {
		t.Fatal(diags)
	}
	// Every attribute, nested ones included, is documented.
	n := 0
	var walk func(prefix string, attrs map[string]schema.Attribute)
	walk = func(prefix string, attrs map[string]schema.Attribute) {
		for name, a := range attrs {
			n++
			if a.GetMarkdownDescription() == "" {
				t.Errorf("%s%s has no MarkdownDescription", prefix, name)
			}
			if nested, ok := a.(schema.SingleNestedAttribute); ok {
				walk(prefix+name+".", nested.Attributes)
			}
		}
	}
	walk("", resp.Schema.Attributes)
	if n < 40 {
		t.Errorf("only %d attributes walked", n)
	}
	if !resp.Schema.Attributes["llm"].(interface{ IsRequired() bool }).IsRequired() {
		t.Error("llm must be required")
	}
}

func TestParseUser(t *testing.T) {
	if o := parseUser("1000:2000"); o.UID != 1000 || o.GID != 2000 {
		t.Error(o)
	}
	if o := parseUser("1000"); o.UID != 1000 || o.GID != 1000 {
		t.Error(o)
	}
	if o := parseUser(""); o.UID != 65534 {
		t.Error(o)
	}
}
