package testregistry

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

func TestAuth(t *testing.T) {
	srv, addr, err := Start("127.0.0.1:0", Options{Username: "u", Password: "p", Token: "tok"})
	testutil.Must(t, err)
	testutil.Cleanup(t, "registry", srv.Close)
	for _, c := range []struct {
		name   string
		header string
		want   int
	}{
		{"anonymous", "", http.StatusUnauthorized},
		{"basic", "Basic dTpw", http.StatusOK},                 // u:p
		{"basic wrong", "Basic dTpx", http.StatusUnauthorized}, // u:q
		{"bearer", "Bearer tok", http.StatusOK},
		{"bearer wrong", "Bearer tok2", http.StatusUnauthorized},
	} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/v2/", nil)
		testutil.Must(t, err)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close() // status only
		if resp.StatusCode != c.want {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.want)
		}
		if c.want == http.StatusUnauthorized && !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Basic ") {
			t.Errorf("%s: challenge %q, want Basic", c.name, resp.Header.Get("WWW-Authenticate"))
		}
	}
}

// TestListenInNetns: a listener opened in a fresh network namespace (only
// its loopback, so the host's listener cannot answer there) serves, on the
// host side's address, what was uploaded through the host side.
func TestListenInNetns(t *testing.T) {
	testutil.RequireDocker(t) // the acceptance set: root, namespaces, the shared lock
	if os.Geteuid() != 0 {
		t.Skip("needs root to enter a network namespace")
	}
	holder := exec.Command("unshare", "--net", "sleep", "300")
	testutil.Must(t, holder.Start())
	testutil.Cleanup(t, "namespace holder", func() error {
		_ = holder.Process.Kill() // ours; Wait reports how it ended
		err := holder.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			return err
		}
		return nil
	})
	nsPath := "/proc/" + strconv.Itoa(holder.Process.Pid) + "/ns/net"
	waitNetns(t, nsPath)
	testutil.Must(t, exec.Command("nsenter", "--net="+nsPath, "ip", "link", "set", "lo", "up").Run())

	srv, addr, err := Start("127.0.0.1:0", Options{})
	testutil.Must(t, err)
	testutil.Cleanup(t, "registry", srv.Close)
	ln, err := ListenInNetns(nsPath, addr)
	if err != nil {
		t.Fatal(err)
	}
	srv.Serve(ln)
	// Upload a blob on the host side; fetch it inside the namespace.
	blob := "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae" // "foo"
	resp, err := http.Post("http://"+addr+"/v2/x/blobs/uploads/?digest="+blob, "application/octet-stream", strings.NewReader("foo"))
	testutil.Must(t, err)
	_ = resp.Body.Close() // status only
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("blob upload: %s", resp.Status)
	}
	out, err := exec.Command("nsenter", "--net="+nsPath, "curl", "-sf", "--max-time", "5", "http://"+addr+"/v2/x/blobs/"+blob).Output()
	if err != nil || string(out) != "foo" {
		t.Fatalf("blob from inside the namespace: %q, %v", out, err)
	}
}

func waitNetns(t *testing.T, nsPath string) {
	t.Helper()
	self, err := os.Readlink("/proc/self/ns/net")
	testutil.Must(t, err)
	for i := 0; i < 100; i++ {
		if l, err := os.Readlink(nsPath); err == nil && l != self {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s never became a network namespace of its own", nsPath)
}
