package provider

import (
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/fault"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topology"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/topospec"
)

// planRun is what this provider instance has planned so far in the
// current Terraform run. Terraform starts a provider process per plan or
// apply walk and plans every resource of the configuration in it, so two
// resources that are each valid alone but clash with each other meet
// here, whichever order Terraform plans them in: the one planned second
// sees the first. Without it such a pair passes plan and the second one
// fails at apply, after the first was made.
type planRun struct {
	mu         sync.Mutex
	topologies map[string]topospec.Spec // by topology name
	agents     map[string]plannedAgent  // by agent_id
}

// plannedAgent is what another agent's plan needs of an agent: where it
// stands in ThreeGate and whom it asks.
type plannedAgent struct {
	topology, role string
	ask            []string
}

func newPlanRun() *planRun {
	return &planRun{topologies: map[string]topospec.Spec{}, agents: map[string]plannedAgent{}}
}

// topology records the planned spec and returns the overlaps of its
// subnets with the other topologies planned in this run.
func (r *planRun) topology(s topospec.Spec) fault.List {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.topologies[s.Name] = s
	var ps fault.List
	for _, name := range slices.Sorted(maps.Keys(r.topologies)) {
		if name != s.Name {
			ps = append(ps, topology.Overlaps(s, r.topologies[name])...)
		}
	}
	return ps
}

// planned is the topology called name as planned in this run.
func (r *planRun) planned(name string) (topospec.Spec, bool) {
	if r == nil {
		return topospec.Spec{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.topologies[name]
	return s, ok
}

// agent records a planned agent and checks the asks between it and the
// agents planned before it, both ways: its own ask targets (attributed to
// its threegate.ask) and the core agents that ask it (attributed to its
// threegate). A target not planned in this run, nor deployed, is left to
// apply, which waits for it.
func (r *planRun) agent(id string, a plannedAgent) (asks, askedBy []string) {
	if r == nil {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.agents[id] = a
	for _, target := range a.ask {
		if t, ok := r.agents[target]; ok {
			if why := askMismatch(a, t); why != "" {
				asks = append(asks, fmt.Sprintf("ask %q: %s", target, why))
			}
		}
	}
	for _, other := range slices.Sorted(maps.Keys(r.agents)) {
		o := r.agents[other]
		if other == id || !slices.Contains(o.ask, id) {
			continue
		}
		if why := askMismatch(o, a); why != "" {
			askedBy = append(askedBy, fmt.Sprintf("core agent %q asks this agent, but %s", other, why))
		}
	}
	return asks, askedBy
}

// askMismatch says why the core agent c may not ask t, a target planned in
// the same run, with the words ResolveAsk uses for a deployed target; ""
// when it may.
func askMismatch(c, t plannedAgent) string {
	if err := agentspec.CheckAskRole(t.role); err != nil {
		return err.Error()
	}
	if t.topology != c.topology {
		return fmt.Sprintf("it is not in the threegate_network %q (it is planned in %q)", c.topology, orNoTopology(t.topology))
	}
	return ""
}

func orNoTopology(s string) string {
	if s == "" {
		return "no topology"
	}
	return s
}
