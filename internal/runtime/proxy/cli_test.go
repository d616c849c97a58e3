package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAgentRunnerProxyProcess runs the real binary: `agent-runner proxy`
// with flags and an allow file, one allowed and one denied request, then
// SIGTERM, and reads the audit file back.
func TestAgentRunnerProxyProcess(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	echo := startEcho(t)
	dir := t.TempDir()
	auditPath := filepath.Join(dir, "audit.jsonl")
	allowFile := filepath.Join(dir, "allow.txt")
	testutil.Must(t, os.WriteFile(allowFile, []byte("# test allowlist\n\n*.unused.example:8443  # comment\n"), 0o644))

	cmd := exec.Command(bin, "proxy",
		"--listen", "127.0.0.1:0",
		"--allow", hostPort("127.0.0.1", echo.port()),
		"--allow-file", allowFile,
		"--audit", auditPath,
		"--shutdown-grace", "2s")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	testutil.Cleanup(t, "kill proxy", func() error {
		if cmd.ProcessState != nil {
			return nil
		}
		return testutil.Gone(cmd.Process.Kill())
	})

	// The startup line on stderr says where it listens and what it allows.
	sc := bufio.NewScanner(stderr)
	var addr string
	var startup map[string]any
	for addr == "" && sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) == nil && line["@message"] == "proxy listening" {
			addr, _ = line["address"].(string)
			startup = line
		}
	}
	if addr == "" {
		t.Fatalf("no startup line (scan error %v)", sc.Err())
	}
	go func() {
		_, _ = io.Copy(io.Discard, stderr) // drained so the proxy never blocks on it
		exited <- cmd.Wait()
	}()
	if allow, _ := json.Marshal(startup["allow"]); !bytes.Contains(allow, []byte("*.unused.example:8443")) {
		t.Errorf("startup allow list %s lacks the allow-file entry", allow)
	}

	resp, _, tun := connect(t, addr, hostPort("127.0.0.1", echo.port()))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("allowed CONNECT: %d", resp.StatusCode)
	}
	_, _ = tun.Write([]byte("hi"))
	_ = tun.(*net.TCPConn).CloseWrite()
	if b, _ := io.ReadAll(tun); string(b) != "hi" {
		t.Fatalf("echo %q", b)
	}
	resp, body, _ := connect(t, addr, hostPort("127.0.0.1", echo.port()+1))
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "not in allowlist") {
		t.Fatalf("denied CONNECT: %d %q", resp.StatusCode, body)
	}

	waitFor(t, "two audit lines", func() bool {
		b, _ := os.ReadFile(auditPath)
		return bytes.Count(b, []byte("\n")) >= 2
	})
	testutil.Must(t, cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("proxy exited with %v after SIGTERM, want 0", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("proxy did not exit after SIGTERM")
	}

	b, err := os.ReadFile(auditPath)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(auditPath); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file mode %v, want 0600", fi.Mode().Perm())
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("audit lines: %q", lines)
	}
	var recs [2]AuditRecord
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &recs[i]); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
	}
	if recs[0].Decision == DecisionDeny { // the tunnel's line is written when it closes
		recs[0], recs[1] = recs[1], recs[0]
	}
	if recs[0].Decision != DecisionAllow || recs[0].BytesUp != 2 || recs[0].BytesDown != 2 || recs[0].IP != "127.0.0.1" {
		t.Errorf("allowed line: %+v", recs[0])
	}
	if recs[1].Decision != DecisionDeny || recs[1].Status != 403 || recs[1].Port != echo.port()+1 {
		t.Errorf("denied line: %+v", recs[1])
	}
}

func TestAgentRunnerProxyRejectsBadFlags(t *testing.T) {
	bin := testutil.RunnerBinary(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow", "https://example.com"}, "scheme"},
		{[]string{"--allow", "example.com:0"}, "port 0"},
		{[]string{"--allow-private", "10.0.0.1/8"}, "host bits"},
		{[]string{"--dns", "resolver.example"}, "dns server"},
		{[]string{"--allow-file", "/nonexistent/allow.txt"}, "allow file"},
	} {
		cmd := exec.Command(bin, append([]string{"proxy", "--listen", "127.0.0.1:0"}, tc.args...)...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 {
			t.Errorf("%v: err %v, want exit status 2\n%s", tc.args, err, out)
			continue
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("%v: output %q lacks %q", tc.args, out, tc.want)
		}
	}
}
