package firewall

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"testing"

	"github.com/coreos/go-iptables/iptables"
)

// benchHost opens the real iptables, or skips: these benchmarks change the
// host's filter table (only chains named TG-/TGI-meepa-bench-*, removed at
// the end) and need root and Docker's DOCKER-USER chain.
func benchHost(b *testing.B) (*Host, Set) {
	b.Helper()
	if os.Getenv("MEEPA_DOCKER_TESTS") == "" && os.Getenv("TF_ACC") == "" {
		b.Skip("changes the host firewall: set MEEPA_DOCKER_TESTS=1")
	}
	h, err := Open(context.Background(), nil)
	if err != nil {
		b.Skip(err)
	}
	// TEST-NET-2 subnets: no container has them, so the rules match nothing.
	set := Build(Params{
		Name:      fmt.Sprintf("meepa-bench-%04x", rand.IntN(0xffff)),
		LLMNet:    netip.MustParsePrefix("198.51.100.0/26"),
		FetchNet:  netip.MustParsePrefix("198.51.100.64/26"),
		EgressNet: netip.MustParsePrefix("198.51.100.128/26"),
		ProxyIP:   netip.MustParseAddr("198.51.100.130"),
		LogDenied: true,
	})
	b.Cleanup(func() {
		if err := h.Remove(context.Background(), set); err != nil {
			b.Error(err)
		}
	})
	return h, set
}

// BenchmarkApply measures one atomic apply of a topology's whole rule set
// (read the parents, one iptables-restore --noflush transaction).
func BenchmarkApply(b *testing.B) {
	h, set := benchHost(b)
	ctx := context.Background()
	for b.Loop() {
		if err := h.Apply(ctx, set); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(set.Rules)+len(set.Jumps)), "rules")
}

// BenchmarkReadBack measures reading the live rules and diffing them with
// the wanted set (what Read does on every plan).
func BenchmarkReadBack(b *testing.B) {
	h, set := benchHost(b)
	ctx := context.Background()
	if err := h.Apply(ctx, set); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		live, err := h.Read(ctx, set)
		if drift := Diff(set, live); err != nil || len(drift) > 0 {
			b.Fatalf("drift %v err %v", drift, err)
		}
	}
}

// BenchmarkApplyPerRule is the comparison: the same rules with one
// iptables exec each (go-iptables Append), which is neither atomic nor fast.
func BenchmarkApplyPerRule(b *testing.B) {
	h, set := benchHost(b)
	ctx := context.Background()
	if err := h.Apply(ctx, set); err != nil { // creates the chains and jumps
		b.Fatal(err)
	}
	ipt, err := iptables.New()
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		for _, c := range set.Chains {
			if err := ipt.ClearChain("filter", c); err != nil {
				b.Fatal(err)
			}
		}
		for _, r := range set.Rules {
			if err := ipt.Append("filter", r.Chain, r.Args()...); err != nil {
				b.Fatal(err)
			}
		}
	}
}
