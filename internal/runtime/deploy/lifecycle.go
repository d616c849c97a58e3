package deploy

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/docker/docker/client"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/workspace"
)

func reportedBy(h Health) agentspec.Reported {
	return agentspec.Reported{LandlockABI: h.Int("landlock_abi"), AgentUID: h.Int("agent_uid")}
}

// Apply makes the agent real: the workspace (never destroying the agent's
// work), the runner's files, and, for a container deployment, the runner
// container when redeploy is set or there is no prior. prior is nil for a
// new agent. A runner that fails to come up is removed, and so are a new
// agent's runner files (they hold its secrets).
func (s *Service) Apply(ctx context.Context, a agentspec.Agent, prior *agentspec.Prior, redeploy bool) (agentspec.Applied, error) {
	id := a.Config.AgentID
	out := agentspec.Applied{Token: a.Config.Token, Reported: agentspec.NotReported}
	if out.Token == "" {
		tok, err := agentspec.NewToken()
		if err != nil {
			return out, stepErr(agentspec.StepToken, "", "generating the runner's bearer token", err)
		}
		out.Token = tok
		a.Config.Token = tok
	}
	listener, err := ParseListen(a.Config.Listen)
	if a.Config.Listen == "" {
		listener, err = Listener{Unix: s.Layout(id).Socket}, nil
	}
	if err == nil {
		err = ListenUnreachable(a.Config, a.Deployment(), a.Meta.ThreegateNetwork != "", listener)
	}
	if err != nil {
		return out, stepErr(agentspec.StepListen, "listen", "the listen address", err)
	}
	s.complete(&a, listener)
	cli, err := s.resolve(ctx, &a)
	if err != nil {
		return out, err
	}
	warnings, key, err := s.writeFiles(&a, listener, prior != nil)
	out.Warnings = warnings
	if err != nil {
		return out, err
	}
	out.WorkspacePath = a.Config.Workspace
	out.Endpoint = listener.Endpoint()
	out.ConfigHash = s.hash(a, key)

	if a.Deployment() != agentspec.ModeContainer {
		// An operator runs the service; a container left from an earlier
		// container deployment would be a second runner, so that one case
		// needs the daemon. An agent that was always external, in host
		// mode, needs none.
		if cli == nil && prior != nil && prior.Deployment == agentspec.ModeContainer {
			if cli, err = s.docker(ctx); err != nil {
				return out, err
			}
		}
		if cli != nil {
			if err := s.removeRunner(ctx, cli, id, agentspec.StopTimeout(a.Config)); err != nil {
				return out, err
			}
		}
		out.RunnerStatus = agentspec.StatusExternal
		return out, nil
	}
	if !redeploy && prior != nil {
		out.RunnerStatus, out.RunnerContainerID, out.Reported = prior.RunnerStatus, prior.RunnerContainerID, prior.Reported
		if reloadsImage(a) {
			return out, s.reloadImage(ctx, cli, a, listener)
		}
		return out, nil
	}
	err = s.deployRunner(ctx, cli, a, listener, out.ConfigHash, prior == nil, &out)
	return out, err
}

// resolve connects to the daemon when the agent needs it, checks the OCI
// runtime and resolves a threegate role into networks and env.
func (s *Service) resolve(ctx context.Context, a *agentspec.Agent) (client.APIClient, error) {
	cm := a.Config.Container
	if a.Deployment() != agentspec.ModeContainer && !cm.Enabled && a.Meta.ThreegateNetwork == "" {
		return nil, nil
	}
	cli, err := s.docker(ctx)
	if err != nil {
		return nil, err
	}
	if cm.Enabled && cm.Runtime != "" && cm.Runtime != agentspec.DefaultRuntime {
		if err := CheckRuntime(ctx, cli, cm.Runtime); err != nil {
			return nil, stepErr(agentspec.StepRuntime, "container_mode.runtime", "checking the OCI runtime", err)
		}
	}
	if a.Meta.ThreegateNetwork != "" {
		r, err := resolveThreegate(ctx, cli, a.Meta.ThreegateNetwork, a.Meta.ThreegateRole)
		if err != nil {
			return nil, stepErr(agentspec.StepThreegate, "threegate", "resolving the threegate role", err)
		}
		nets := r.Networks
		a.Config.Container.Network = ""
		a.Config.Container.Networks = nets
		a.Config.Container.DNS = agentspec.AddrsOf(r.DNS)
		a.Config.Env = r.Env
		// The runner enforces the role's tools and TOOL-EXEC's no-network
		// sandbox; a core agent gets the runners it may ask.
		a.Config.Role = a.Meta.ThreegateRole
		eg, err := egressFor(ctx, cli, a.Meta.ThreegateNetwork, r.Env["http_proxy"], &a.Config)
		if err != nil {
			return nil, stepErr(agentspec.StepThreegate, "threegate", "preparing the agent's egress identity", err)
		}
		a.Config.Egress = eg
		if len(a.Meta.ThreegateAsk) > 0 {
			targets, err := agentspec.WaitForAsk(ctx, agentspec.AskWait, func() ([]agentspec.AskTarget, error) {
				return ResolveAsk(s.o.StateDir, a.Meta.ThreegateNetwork, a.Meta.ThreegateAsk)
			})
			if err != nil {
				return nil, stepErr(agentspec.StepAsk, "threegate.ask", "resolving the agents to ask", err)
			}
			a.Config.Ask = targets
		}
		s.log.Debug("threegate role resolved", "agent_id", a.Config.AgentID, "topology", a.Meta.ThreegateNetwork,
			"role", a.Meta.ThreegateRole, "networks", nets, "ask", a.Meta.ThreegateAsk)
	}
	if err := s.ensureBridge(ctx, cli, *a); err != nil {
		return nil, err
	}
	return cli, nil
}

// writeFiles makes the workspace and writes the runner's files: the config
// (with the listen address the runner itself takes) and agent.json. It
// returns the hash key.
func (s *Service) writeFiles(a *agentspec.Agent, l Listener, existed bool) ([]agentspec.Warning, []byte, error) {
	var warnings []agentspec.Warning
	id, wsPath := a.Config.AgentID, a.Config.Workspace
	if err := s.CheckAgentUser(a.Config); err != nil {
		return warnings, nil, err
	}
	owner, warn := WorkspaceOwner(a.Config)
	if warn != "" {
		warnings = append(warnings, agentspec.Warning{Topic: "workspace ownership", Detail: warn})
	}
	if err := s.holdStateDirs(); err != nil {
		return warnings, nil, stepErr(agentspec.StepWorkspace, "", "closing the state directory to others", err)
	}
	prevOwner, hadOwner := ownerOf(wsPath)
	res, err := workspace.Ensure(workspace.Spec{Dir: wsPath, Soul: a.Meta.Soul, Memory: a.Meta.Memory, ManageSoul: a.Meta.ManageSoul, Owner: owner})
	if err != nil {
		return warnings, nil, stepErr(agentspec.StepWorkspace, "", "making the workspace "+wsPath, err)
	}
	if a.Config.Container.Enabled && owner != nil && hadOwner && prevOwner != *owner {
		// The sandbox user changed (an older release's nobody, or another
		// container_mode.user): everything the agent had must be the new
		// user's, or it could not write its own files, and the old user
		// (nobody) would keep them. No link is followed.
		if err := sandbox.ChownTree(wsPath, owner.UID, owner.GID); err != nil {
			return warnings, nil, stepErr(agentspec.StepWorkspace, "container_mode.user", "handing the workspace "+wsPath+" to its sandbox user", err)
		}
		s.log.Info("workspace taken over by the sandbox user", "agent_id", id, "path", wsPath,
			"from", fmt.Sprintf("%d:%d", prevOwner.UID, prevOwner.GID), "to", fmt.Sprintf("%d:%d", owner.UID, owner.GID))
	}
	if res.Created {
		who := "unchanged"
		if owner != nil {
			who = fmt.Sprintf("%d:%d", owner.UID, owner.GID)
		}
		s.log.Info("workspace created", "agent_id", id, "path", wsPath, "owner", who)
	}
	if res.SoulWritten {
		s.log.Info("workspace file written", "agent_id", id, "path", wsPath, "file", workspace.SoulFile)
	}
	if res.Created && existed {
		warnings = append(warnings, agentspec.Warning{Topic: "workspace recreated", Detail: fmt.Sprintf(
			"The workspace %s was missing and has been made again with the initial SOUL.md and MEMORY.md. "+
				"Whatever the agent had written there was lost outside Terraform.", wsPath)})
	}
	layout := s.Layout(id)
	key, err := Prepare(layout)
	if err != nil {
		return warnings, nil, stepErr(agentspec.StepFiles, "", "preparing "+layout.Dir, err)
	}
	s.log.Debug("runner directory ready", "agent_id", id, "dir", layout.Dir)
	cfg := a.Config
	cfg.Listen = ServedListen(a.Deployment(), l)
	if err := WriteConfig(layout, &cfg); err != nil {
		return warnings, nil, stepErr(agentspec.StepConfig, "", "writing "+layout.ConfigFile, err)
	}
	s.log.Info("runner config written", "agent_id", id, "file", layout.ConfigFile, "listen", cfg.Listen)
	meta := a.Meta
	meta.Deployment = a.Deployment()
	if err := WriteMeta(layout, meta); err != nil {
		return warnings, nil, stepErr(agentspec.StepConfig, "", "writing the agent's metadata", err)
	}
	s.log.Debug("agent metadata written", "agent_id", id, "file", MetaFile(layout))
	return warnings, key, nil
}

// deployRunner replaces the runner container and waits for its /healthz.
// A runner that failed is removed: with its restart policy it would
// crash-loop; and a new agent's failed create leaves no state that would
// ever remove its config, so its files (secrets) go too.
func (s *Service) deployRunner(ctx context.Context, cli client.APIClient, a agentspec.Agent, l Listener, hash string, isNew bool, out *agentspec.Applied) error {
	id := a.Config.AgentID
	name := ContainerName(id)
	dep, err := ForConfig(a.Config, Placement{
		Image: a.RunnerImage(), Layout: s.Layout(id), Listener: l, Workspace: a.Config.Workspace, ConfigHash: hash, DockerSocket: s.o.DockerSocket,
	})
	dep.Fresh = isNew
	if err != nil {
		return stepErr(agentspec.StepDeploy, "", "preparing the runner of "+id, err)
	}
	rollback := func(err error) error {
		errs := []error{err}
		if rerr := Remove(context.WithoutCancel(ctx), cli, id, time.Second); rerr != nil {
			errs = append(errs, stepErr(agentspec.StepRemove, "", "removing the failed "+name, rerr))
		} else {
			s.log.Info("failed runner container removed", "agent_id", id, "container", name)
		}
		if isNew {
			if rerr := RemoveFiles(s.Layout(id)); rerr != nil {
				errs = append(errs, stepErr(agentspec.StepRemoveFiles, "", "removing the runner's files", rerr))
			} else {
				s.log.Info("runner files removed", "agent_id", id, "dir", s.Layout(id).Dir)
			}
		}
		return errors.Join(errs...)
	}
	s.log.Info("deploying runner", "agent_id", id, "image", dep.Image, "container", name)
	cid, err := Deploy(ctx, cli, dep)
	if err != nil {
		return rollback(stepErr(agentspec.StepDeploy, "", "starting "+name+" from "+dep.Image, err))
	}
	s.log.Info("runner container created", "agent_id", id, "container", name, "id", cid, "image", dep.Image, "config_hash", hash)
	health, err := WaitHealthy(ctx, cli, cid, l, s.o.HealthTimeout)
	if err != nil {
		return rollback(stepErr(agentspec.StepHealth, "", name+" did not become healthy", err))
	}
	out.RunnerContainerID = cid
	out.RunnerStatus = agentspec.StatusRunning
	out.Reported = reportedBy(health)
	return nil
}

func (s *Service) removeRunner(ctx context.Context, cli client.APIClient, id string, timeout time.Duration) error {
	if err := Remove(ctx, cli, id, timeout); err != nil {
		return stepErr(agentspec.StepRemove, "", "removing the runner container of "+id, err)
	}
	s.log.Debug("runner container removed (if there was one)", "agent_id", id, "container", ContainerName(id))
	return nil
}

// Read observes an agent as it is: its workspace, its config on disk and
// its runner container. a is the agent as last applied (its settings beyond
// the config file: deployment, runner image, threegate).
func (s *Service) Read(ctx context.Context, a agentspec.Agent) (agentspec.Observed, error) {
	id := a.Config.AgentID
	var o agentspec.Observed
	wsPath := s.WorkspacePath(id)
	ws, err := workspace.Inspect(wsPath)
	if err != nil {
		return o, stepErr(agentspec.StepReadWorkspace, "", "reading "+wsPath, err)
	}
	if ws.Exists {
		o.WorkspacePath, o.Soul, o.SoulPresent = wsPath, ws.Soul, ws.SoulPresent
	}
	o.ConfigHash = s.hashOnDisk(a)
	if a.Deployment() != agentspec.ModeContainer {
		o.RunnerStatus = agentspec.StatusExternal
		return o, nil
	}
	cli, err := s.docker(ctx)
	if err != nil {
		return o, err
	}
	st, err := Inspect(ctx, cli, id)
	if err != nil {
		return o, stepErr(agentspec.StepRead, "", "inspecting "+ContainerName(id), err)
	}
	o.RunnerStatus, o.RunnerContainerID = st.State, st.ID
	if st.State == agentspec.StatusRunning && st.ConfigHash != o.ConfigHash {
		o.RunnerStatus = agentspec.StatusStale
	}
	// A runner of another build than this one is drift too: the plan
	// replaces it rather than the next message finding out (version.go).
	if o.RunnerStatus == agentspec.StatusRunning {
		listen := a.Config.Listen
		if listen == "" {
			listen = "unix://" + s.Layout(id).Socket
		}
		if d := RunnerVersionDrift(ctx, listen); d != nil {
			s.log.Warn("runner version drift", "agent_id", id, "runner", d.Runner.String(), "provider", d.Provider.String())
			o.RunnerStatus = agentspec.StatusStale
			o.Warnings = append(o.Warnings, agentspec.Warning{Topic: TopicVersionDrift, Detail: d.Error()})
		} else if l, err := ParseListen(listen); err == nil {
			// Its config hash leaves the per-message image out when a
			// reload brings it (reloadsImage): ask the runner.
			if d := imageDrift(ctx, a, l); d != "" {
				o.RunnerStatus = agentspec.StatusStale
				o.Warnings = append(o.Warnings, agentspec.Warning{Topic: TopicImageDrift, Detail: d})
			}
		}
	}
	if err := s.bridgeDrift(ctx, cli, a, &o); err != nil {
		return o, err
	}
	return o, nil
}

// hashOnDisk hashes the runner's config file as Apply would have; "" when
// the file or the key is gone or unreadable (drift either way).
func (s *Service) hashOnDisk(a agentspec.Agent) string {
	layout := s.Layout(a.Config.AgentID)
	cfg, err := agentspec.LoadConfig(layout.ConfigFile)
	if err != nil {
		s.log.Debug("runner config unreadable", "file", layout.ConfigFile, "error", err.Error())
		return ""
	}
	key, err := ReadHashKey(layout)
	if err != nil {
		return ""
	}
	if a.Deployment() == agentspec.ModeContainer {
		cfg.Listen = HostListen(cfg.Listen)
	}
	// The runner image is the one last applied, whatever the file says.
	runnerImage := a.RunnerImage()
	a.Config = *cfg
	return s.hashRunning(a, runnerImage, key)
}

// Remove takes an agent down: its runner container (unless an operator runs
// it), its runner files (they hold the token and the secrets) and, only
// with Meta.ForceDestroyWorkspace, its workspace; otherwise the workspace
// and everything the agent wrote stay.
func (s *Service) Remove(ctx context.Context, a agentspec.Agent) error {
	id := a.Config.AgentID
	if a.Deployment() != agentspec.ModeExternal {
		cli, err := s.docker(ctx)
		if err != nil {
			return err
		}
		if err := Remove(ctx, cli, id, agentspec.StopTimeout(a.Config)); err != nil {
			return stepErr(agentspec.StepRemove, "", "removing "+ContainerName(id), err)
		}
		s.log.Info("runner container removed", "agent_id", id, "container", ContainerName(id))
	}
	layout := s.Layout(id)
	if err := RemoveFiles(layout); err != nil {
		return stepErr(agentspec.StepRemoveFiles, "", "removing the runner's files", err)
	}
	s.log.Info("runner files removed", "agent_id", id, "dir", layout.Dir)
	wsPath := s.WorkspacePath(id)
	if !a.Meta.ForceDestroyWorkspace {
		s.log.Info("keeping the agent's workspace", "agent_id", id, "path", wsPath)
		return nil
	}
	if err := workspace.Remove(wsPath); err != nil {
		return stepErr(agentspec.StepRemoveWorkspace, "", "removing "+wsPath, err)
	}
	s.log.Info("workspace removed", "agent_id", id, "path", wsPath)
	return nil
}

// Import restores an agent from the runner's config and agent.json under
// the state directory. The config holds the secrets, the API key among
// them; the caller decides what of it to keep.
func (s *Service) Import(ctx context.Context, id string) (agentspec.Imported, error) {
	out := agentspec.Imported{Reported: agentspec.NotReported}
	if !workspace.ValidID(id) {
		return out, stepErr(agentspec.StepImport, "", "importing "+id, fmt.Errorf("%q is not an agent id (%s)", id, workspace.IDPattern))
	}
	layout := s.Layout(id)
	cfg, err := agentspec.LoadConfig(layout.ConfigFile)
	if err != nil {
		return out, stepErr(agentspec.StepImport, "", "importing "+id, fmt.Errorf("no runner config for agent %q under %s: %w", id, s.o.StateDir, err))
	}
	meta, err := ReadMeta(layout)
	if err != nil {
		return out, stepErr(agentspec.StepImport, "", "importing "+id, fmt.Errorf("agent %q has a runner config but no readable metadata: %w; "+
			"restore agent.json (in %s) from a backup, or check that the state directory is the one the agent was made with", id, err, layout.Dir))
	}
	cfg.Listen = HostListen(cfg.Listen)
	out.Agent = agentspec.Agent{Config: *cfg, Meta: meta}
	l, err := ParseListen(cfg.Listen)
	if err != nil {
		return out, nil
	}
	out.Endpoint = l.Endpoint()
	// Only the live runner knows its Landlock ABI and agent uid.
	if meta.Deployment == agentspec.ModeContainer {
		if h, err := CheckHealth(ctx, l); err == nil {
			out.Reported = reportedBy(h)
		}
	}
	return out, nil
}
