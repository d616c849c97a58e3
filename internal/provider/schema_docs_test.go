package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	dsschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
)

// TestEverySchemaDocumented: every resource and data source the provider
// registers (so a new one is covered without touching this test), and the
// provider itself, have a valid schema with a MarkdownDescription on the
// schema and on every attribute, nested ones included. The docs are
// generated from these texts.
func TestEverySchemaDocumented(t *testing.T) {
	ctx := context.Background()
	p := New("test")()

	var pr provider.SchemaResponse
	p.Schema(ctx, provider.SchemaRequest{}, &pr)
	if pr.Schema.MarkdownDescription == "" {
		t.Error("provider schema has no MarkdownDescription")
	}
	for name, a := range pr.Schema.Attributes {
		if a.GetMarkdownDescription() == "" {
			t.Errorf("provider.%s has no MarkdownDescription", name)
		}
	}

	seen := 0
	for _, f := range p.Resources(ctx) {
		r := f()
		var md resource.MetadataResponse
		r.Metadata(ctx, resource.MetadataRequest{ProviderTypeName: "meepa"}, &md)
		var sr resource.SchemaResponse
		r.Schema(ctx, resource.SchemaRequest{}, &sr)
		if d := sr.Schema.ValidateImplementation(ctx); sr.Diagnostics.HasError() || d.HasError() {
			t.Errorf("%s: %v %v", md.TypeName, sr.Diagnostics, d)
		}
		if sr.Schema.MarkdownDescription == "" {
			t.Errorf("%s has no MarkdownDescription", md.TypeName)
		}
		seen += walkResourceAttrs(t, md.TypeName+".", sr.Schema.Attributes)
	}
	for _, f := range p.DataSources(ctx) {
		d := f()
		var md datasource.MetadataResponse
		d.Metadata(ctx, datasource.MetadataRequest{ProviderTypeName: "meepa"}, &md)
		var sr datasource.SchemaResponse
		d.Schema(ctx, datasource.SchemaRequest{}, &sr)
		if dd := sr.Schema.ValidateImplementation(ctx); sr.Diagnostics.HasError() || dd.HasError() {
			t.Errorf("%s: %v %v", md.TypeName, sr.Diagnostics, dd)
		}
		if sr.Schema.MarkdownDescription == "" {
			t.Errorf("%s has no MarkdownDescription", md.TypeName)
		}
		seen += walkDataSourceAttrs(t, md.TypeName+".", sr.Schema.Attributes)
	}
	// The walk must have reached the nested attributes (agent alone has
	// more than 40), or it proves nothing.
	if seen < 100 {
		t.Errorf("only %d attributes walked", seen)
	}
}

func walkResourceAttrs(t *testing.T, prefix string, attrs map[string]rschema.Attribute) int {
	t.Helper()
	n := 0
	for name, a := range attrs {
		n++
		if a.GetMarkdownDescription() == "" {
			t.Errorf("%s%s has no MarkdownDescription", prefix, name)
		}
		switch nested := a.(type) {
		case rschema.SingleNestedAttribute:
			n += walkResourceAttrs(t, prefix+name+".", nested.Attributes)
		case rschema.ListNestedAttribute:
			n += walkResourceAttrs(t, prefix+name+".", nested.NestedObject.Attributes)
		case rschema.MapNestedAttribute:
			n += walkResourceAttrs(t, prefix+name+".", nested.NestedObject.Attributes)
		case rschema.SetNestedAttribute:
			n += walkResourceAttrs(t, prefix+name+".", nested.NestedObject.Attributes)
		}
	}
	return n
}

func walkDataSourceAttrs(t *testing.T, prefix string, attrs map[string]dsschema.Attribute) int {
	t.Helper()
	n := 0
	for name, a := range attrs {
		n++
		if a.GetMarkdownDescription() == "" {
			t.Errorf("%s%s has no MarkdownDescription", prefix, name)
		}
		switch nested := a.(type) {
		case dsschema.SingleNestedAttribute:
			n += walkDataSourceAttrs(t, prefix+name+".", nested.Attributes)
		case dsschema.ListNestedAttribute:
			n += walkDataSourceAttrs(t, prefix+name+".", nested.NestedObject.Attributes)
		}
	}
	return n
}
