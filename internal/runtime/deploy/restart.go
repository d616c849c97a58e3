package deploy

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
)

// ChangedInputs names the owner's settings that differ between two
// versions of an agent among those its config hash covers, in the
// meepa_agent schema's terms ("container_mode.memory_limit",
// "llm.max_tokens_per_call", "runner.image"), sorted. A plan that replaces
// a runner says with them why. The secret values (token, API key, secrets)
// are left out: a plan holds only one side of them; their names are
// compared. What the service fills in (workspace, journal) is left out too.
func ChangedInputs(old, new agentspec.Agent) []string {
	a, b := hashInputs(old), hashInputs(new)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(a)) {
		if b[k] != a[k] {
			out = append(out, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(b)) {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// hashInputs flattens what ConfigHash covers of a into dotted names and
// the JSON of their values (a list is one value).
func hashInputs(a agentspec.Agent) map[string]string {
	c := a.Config
	names := slices.Sorted(maps.Keys(c.Secrets))
	c.Token, c.LLM.APIKey, c.Secrets = "", "", nil
	c.Workspace, c.Journal = "", ""
	// The plan knows a threegate role by its topology, role and ask ids;
	// what they resolve to is apply's.
	c.Container.Networks, c.Container.DNS, c.Env, c.Role, c.Ask = nil, nil, nil, "", nil
	c.Egress = c.Egress.WithoutApplied()
	raw, _ := json.Marshal(c)
	var tree map[string]any
	_ = json.Unmarshal(raw, &tree)
	out := map[string]string{}
	flatten("", tree, out)
	meta := map[string]any{
		"runner.deployment": a.Deployment(), "runner.image": a.Meta.RunnerImage, "secrets": names,
		"threegate.network": a.Meta.ThreegateNetwork, "threegate.role": a.Meta.ThreegateRole, "threegate.ask": a.Meta.ThreegateAsk,
	}
	for k, v := range meta {
		j, _ := json.Marshal(v)
		out[k] = string(j)
	}
	return out
}

// schemaNames maps the runner config's names onto the schema's where they
// differ.
var schemaNames = map[string]string{"listen": "runner.listen", "max_steps": "llm.max_steps", "llm_limits": "llm"}

func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok {
		for k, sub := range m {
			if prefix == "" {
				if n, ok := schemaNames[k]; ok {
					k = n
				}
			}
			flatten(strings.TrimPrefix(prefix+"."+k, "."), sub, out)
		}
		return
	}
	j, _ := json.Marshal(v)
	out[prefix] = string(j)
}
