package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/logging"
)

// ErrNoIptables and ErrNoDockerUser are the preflight failures.
var (
	ErrNoIptables   = errors.New("iptables is not installed")
	ErrNoDockerUser = errors.New("the DOCKER-USER chain does not exist")
)

// Host is the real iptables of this machine (filter table, IPv4).
type Host struct {
	ipt     *iptables.IPTables
	restore string
	log     logging.Logger
}

// Open finds iptables and iptables-restore and checks that Docker's
// DOCKER-USER chain exists. Its errors say what is missing and what to do.
// Every change Apply and Remove make is logged to log (nil: not logged).
func Open(ctx context.Context, log logging.Logger) (*Host, error) {
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("%w (looked on PATH): install iptables (e.g. apt-get install iptables), "+
			"or set firewall.enabled = false to run the topology without host enforcement", ErrNoIptables)
	}
	restore, err := exec.LookPath("iptables-restore")
	if err != nil {
		return nil, fmt.Errorf("%w: iptables-restore is missing from PATH; install the full iptables package", ErrNoIptables)
	}
	ipt, err := iptables.New(iptables.IPFamily(iptables.ProtocolIPv4), iptables.Timeout(10))
	if err != nil {
		return nil, fmt.Errorf("iptables: %w", err)
	}
	ok, err := ipt.ChainExists("filter", DockerUser)
	if err != nil {
		return nil, fmt.Errorf("iptables: look for %s: %w", DockerUser, err)
	}
	if !ok {
		return nil, fmt.Errorf("%w in the filter table: Docker creates it when its iptables integration is on "+
			"(dockerd \"iptables\": true, the default); start or reconfigure Docker, then apply again", ErrNoDockerUser)
	}
	return &Host{ipt: ipt, restore: restore, log: logging.Or(log)}, nil
}

// Live is what iptables shows for the chains a Set cares about.
type Live struct {
	Chains  map[string][]string // owned chain -> its -A lines; absent = chain missing
	Parents map[string][]string // parent chain -> its -A lines
}

// Read lists the owned chains and the parents of s.
func (h *Host) Read(ctx context.Context, s Set) (Live, error) {
	l := Live{Chains: map[string][]string{}, Parents: map[string][]string{}}
	existing, err := h.ipt.ListChains("filter")
	if err != nil {
		return l, fmt.Errorf("iptables list chains: %w", err)
	}
	has := map[string]bool{}
	for _, c := range existing {
		has[c] = true
	}
	list := func(chain string) ([]string, error) {
		lines, err := h.ipt.List("filter", chain)
		if err != nil {
			return nil, fmt.Errorf("iptables -S %s: %w", chain, err)
		}
		var out []string
		for _, ln := range lines {
			if strings.HasPrefix(ln, "-A ") {
				out = append(out, ln)
			}
		}
		return out, nil
	}
	for _, c := range s.Chains {
		if !has[c] {
			continue
		}
		if l.Chains[c], err = list(c); err != nil {
			return l, err
		}
	}
	for _, j := range s.Jumps {
		if _, done := l.Parents[j.Parent]; done || !has[j.Parent] {
			continue
		}
		if l.Parents[j.Parent], err = list(j.Parent); err != nil {
			return l, err
		}
	}
	return l, nil
}

// Diff lists, in words, how live differs from the wanted set; empty means in
// sync. It is pure, so it is unit-tested on captured iptables -S output.
func Diff(want Set, live Live) []string {
	var out []string
	for _, c := range want.Chains {
		got, ok := live.Chains[c]
		if !ok {
			out = append(out, fmt.Sprintf("chain %s is missing", c))
			continue
		}
		var wanted []string
		for _, r := range want.Rules {
			if r.Chain == c {
				wanted = append(wanted, r.Line())
			}
		}
		out = append(out, diffLines(c, wanted, got)...)
	}
	for _, j := range want.Jumps {
		lines, ok := live.Parents[j.Parent]
		if !ok {
			out = append(out, fmt.Sprintf("chain %s is missing, so the jump to %s is missing", j.Parent, j.Target))
			continue
		}
		pos, end, n := jumpPosition(j, lines)
		switch {
		case n == 0:
			out = append(out, fmt.Sprintf("the jump from %s to %s is missing", j.Parent, j.Target))
		case end >= 0 && pos > end:
			verdict := lines[end][strings.LastIndex(lines[end], " ")+1:]
			out = append(out, fmt.Sprintf("the jump from %s to %s is below %s's %s (rule %d after the unconditional %s at %d), so it never runs",
				j.Parent, j.Target, j.Parent, verdict, pos+1, verdict, end+1))
		}
		if n > 1 {
			out = append(out, fmt.Sprintf("the jump from %s to %s appears %d times", j.Parent, j.Target, n))
		}
	}
	return out
}

// jumpPosition returns the index of the first jump, the index of the first
// rule that ends the parent for every packet (-1 if none) and how many
// jumps there are. Docker ends DOCKER-USER with "-j RETURN"; a foreign
// unconditional ACCEPT or RETURN above the jump (in either parent) would
// shadow it just the same.
func jumpPosition(j Jump, lines []string) (pos, end, n int) {
	pos, end = -1, -1
	for i, ln := range lines {
		if ln == j.Line() {
			if pos < 0 {
				pos = i
			}
			n++
		}
		if end < 0 && endsChain(j.Parent, ln) {
			end = i
		}
	}
	return pos, end, n
}

// endsChain reports whether the rule, as iptables -S prints it, matches
// every packet and stops the chain: no match but (at most) a comment, and
// a RETURN or ACCEPT target.
func endsChain(parent, line string) bool {
	rest, ok := strings.CutPrefix(line, "-A "+parent+" ")
	if !ok {
		return false
	}
	if c, ok := strings.CutPrefix(rest, "-m comment --comment "); ok {
		// The comment is one word or a quoted string without quotes inside.
		if strings.HasPrefix(c, `"`) {
			if i := strings.Index(c[1:], `"`); i >= 0 {
				rest = strings.TrimSpace(c[i+2:])
			}
		} else if _, after, ok := strings.Cut(c, " "); ok {
			rest = after
		}
	}
	return rest == "-j RETURN" || rest == "-j ACCEPT"
}

func diffLines(chain string, want, got []string) []string {
	var out []string
	gotSet := map[string]int{}
	for _, g := range got {
		gotSet[g]++
	}
	wantSet := map[string]int{}
	for _, w := range want {
		wantSet[w]++
		if gotSet[w] == 0 {
			out = append(out, "rule missing: "+w)
		}
	}
	for _, g := range got {
		if wantSet[g] == 0 {
			out = append(out, "unexpected rule in "+chain+": "+g)
		}
	}
	if len(out) == 0 && strings.Join(want, "\n") != strings.Join(got, "\n") {
		out = append(out, "rules of "+chain+" are out of order")
	}
	return out
}

// ApplyText is the iptables-restore --noflush batch that brings live to want
// in one transaction: the owned chains are declared (which creates or
// flushes them) and refilled, and each jump is put in place. The kernel
// swaps the whole batch at once (nf_tables: one netlink transaction;
// legacy: one table replace), so no packet meets a half-applied set.
func ApplyText(want Set, live Live) string {
	var b strings.Builder
	want.writeChains(&b)
	for _, j := range want.Jumps {
		ok, n := jumpInPlace(j, live.Parents[j.Parent])
		if ok {
			continue
		}
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "-D %s %s\n", j.Parent, j.Spec())
		}
		fmt.Fprintf(&b, "-I %s 1 %s\n", j.Parent, j.Spec())
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// jumpInPlace reports whether the parent holds the jump exactly once and
// where it runs (above any rule that ends the parent), and how many copies
// it holds.
func jumpInPlace(j Jump, parent []string) (ok bool, n int) {
	pos, end, n := jumpPosition(j, parent)
	return n == 1 && !(end >= 0 && pos > end), n
}

// RemoveText is the batch that removes every jump and owned chain of want
// that live still has, and nothing else.
func RemoveText(want Set, live Live) string {
	var b strings.Builder
	for _, j := range want.Jumps {
		_, _, n := jumpPosition(j, live.Parents[j.Parent])
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, "-D %s %s\n", j.Parent, j.Spec())
		}
	}
	for _, c := range want.Chains {
		if _, ok := live.Chains[c]; ok {
			fmt.Fprintf(&b, "-F %s\n-X %s\n", c, c)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "*filter\n" + b.String() + "COMMIT\n"
}

// Apply brings the host to want atomically.
func (h *Host) Apply(ctx context.Context, want Set) error {
	live, err := h.Read(ctx, want)
	if err != nil {
		return err
	}
	if _, ok := live.Parents[DockerUser]; !ok {
		return fmt.Errorf("firewall apply: %w", ErrNoDockerUser)
	}
	if err := h.run(ctx, ApplyText(want, live)); err != nil {
		return err
	}
	h.logApplied(want, live)
	return nil
}

// logApplied says what one Apply changed, from the state it started from:
// the chains it created, the rules it loaded (always all of them, in one
// transaction) and the jumps it put in place.
func (h *Host) logApplied(want Set, live Live) {
	for _, c := range want.Chains {
		if _, ok := live.Chains[c]; !ok {
			h.log.Debug("firewall chain created", "owner", want.Owner, "chain", c)
		}
	}
	h.log.Debug("firewall rules applied atomically", "owner", want.Owner, "chains", strings.Join(want.Chains, ","),
		"rules", len(want.Rules), "drift_repaired", len(Diff(want, live)))
	for _, j := range want.Jumps {
		if ok, n := jumpInPlace(j, live.Parents[j.Parent]); !ok {
			h.log.Debug("firewall jump inserted", "owner", want.Owner, "parent", j.Parent, "target", j.Target,
				"position", 1, "replaced", n)
		}
	}
}

// Remove deletes the jumps and owned chains of want, in one transaction.
func (h *Host) Remove(ctx context.Context, want Set) error {
	live, err := h.Read(ctx, want)
	if err != nil {
		return err
	}
	text := RemoveText(want, live)
	if text == "" {
		h.log.Trace("firewall rules already absent", "owner", want.Owner)
		return nil
	}
	if err := h.run(ctx, text); err != nil {
		return err
	}
	for _, j := range want.Jumps {
		if _, _, n := jumpPosition(j, live.Parents[j.Parent]); n > 0 {
			h.log.Debug("firewall jump removed", "owner", want.Owner, "parent", j.Parent, "target", j.Target, "count", n)
		}
	}
	for _, c := range want.Chains {
		if rules, ok := live.Chains[c]; ok {
			h.log.Debug("firewall chain removed", "owner", want.Owner, "chain", c, "rules", len(rules))
		}
	}
	return nil
}

func (h *Host) run(ctx context.Context, text string) error {
	// -w waits for the xtables lock instead of failing when Docker or
	// another tool holds it.
	cmd := exec.CommandContext(ctx, h.restore, "--noflush", "-w", "10")
	cmd.Stdin = strings.NewReader(text)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("iptables-restore: %w: %s\nbatch:\n%s", err, strings.TrimSpace(stderr.String()), text)
	}
	return nil
}

// TopologyChains maps each topology that has an owned chain in this
// machine's filter table (ForwardChain, InputChain) to those chains, for
// finding what a topology left behind.
func (h *Host) TopologyChains() (map[string][]string, error) {
	existing, err := h.ipt.ListChains("filter")
	if err != nil {
		return nil, fmt.Errorf("iptables list chains: %w", err)
	}
	out := map[string][]string{}
	for _, c := range existing {
		for _, prefix := range []string{ForwardChain(""), InputChain("")} {
			if name, ok := strings.CutPrefix(c, prefix); ok && name != "" {
				out[name] = append(out[name], c)
			}
		}
	}
	return out, nil
}
