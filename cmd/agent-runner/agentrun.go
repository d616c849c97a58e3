package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/kube"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/podio"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/probe"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox/landlock"
)

// agent-run is what every per-message sandbox runs: a container from the
// agent's image (workspace at /workspace, HOME=/workspace) or, in host mode,
// a Landlock-restricted child whose HOME and cwd are the workspace. First
// of all it installs the product's syscall deny filter on itself
// (landlock.InstallMessageFilter), so every runtime's sandbox refuses the
// same calls. Before it reads its request it prepares what needs none (agent.Prepare: the
// workspace checked and opened, memory.db open), so a prestarted container
// waits ready; then it reads one agent.Request on stdin until EOF and
// writes one agent.Reply line on stdout. With --frames (a Kubernetes
// message pod) stdin and stdout carry podio frames instead, and the LLM
// relay's connection travels on them beside the request and the reply.
// As a container's init it marks the reply Final when nothing in the
// container was killed for memory, and exits right after. Logs are JSON lines on stderr, without message text
// or secrets.
func init() {
	register("agent-run", "run the agent loop on one JSON request from stdin, reply JSON on stdout", runAgent)
}

// addCheck parses a repeatable --await-* flag.
func addCheck(dst *[]probe.Check) func(string) error {
	return func(v string) error {
		c, err := probe.Parse(v)
		if err == nil && c.Kind != probe.TCP {
			err = fmt.Errorf("%q: only tcp= checks", v)
		}
		if err == nil {
			*dst = append(*dst, c)
		}
		return err
	}
}

// defaultWorkspace is $HOME (the runner sets HOME=/workspace in a container
// and HOME=<workspace> in host mode), else /workspace.
func defaultWorkspace() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	return "/workspace"
}

// runAgent exits 0 whenever it wrote a Reply, even one that reports a
// failure: the runner reads the outcome from the Reply. A non-zero exit means
// no Reply could be written.
func runAgent(args []string) int {
	fs := flag.NewFlagSet("agent-run", flag.ContinueOnError)
	workspace := fs.String("workspace", defaultWorkspace(), "the agent's workspace directory (default $HOME, else /workspace)")
	logLevel := fs.String("log-level", "warn", "stderr log level: trace, debug, info, warn, error, off")
	frames := fs.Bool("frames", false, "stdin and stdout are framed (package podio): the request, the reply and the LLM relay share them (Kubernetes message pods)")
	var blocked, open []probe.Check
	fs.Func("await-blocked", "a check (tcp=host:port) that must find no way through before anything runs: the pod's network policies are in force; repeatable", addCheck(&blocked))
	fs.Func("await-open", "a check (tcp=host:port) that must get through before anything runs; repeatable", addCheck(&open))
	role := fs.String("role", "", "the sandbox's own role (core, fetch, tool_exec, or none for an agent without one), fixed when the sandbox is made: a request for another role is refused, so a request written into the wrong sandbox cannot widen its tools (Kubernetes message pods)")
	awaitLimit := fs.Duration("await-limit", probe.DefaultAwaitLimit, "how long to wait for the await checks before giving up")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := checkRoleFlag(*role); err != nil {
		fmt.Fprintf(os.Stderr, "agent-run: --role: %v\n", err)
		return 2
	}
	// Before anything of the message runs: the syscalls no sandbox is
	// given (io_uring among them) are refused to this process and every
	// tool it starts, whatever the runtime's own profile allows; a pod's
	// RuntimeDefault is whatever the node's container runtime ships. No
	// filter, no message.
	if err := landlock.InstallMessageFilter(); err != nil {
		fmt.Fprintf(os.Stderr, "agent-run: syscall filter: %v\n", err)
		return 1
	}
	if len(blocked)+len(open) > 0 {
		// Before the request is read: until the policies cover this pod,
		// nothing of the message may run.
		if err := probe.Await(context.Background(), blocked, open, *awaitLimit); err != nil {
			fmt.Fprintf(os.Stderr, "agent-run: %v\n", err)
			return 1
		}
	}
	if *role == agentspec.RoleToolExec {
		// TOOL-EXEC needs no network (on Docker its sandbox has none; its
		// model calls come over the relay on stdio): after the checks
		// above, no socket of any family for it or any tool it starts, so
		// no DNS query or packet leaves, whatever a cluster's policies
		// let through (issue 25: this test cluster's kube-router passes
		// the service range).
		if err := landlock.InstallSocketFilter(true); err != nil {
			fmt.Fprintf(os.Stderr, "agent-run: socket filter: %v\n", err)
			return 1
		}
	}
	// Before the request (API key, secrets) is read: the tools this loop
	// starts run as its uid and must not read its memory.
	if err := landlock.SetNonDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "agent-run: %v\n", err)
		return 1
	}
	log := hclog.New(&hclog.LoggerOptions{
		Name:   "agent-run",
		Output: os.Stderr,
		Level:  hclog.LevelFromString(*logLevel),
		// JSON so the runner can pass lines through as structured logs.
		JSONFormat: true,
	})

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// Nothing of the request is needed to prepare; the request (the token
	// of this message among it) comes only with the message.
	prepared := agent.Prepare(ctx, *workspace)
	std := plainStdio()
	if *frames {
		std = framedStdio()
	}
	data, err := std.request()
	var reply *agent.Reply
	if err != nil {
		prepared.Close(log)
		reply = &agent.Reply{ErrorKind: agent.ErrKindRequest, Error: fmt.Sprintf("read stdin: %v", err)}
	} else if err := requestRole(data, *role); err != nil {
		prepared.Close(log)
		reply = &agent.Reply{ErrorKind: agent.ErrKindRequest, Error: err.Error()}
	} else {
		reply = agent.RunJSON(ctx, data, agent.Options{Workspace: *workspace, Logger: log, Prepared: prepared, RelayConn: std.relay})
	}
	// The runner takes no reply over the cap: cut here, the caller still
	// gets the start of the answer and the note of the cut.
	agent.FitReply(reply, agentspec.MaxReplyBytes)
	if os.Getpid() == 1 {
		// The container's init: its cgroup is the container's, and its
		// exit ends every process in it.
		n, ok := agent.ContainerOOMKills()
		reply.Final = ok && n == 0
	}
	if err := std.reply(reply); err != nil {
		fmt.Fprintf(os.Stderr, "agent-run: write reply: %v\n", err)
		return 1
	}
	return 0
}

// checkRoleFlag accepts "" (no --role: the request's role stands, as in a
// Docker container or host mode, whose runner alone hands it requests),
// "none" and the roles of agentspec.
func checkRoleFlag(role string) error {
	if role == "" || role == kube.RoleNone {
		return nil
	}
	return agentspec.CheckRole(role)
}

// requestRole refuses a request whose role is not the sandbox's --role.
// The role decides the tools (agent.RoleTools); on a cluster it is part
// of the pod's own command line, which the runner admission policy checks
// against the agent's, so what a pod may do is what it was made as.
func requestRole(data []byte, role string) error {
	if role == "" {
		return nil
	}
	var r struct {
		Role string `json:"role"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil // RunJSON reports the malformed request
	}
	want := role
	if want == kube.RoleNone {
		want = ""
	}
	if r.Role != want {
		return fmt.Errorf("the request is for role %q, this sandbox was made for %q: refused", r.Role, role)
	}
	return nil
}

// stdio is how agent-run reads its request and writes its reply.
type stdio struct {
	request func() ([]byte, error)
	reply   func(*agent.Reply) error
	// relay is the LLM relay's connection on the framed stream, or nil.
	relay net.Conn
}

// plainStdio: the request is all of stdin, the reply one JSON line on
// stdout (Docker containers and host mode).
func plainStdio() stdio {
	return stdio{
		request: func() ([]byte, error) { return io.ReadAll(io.LimitReader(os.Stdin, agent.MaxRequestBytes+1)) },
		reply:   func(r *agent.Reply) error { return json.NewEncoder(os.Stdout).Encode(r) },
	}
}

// framedStdio: stdin and stdout carry podio frames. After the request,
// stdin's relay frames feed the relay connection until stdin ends.
func framedStdio() stdio {
	out := podio.NewWriter(os.Stdout)
	conn, sink := podio.Pipe(out)
	in := bufio.NewReader(os.Stdin)
	return stdio{
		request: func() ([]byte, error) {
			data, err := podio.ReadRequest(in, agent.MaxRequestBytes+1)
			if err != nil {
				return nil, err
			}
			go func() { sink.End(podio.Demux(in, map[byte]io.Writer{podio.KindRelay: sink})) }()
			return data, nil
		},
		reply: func(r *agent.Reply) error {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			return out.Write(podio.KindReply, append(b, '\n'))
		},
		relay: conn,
	}
}
