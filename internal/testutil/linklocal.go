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
	suffix := fmt.Sprintf("%d%03d", os.Getpid()%1000, rand.IntN(1000))
	ns, veth := "meepa-test-md-"+suffix, "mtm"+suffix
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", veth).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	peer := veth + "p"
	run("link", "add", veth, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", ns)
	run("addr", "add", "169.254.169.253/30", "dev", veth)
	run("link", "set", veth, "up")
	run("-n", ns, "addr", "add", MetadataIP+"/30", "dev", peer)
	run("-n", ns, "link", "set", peer, "up")
	run("-n", ns, "route", "add", "default", "via", "169.254.169.253")
	addr := fmt.Sprintf("%s:%d", MetadataIP, port)
	ln, err := listenInNetns("/run/netns/"+ns, addr)
	if err != nil {
		t.Fatalf("listen in %s: %v", ns, err)
	}
	Cleanup(t, "close listener", func() error { return Gone(ln.Close()) })
	banner := fmt.Sprintf("metadata-%d\n", port)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(banner))
			_ = c.Close() // one banner per connection
		}
	}()
	return addr
}
