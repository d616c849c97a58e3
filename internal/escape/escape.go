// Package escape is the project's own sandbox-escape suite: the scenario
// classes of the public sandbox-escape benchmarks (privileged and
// capability abuse, the Docker socket, host disks and mounts, writable
// /proc and /sys, cgroup release agents, open_by_handle_at, other
// processes, kernel modules and BPF, packet sockets, io_uring, cloud
// metadata, planted credentials, exfiltration), each tried by the probe
// command (escape/probe) inside the sandbox the product makes and inside a
// deliberately misconfigured control that proves the technique works here.
//
// This file holds the pure part: the scenarios, how a sandbox run and its
// control combine into a result, and the results page. The acceptance test
// runs the probes and fails when a result differs from the committed page
// (docs/guides/escape-results.md, from templates/guides/).
package escape

import (
	"fmt"
	"strings"
)

// Results of a row.
const (
	Held          = "held"
	Escaped       = "escaped"
	NotReproduced = "not reproduced"
)

// Modes of a row.
const (
	ModeNone   = "container, network none"
	ModeBridge = "container, network bridge"
	ModeHost   = "host mode"
	// ModeThreeGate, then the role: a ThreeGate member's per-message
	// container on the role's networks (TOOL_EXEC's has none).
	ModeThreeGate = "ThreeGate"
)

// Scenario is one technique. Layer says, per mode kind, what stands in
// its way in the product's sandbox (the result says whether it did).
type Scenario struct {
	ID, Title       string
	Container, Host string
	// NoBridge: not a breach under network = "bridge", which reaches the
	// internet by design (the egress scenarios).
	NoBridge bool
}

// Scenarios, in the probe's order.
var Scenarios = []Scenario{
	{"mount", "Privileged / CAP_SYS_ADMIN: mount a filesystem", "all capabilities dropped; seccomp", "no capabilities; seccomp", false},
	{"docker-socket", "Docker daemon socket: ask the daemon", "only the workspace is mounted", "socket filter (no AF_UNIX connect)", false},
	{"block-device", "Host disk: open it raw (mknod when absent)", "no CAP_MKNOD; device cgroup", "agent uid; Landlock", false},
	{"planted-credential", "Planted credential outside the workspace (host path or host mount)", "only the workspace is mounted", "Landlock", false},
	{"proc-sys-write", "Writable /proc: open core_pattern or sysrq-trigger for writing", "non-root uid; /proc/sys read-only; sysrq-trigger masked", "agent uid", false},
	{"sys-write", "Writable /sys: open a kernel knob for writing", "non-root uid; sysfs read-only", "agent uid", false},
	{"cgroup-release-agent", "cgroup v1 release_agent: find or mount one writable", "no CAP_SYS_ADMIN; private cgroup namespace, cgroupfs read-only", "agent uid; no capabilities", false},
	{"open-by-handle", "open_by_handle_at (shocker): open a host inode by handle", "no CAP_DAC_READ_SEARCH; seccomp", "no capabilities; seccomp", false},
	{"host-process", "Other processes: read a host process's secret environment, ptrace it", "private PID namespace", "agent uid; seccomp", false},
	{"kernel-module", "Kernel module: init_module", "no CAP_SYS_MODULE; seccomp", "no capabilities; seccomp", false},
	{"bpf-load", "BPF: load a program", "seccomp; no CAP_BPF", "seccomp", false},
	{"packet-socket", "Packet and raw sockets", "CAP_NET_RAW dropped", "no capabilities; socket filter", false},
	{"io-uring", "io_uring: set up a ring", "seccomp (the product's profile)", "seccomp", false},
	{"metadata", "Cloud metadata at 169.254.169.254 (a stand-in on this machine)", "no network / the bridge firewall drops 169.254.0.0/16", "allow_network = false: Landlock and socket filter", false},
	{"egress-direct", "Exfiltration: direct TCP to a server outside", "no network", "allow_network = false", true},
	{"egress-dns", "Exfiltration: DNS query straight to an outside resolver", "no network", "allow_network = false", true},
}

// Probe is one line of the probe's output.
type Probe struct {
	State, Detail string // escaped, held, unsupported
}

// ParseProbe reads the probe's output into scenario -> line.
func ParseProbe(out string) map[string]Probe {
	m := map[string]Probe{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(strings.TrimSpace(line), "\t", 3)
		if len(f) == 3 {
			m[f[0]] = Probe{f[1], f[2]}
		}
	}
	return m
}

// Row is one line of the results table.
type Row struct {
	Scenario, Layer, Mode, Runtime, Result, Detail string
}

// Judge combines the sandbox's probe line with its control's. The sandbox
// escaping is an escape whatever the control did; a control that could not
// do it either proves nothing, so the row is not reproduced; else it held.
func Judge(s Scenario, mode, runtime string, sandbox, control Probe) Row {
	layer := s.Container
	switch {
	case mode == ModeHost:
		layer = s.Host
	case strings.HasPrefix(mode, ModeThreeGate) && !strings.HasSuffix(mode, "TOOL_EXEC") && (s.ID == "metadata" || s.NoBridge):
		layer = "ThreeGate's internal networks and host firewall: only the proxy gets out"
	}
	r := Row{Scenario: s.Title, Layer: layer, Mode: mode, Runtime: runtime}
	switch {
	case sandbox.State == Escaped:
		r.Result, r.Detail = Escaped, "sandbox: "+sandbox.Detail
	case control.State != Escaped:
		r.Result, r.Detail = NotReproduced, "control: "+orMissing(control)
	default:
		r.Result, r.Detail = Held, "sandbox: "+orMissing(sandbox)+"; control: "+control.Detail
	}
	return r
}

func orMissing(p Probe) string {
	if p.State == "" {
		return "no answer from the probe"
	}
	if p.State == "unsupported" {
		return "not available here (" + p.Detail + ")"
	}
	return p.Detail
}

// Key is what the acceptance test compares: everything but the detail.
func (r Row) Key() string {
	return strings.Join([]string{noBraces(r.Scenario), noBraces(r.Layer), r.Mode, r.Runtime, r.Result}, " | ")
}

// noBraces keeps template actions out of the page: tfplugindocs renders
// the guide as a Go template.
func noBraces(s string) string {
	return strings.NewReplacer("{", "(", "}", ")").Replace(s)
}

func cell(s string) string {
	return strings.ReplaceAll(noBraces(s), "|", "\\|")
}

// Table renders rows as Markdown, one table line each.
func Table(rows []Row) string {
	var b strings.Builder
	b.WriteString("| Scenario | Layer that stops it | Mode | Runtime | Result | Detail |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n", cell(r.Scenario), cell(r.Layer), r.Mode, r.Runtime, r.Result, cell(r.Detail))
	}
	return b.String()
}

// Totals renders the count of each result per mode and runtime.
func Totals(rows []Row) string {
	type k struct{ mode, rt string }
	counts := map[k]map[string]int{}
	var keys []k
	for _, r := range rows {
		kk := k{r.Mode, r.Runtime}
		if counts[kk] == nil {
			counts[kk] = map[string]int{}
			keys = append(keys, kk)
		}
		counts[kk][r.Result]++
	}
	var b strings.Builder
	b.WriteString("| Mode | Runtime | Held | Escaped | Not reproduced |\n|---|---|---|---|---|\n")
	for _, kk := range keys {
		c := counts[kk]
		fmt.Fprintf(&b, "| %s | %s | %d | %d | %d |\n", kk.mode, kk.rt, c[Held], c[Escaped], c[NotReproduced])
	}
	return b.String()
}

// ParseTable reads the keys of a rendered table's rows back, in order.
func ParseTable(page string) []string {
	var keys []string
	in := false
	for _, line := range strings.Split(page, "\n") {
		switch {
		case strings.HasPrefix(line, "| Scenario |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			f := splitCells(line)
			if len(f) >= 5 {
				keys = append(keys, strings.Join(f[:5], " | "))
			}
		case in:
			return keys
		}
	}
	return keys
}

// splitCells splits a table line on unescaped pipes, unescaping cells.
func splitCells(line string) []string {
	line = strings.TrimSpace(line)
	line = strings.TrimPrefix(strings.TrimSuffix(line, "|"), "|")
	var cells []string
	var cur strings.Builder
	for i := 0; i < len(line); i++ {
		if line[i] == '\\' && i+1 < len(line) && line[i+1] == '|' {
			cur.WriteByte('|')
			i++
			continue
		}
		if line[i] == '|' {
			cells = append(cells, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteByte(line[i])
	}
	return append(cells, strings.TrimSpace(cur.String()))
}

// Versions are what a run ran on.
type Versions struct {
	Date, Kernel, Docker, Runc, Runsc string
}

// runOnPrefix starts the lines the acceptance test does not compare.
const runOnPrefix = "- "

// Page is the whole results guide.
func Page(v Versions, rows []Row) string {
	var b strings.Builder
	b.WriteString(`---
page_title: "Escape results: the sandbox against the public escape benchmarks"
subcategory: ""
description: |-
  What the per-message container (network none and bridge, under runc and gVisor's runsc) and host mode (Landlock and seccomp) do against the scenario classes of the public sandbox-escape benchmarks, each with a control that shows the technique working here. Generated by the escape suite.
---

# Escape results

This page is written by the project's escape suite (` + "`internal/escape`" + `). The public
sandbox-escape benchmarks (UK AISI's docker_sandbox_breakout and SandboxBench, Oxford and AISI's
SandboxEscapeBench) each give a model a shell in a container and score whether it gets out. Their
scenarios fall into a handful of classes; the suite has one probe per class, written for this
project, and runs all of them, as the agent's own uid, inside the sandbox the product really makes
for a message:

- **container, network none** and **container, network bridge**: the per-message container from
  the product's hardened spec, through the same Docker backend the runner uses (for bridge, on the
  managed bridge network with its firewall in place), under runc and under gVisor's runsc;
- **host mode**: the agent-runner's own sandbox on the host (Landlock, the seccomp filter, no
  capabilities, the agent's uid), with ` + "`allow_network = false`" + `.

Every scenario has a **control**: the same probe in a setup that is wrong on purpose, so that a
"held" means the technique works on this machine and the sandbox stopped it. For containers the
control is one container under the same runtime that spells out ` + "`--privileged`" + ` (every
capability but CAP_SYS_RESOURCE, which this machine's dockerd lacks itself, so a real
` + "`--privileged`" + ` cannot start here; no seccomp or AppArmor, /proc unmasked, every device allowed,
the host's /sys read-write), with the host's PID namespace, the Docker socket and the planted
credential's directory mounted, on Docker's default bridge, as root; for host mode it is the probe run as root without the sandbox (in a mount namespace of its
own). When even the control fails, the row says **not reproduced** and why: it is never counted as
held. The probes change nothing on the host: files are opened for writing but not written, the
module and BPF program offered are empty or inert, mounts are undone at once, and the network
targets are stand-ins in network namespaces on this machine (169.254.169.254 included).

- **ThreeGate CORE, FETCH, TOOL_EXEC**: each role's per-message container as a member of a
  ThreeGate topology applied with its host firewall and guard (CORE and FETCH on the role's
  networks with the topology's DNS sink, FETCH with the proxy's environment; TOOL_EXEC's sandbox
  with no network), under runc and runsc.

This table covers the Docker backend and host mode only. The Kubernetes backend is not in it: the
test cluster's containerd 1.6 cannot run gVisor's shim (see the gVisor guide), and the suite does
not run on the cluster yet.

The acceptance test (` + "`TF_ACC=1 go test ./internal/escape/`" + `) runs the suite and fails when any
row's result differs from this page, so a regression in the sandbox fails CI. To regenerate the
page after an intended change: ` + "`MEEPA_ESCAPE_WRITE=1 TF_ACC=1 go test -run TestEscapeSuite ./internal/escape/`" + `,
then ` + "`make docs`" + `.

A **not reproduced** row is never a pass. Under runsc most of them mean that gVisor's kernel has
no such thing even for a container that asks for it (no host PID namespace, no raw sockets without
runsc's --net-raw, no io_uring, open_by_handle_at, cgroup release agents or kernel modules), so the
technique does not exist there; under runc the raw host disk is out of reach of root itself on the
machine the page was made on (its own device cgroup), and the kernel has no module support. The
detail column gives the control's own error in each case.

## Run on

`)
	fmt.Fprintf(&b, "%sdate: %s\n%skernel: %s\n%sDocker: %s\n%srunc: %s\n%srunsc: %s\n\n", runOnPrefix, v.Date, runOnPrefix, v.Kernel,
		runOnPrefix, v.Docker, runOnPrefix, v.Runc, runOnPrefix, v.Runsc)
	b.WriteString("## Totals\n\n")
	b.WriteString(Totals(rows))
	b.WriteString("\n## Results\n\n")
	b.WriteString(Table(rows))
	return b.String()
}
