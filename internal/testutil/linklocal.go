package testutil

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// MetadataIP is the cloud metadata address that StartLinkLocal serves on.
const MetadataIP = "169.254.169.254"

// StartLinkLocal stands in for a cloud metadata service without touching
// a real one: a network namespace joined to the host by a veth pair, with
// 169.254.169.254/30 on the namespace's end (169.254.169.253 on the
// host's), and a TCP server on 169.254.169.254:port greeting
// "metadata-<port>". It skips when the host already routes that address
// (a real cloud host), and removes everything in t.Cleanup. Nothing leaves
// the machine.
func StartLinkLocal(t testing.TB, port int) string {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	if routeTaken("169.254.169.252/30") {
		t.Skip("the host already routes 169.254.169.252/30 (a real metadata service?); not shadowing it")
	}
	o := vethNS(t, "md", "169.254.169.253", MetadataIP, 30)
	addr := fmt.Sprintf("%s:%d", MetadataIP, port)
	serveBanner(t, o.NS, addr, fmt.Sprintf("metadata-%d\n", port))
	return addr
}

// StartPrivate is a namespace like StartOutside's, but on a private
// address (10.213.x.2/30, the host's end .1): a stand-in for a resolver on
// the host's private network (a VPC's, a router's). Serve DNS on it with
// StartDNS. Nothing leaves the machine.
func StartPrivate(t testing.TB) *Outside {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2 (ip)")
	}
	for try := 0; try < 20; try++ {
		n := rand.IntN(250)
		if routeTaken(fmt.Sprintf("10.213.%d.0/30", n)) {
			continue
		}
		return vethNS(t, "pv", fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n), 30)
	}
	t.Fatal("no free 10.213.x.0/30 for the private namespace")
	return nil
}

// vethNS makes a namespace joined to the host by a veth pair, hostIP on
// the host's end and nsIP on the namespace's (both /bits), the namespace
// routing everything back through the host. Removed in t.Cleanup.
func vethNS(t testing.TB, kind, hostIP, nsIP string, bits int) *Outside {
	t.Helper()
	suffix := fmt.Sprintf("%d%03d", os.Getpid()%1000, rand.IntN(1000))
	o := &Outside{NS: "meepa-test-" + kind + "-" + suffix, HostVeth: "mt" + kind + suffix, HostIP: hostIP, IP: nsIP,
		Prefix: fmt.Sprintf("%s/%d", nsIP, bits)}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", o.NS)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", o.HostVeth).Run()
		_ = exec.Command("ip", "netns", "del", o.NS).Run()
	})
	peer := o.HostVeth + "p"
	run("link", "add", o.HostVeth, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", o.NS)
	run("addr", "add", fmt.Sprintf("%s/%d", hostIP, bits), "dev", o.HostVeth)
	run("link", "set", o.HostVeth, "up")
	run("-n", o.NS, "addr", "add", fmt.Sprintf("%s/%d", nsIP, bits), "dev", peer)
	run("-n", o.NS, "link", "set", peer, "up")
	run("-n", o.NS, "link", "set", "lo", "up")
	run("-n", o.NS, "route", "add", "default", "via", hostIP)
	return o
}
