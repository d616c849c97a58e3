package firewall

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func testParams(log bool, dns ...string) Params {
	p := Params{
		Name:      "tg",
		LLMNet:    netip.MustParsePrefix("10.213.1.0/24"),
		FetchNet:  netip.MustParsePrefix("10.213.2.0/24"),
		EgressNet: netip.MustParsePrefix("10.213.3.0/24"),
		ProxyIP:   netip.MustParseAddr("10.213.3.2"),
		LogDenied: log,
	}
	for _, d := range dns {
		p.DNS = append(p.DNS, netip.MustParseAddr(d))
	}
	return p
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestRuleSetGolden(t *testing.T) {
	for name, p := range map[string]Params{
		"default.rules": testParams(false),
		"log-dns.rules": testParams(true, "10.213.9.53", "10.213.9.54"),
	} {
		t.Run(name, func(t *testing.T) {
			s := Build(p)
			golden(t, name, strings.Join(s.Lines(), "\n")+"\n")
			golden(t, strings.TrimSuffix(name, ".rules")+".restore", s.RestoreText())
		})
	}
}

// The order is the security argument; check its landmarks independently of
// the golden file so that a careless -update cannot bless a wrong order.
func TestRuleOrder(t *testing.T) {
	s := Build(testParams(true))
	idx := func(substr string) int {
		for i, r := range s.Rules {
			if r.Chain == "TG-tg" && strings.Contains(r.Spec, substr) {
				return i
			}
		}
		t.Fatalf("no TG-tg rule contains %q", substr)
		return -1
	}
	est := idx("RELATED,ESTABLISHED")
	intra := idx("-s 10.213.1.0/24 -d 10.213.1.0/24")
	https := idx("--dport 443")
	log := idx("-j LOG")
	drop := idx(`-s 10.213.3.0/24 -m comment --comment "threegate:tg" -j DROP`)
	if !(est < intra && intra < https && https < log && log < drop) {
		t.Errorf("order est=%d intra=%d 443=%d log=%d drop=%d", est, intra, https, log, drop)
	}
	for _, r := range s.Rules {
		if !strings.Contains(r.Spec, `-m comment --comment "threegate:tg"`) {
			t.Errorf("rule without owner comment: %s", r.Line())
		}
		// An ACCEPT would end FORWARD or INPUT and skip Docker's and the
		// host's own rules; the owned chains only drop or return.
		if !strings.HasSuffix(r.Spec, "-j RETURN") && !strings.HasSuffix(r.Spec, "-j DROP") && !strings.Contains(r.Spec, "-j LOG ") {
			t.Errorf("rule neither returns, drops nor logs: %s", r.Line())
		}
		if strings.HasSuffix(r.Spec, "-j RETURN") && !strings.Contains(r.Spec, "10.213.") {
			t.Errorf("RETURN rule not scoped to the topology's subnets: %s", r.Line())
		}
	}
	// Only the proxy's egress address gets new connections out.
	for _, r := range s.Rules {
		if strings.Contains(r.Spec, "--dport") && !strings.HasPrefix(r.Spec, "-s 10.213.3.2/32 ") {
			t.Errorf("port rule for something other than the proxy: %s", r.Line())
		}
	}
	for _, r := range s.Rules {
		if r.Chain == "TGI-tg" && strings.HasSuffix(r.Spec, "RETURN") && !strings.Contains(r.Spec, "ESTABLISHED") {
			t.Errorf("INPUT chain lets new connections by: %s", r.Line())
		}
	}
}

func liveFrom(s Set) Live {
	l := Live{Chains: map[string][]string{}, Parents: map[string][]string{}}
	for _, c := range s.Chains {
		l.Chains[c] = []string{}
	}
	for _, r := range s.Rules {
		l.Chains[r.Chain] = append(l.Chains[r.Chain], r.Line())
	}
	l.Parents[DockerUser] = []string{s.Jumps[0].Line(), "-A DOCKER-USER -j RETURN"}
	l.Parents[Input] = []string{"-A INPUT -i lo -j ACCEPT", s.Jumps[1].Line()}
	return l
}

func TestDiff(t *testing.T) {
	want := Build(testParams(false))
	fwd := ForwardChain("tg")
	cases := []struct {
		name   string
		mutate func(l *Live)
		expect []string // substrings, one per drift line, in order
	}{
		{"in sync", func(*Live) {}, nil},
		{"foreign rules in parents are ignored", func(l *Live) {
			l.Parents[DockerUser] = append([]string{"-A DOCKER-USER -s 192.0.2.9/32 -j DROP"}, l.Parents[DockerUser]...)
		}, nil},
		{"deleted rule", func(l *Live) {
			l.Chains[fwd] = append(l.Chains[fwd][:4], l.Chains[fwd][5:]...)
		}, []string{"rule missing: -A TG-tg -s 10.213.2.0/24 -m conntrack"}},
		{"extra rule", func(l *Live) {
			l.Chains[fwd] = append(l.Chains[fwd], "-A TG-tg -j ACCEPT")
		}, []string{"unexpected rule in TG-tg: -A TG-tg -j ACCEPT"}},
		{"reordered", func(l *Live) {
			c := l.Chains[fwd]
			c[0], c[len(c)-1] = c[len(c)-1], c[0]
		}, []string{"out of order"}},
		{"flushed DOCKER-USER", func(l *Live) { l.Parents[DockerUser] = nil }, []string{"jump from DOCKER-USER to TG-tg is missing"}},
		{"jump below RETURN", func(l *Live) {
			l.Parents[DockerUser] = []string{"-A DOCKER-USER -j RETURN", want.Jumps[0].Line()}
		}, []string{"below DOCKER-USER's RETURN"}},
		{"foreign unconditional ACCEPT above the INPUT jump", func(l *Live) {
			l.Parents[Input] = []string{`-A INPUT -m comment --comment "allow all" -j ACCEPT`, want.Jumps[1].Line()}
		}, []string{"below INPUT's ACCEPT"}},
		{"foreign conditional rules above the jumps", func(l *Live) {
			l.Parents[DockerUser] = append([]string{"-A DOCKER-USER -i eth9 -j RETURN", "-A DOCKER-USER -s 192.0.2.0/24 -j ACCEPT"}, l.Parents[DockerUser]...)
			l.Parents[Input] = append([]string{"-A INPUT -m comment --comment keep -p tcp -j ACCEPT"}, l.Parents[Input]...)
		}, nil},
		{"duplicate jump", func(l *Live) {
			l.Parents[DockerUser] = append([]string{want.Jumps[0].Line()}, l.Parents[DockerUser]...)
		}, []string{"appears 2 times"}},
		{"missing chain", func(l *Live) { delete(l.Chains, "TGI-tg") }, []string{"chain TGI-tg is missing"}},
		{"missing INPUT jump", func(l *Live) { l.Parents[Input] = l.Parents[Input][:1] }, []string{"jump from INPUT to TGI-tg is missing"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := liveFrom(want)
			c.mutate(&l)
			got := Diff(want, l)
			if len(got) != len(c.expect) {
				t.Fatalf("drift = %q, want %d lines like %q", got, len(c.expect), c.expect)
			}
			for i := range got {
				if !strings.Contains(got[i], c.expect[i]) {
					t.Errorf("drift[%d] = %q, want it to contain %q", i, got[i], c.expect[i])
				}
			}
		})
	}
}

func TestApplyText(t *testing.T) {
	want := Build(testParams(false))
	jump := `-m comment --comment "threegate:tg" -j TG-tg`
	// In sync: chains are refilled, jumps untouched.
	text := ApplyText(want, liveFrom(want))
	if strings.Contains(text, "-I DOCKER-USER") || strings.Contains(text, "-D DOCKER-USER") {
		t.Errorf("in-sync apply touches DOCKER-USER:\n%s", text)
	}
	if !strings.HasPrefix(text, "*filter\n:TG-tg - [0:0]\n:TGI-tg - [0:0]\n") || !strings.HasSuffix(text, "COMMIT\n") {
		t.Errorf("apply text is not one transaction declaring the owned chains:\n%s", text)
	}
	// Jump below RETURN: deleted and inserted at the top, in the same batch.
	l := liveFrom(want)
	l.Parents[DockerUser] = []string{"-A DOCKER-USER -j RETURN", want.Jumps[0].Line()}
	text = ApplyText(want, l)
	if !strings.Contains(text, "-D DOCKER-USER "+jump+"\n-I DOCKER-USER 1 "+jump+"\n") {
		t.Errorf("jump below RETURN not moved:\n%s", text)
	}
	// Shadowed by a foreign ACCEPT in INPUT: moved above it.
	l = liveFrom(want)
	l.Parents[Input] = []string{"-A INPUT -j ACCEPT", want.Jumps[1].Line()}
	text = ApplyText(want, l)
	if !strings.Contains(text, "-D INPUT "+want.Jumps[1].Spec()+"\n-I INPUT 1 "+want.Jumps[1].Spec()+"\n") {
		t.Errorf("jump below INPUT's ACCEPT not moved:\n%s", text)
	}
	// Flushed: inserted once.
	l.Parents[DockerUser] = nil
	text = ApplyText(want, l)
	if strings.Count(text, "-I DOCKER-USER 1 ") != 1 || strings.Contains(text, "-D DOCKER-USER") {
		t.Errorf("flushed DOCKER-USER not restored with one insert:\n%s", text)
	}
}

func TestRemoveText(t *testing.T) {
	want := Build(testParams(false))
	if got := RemoveText(want, Live{Chains: map[string][]string{}, Parents: map[string][]string{DockerUser: {"-A DOCKER-USER -j RETURN"}}}); got != "" {
		t.Errorf("nothing to remove, got:\n%s", got)
	}
	got := RemoveText(want, liveFrom(want))
	for _, line := range []string{"-D DOCKER-USER " + want.Jumps[0].Spec(), "-D INPUT " + want.Jumps[1].Spec(), "-F TG-tg", "-X TG-tg", "-F TGI-tg", "-X TGI-tg"} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("remove text lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, "RETURN") || strings.Contains(got, "-i lo") {
		t.Errorf("remove text touches foreign rules:\n%s", got)
	}
}

func TestArgs(t *testing.T) {
	r := Rule{Chain: "X", Spec: `-s 10.0.0.0/8 -m comment --comment "threegate:tg" -j LOG --log-prefix "tg:tg fwd "`}
	got := strings.Join(r.Args(), "|")
	want := "-s|10.0.0.0/8|-m|comment|--comment|threegate:tg|-j|LOG|--log-prefix|tg:tg fwd "
	if got != want {
		t.Errorf("Args = %q, want %q", got, want)
	}
}

// packet is what the evaluator below needs to know about one packet.
type packet struct {
	src, dst string
	proto    string // tcp or udp
	dport    int
	state    string // NEW, ESTABLISHED or RELATED
}

// verdict walks chain the way netfilter does, first match wins, LOG goes
// on, and returns the terminating target, or "" when the packet falls off
// the end (back to the parent chain). It understands exactly the matches
// Build writes and fails the test on any other, so a new kind of rule
// cannot slip past it unjudged.
func verdict(t *testing.T, s Set, chain string, p packet) string {
	t.Helper()
	for _, r := range s.Rules {
		if r.Chain != chain {
			continue
		}
		args, match, target := r.Args(), true, ""
		for i := 0; i < len(args); i++ {
			next := func() string { i++; return args[i] }
			// next() before match &&, so a failed match still consumes
			// its value.
			switch a := args[i]; a {
			case "-s", "-d":
				ip := p.src
				if a == "-d" {
					ip = p.dst
				}
				in := netip.MustParsePrefix(next()).Contains(netip.MustParseAddr(ip))
				match = match && in
			case "-p":
				proto := next()
				match = match && proto == p.proto
			case "--dport":
				port := next()
				match = match && port == fmt.Sprint(p.dport)
			case "--ctstate":
				states := strings.Split(next(), ",")
				match = match && slices.Contains(states, p.state)
			case "-m":
				next() // the match module; its options are handled above
			case "--comment", "--log-prefix":
				next()
			case "-j":
				target = next()
			default:
				t.Fatalf("verdict: unknown option %q in %s", a, r.Line())
			}
		}
		if match && target != "LOG" {
			return target
		}
	}
	return ""
}

// TestVerdicts judges the rule set by what it does to packets rather than
// by its text, so that a reordering that opens a path fails here even when
// the golden files were blindly regenerated.
func TestVerdicts(t *testing.T) {
	s := Build(testParams(true))
	const (
		llm, llm2, fetch = "10.213.1.5", "10.213.1.6", "10.213.2.5"
		proxy, rogue     = "10.213.3.2", "10.213.3.9"
		outside, foreign = "198.51.100.7", "172.17.0.2"
	)
	denied, passes := "DROP", "" // passes: RETURN or off the end, back to Docker's chains
	for _, c := range []struct {
		name  string
		chain string
		p     packet
		want  string
	}{
		{"proxy to outside tcp/443", "TG-tg", packet{proxy, outside, "tcp", 443, "NEW"}, passes},
		{"proxy to outside udp/53", "TG-tg", packet{proxy, outside, "udp", 53, "NEW"}, passes},
		{"proxy to outside tcp/53", "TG-tg", packet{proxy, outside, "tcp", 53, "NEW"}, passes},
		{"proxy to outside tcp/80", "TG-tg", packet{proxy, outside, "tcp", 80, "NEW"}, denied},
		{"proxy to llmnet tcp/443", "TG-tg", packet{proxy, llm, "tcp", 443, "NEW"}, denied},
		{"proxy to fetchnet udp/53 by routing", "TG-tg", packet{proxy, fetch, "udp", 53, "NEW"}, denied},
		{"second egressnet container to outside tcp/443", "TG-tg", packet{rogue, outside, "tcp", 443, "NEW"}, denied},
		{"llmnet to outside tcp/443", "TG-tg", packet{llm, outside, "tcp", 443, "NEW"}, denied},
		{"llmnet to fetchnet", "TG-tg", packet{llm, fetch, "tcp", 3128, "NEW"}, denied},
		{"fetchnet to outside tcp/443", "TG-tg", packet{fetch, outside, "tcp", 443, "NEW"}, denied},
		{"inside llmnet", "TG-tg", packet{llm, llm2, "tcp", 8080, "NEW"}, passes},
		{"outside into llmnet", "TG-tg", packet{outside, llm, "tcp", 22, "NEW"}, denied},
		{"reply to the proxy", "TG-tg", packet{outside, proxy, "tcp", 40000, "ESTABLISHED"}, passes},
		{"foreign traffic is not ours", "TG-tg", packet{foreign, outside, "tcp", 25, "NEW"}, passes},
		{"llmnet to a host service", "TGI-tg", packet{llm, "10.213.1.1", "tcp", 22, "NEW"}, denied},
		{"proxy to the host on 443", "TGI-tg", packet{proxy, "10.213.3.1", "tcp", 443, "NEW"}, denied},
		{"reply to a host connection", "TGI-tg", packet{fetch, "10.213.2.1", "tcp", 40000, "ESTABLISHED"}, passes},
		{"foreign traffic to the host", "TGI-tg", packet{foreign, "172.17.0.1", "tcp", 22, "NEW"}, passes},
	} {
		got := verdict(t, s, c.chain, c.p)
		if got == "ACCEPT" {
			t.Errorf("%s: ACCEPT skips Docker's and the host's own rules", c.name)
		}
		if (c.want == denied) != (got == "DROP") {
			t.Errorf("%s: verdict %q, want %s", c.name, got, map[bool]string{true: "DROP", false: "no DROP"}[c.want == denied])
		}
	}
}
