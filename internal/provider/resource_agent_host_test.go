package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
	"github.com/hashicorp/terraform-plugin-testing/tfversion"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/deploy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
	"github.com/bogpad/terraform-provider-meepa/internal/testutil"
)

// TestAccAgent_hostMode: container mode off, so the runner container runs
// each message as a Landlock-restricted child. The table, through
// terraform apply, the runner and the offline provider's shell tool: with
// allow_read = [A, home], allow_read_write = [B], deny = [B/secret], reading
// A works and writing it fails; writing B works; B/secret can be neither
// read nor written; what is not granted (a file of the runner's image, the
// runner's /tmp, the runner's own config) is denied; home dotfiles are
// denied until allow_home_dotfiles; and a TCP connection to a server the
// test starts on the runner's loopback fails with allow_network = false and
// works with true (second step). The allowed paths are mounted into the
// runner at the same paths; the runner's Landlock ABI shows in
// landlock_abi. It listens on a loopback TCP port, published by the runner
// container on the host's 127.0.0.1 only.
func TestAccAgent_hostMode(t *testing.T) {
	testutil.RequireDocker(t)
	cli := testutil.Docker(t)
	image := testutil.EnsureRunnerImage(t, cli)
	stateDir := t.TempDir()
	root := t.TempDir()
	data := filepath.Join(root, "a")
	rw := filepath.Join(root, "b")
	secret := filepath.Join(rw, "secret")
	private := filepath.Join(rw, "private.txt")
	home := filepath.Join(root, "home")
	for _, d := range []string{data, secret, filepath.Join(rw, "sub"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	id := "tf-acc-agent-host" + "-" + runID
	// Another agent's workspace under the same state_dir.
	other := filepath.Join(stateDir, "agents", "tf-acc-other-"+runID)
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	for p, content := range map[string]string{
		filepath.Join(data, "doc.txt"):    "readable doc",
		filepath.Join(rw, "existing.txt"): "b-data",
		filepath.Join(secret, "key"):      "top-secret",
		private:                           "file-secret",
		filepath.Join(home, ".netrc"):     "machine x password hunter2",
		filepath.Join(home, "notes.txt"):  "home notes",
		filepath.Join(other, "MEMORY.md"): "other agent memory",
	} {
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A root runner runs the agent under a uid of its own: the tree it may
	// write must be writable by that uid (Landlock grants, Unix permits).
	agentUID := os.Getuid()
	if agentUID == 0 {
		agentUID = agentspec.AgentUID(id)
		if err := sandbox.ChownTree(rw, agentUID, agentUID); err != nil {
			t.Fatal(err)
		}
	}
	// allow_home_dotfiles is about the home of the user who runs Terraform
	// (the provider reads $HOME). Set after the runner binary is built,
	// which needs the real HOME's Go caches.
	t.Setenv("HOME", home)
	port := freePort(t)
	// The test's TCP server listens inside the runner container's network
	// namespace, on its loopback: nothing leaves it.
	srvPort := 17777
	if port == srvPort {
		srvPort++
	}
	cleanupAgent(t, cli, id)
	cfg := func(network, dotfiles bool) string {
		return fmt.Sprintf(`
provider "meepa" {
  state_dir = %[1]q
}

resource "meepa_agent" "h" {
  agent_id = %[2]q
  llm      = { provider = "offline" }
  runner = {
    image  = %[3]q
    listen = "127.0.0.1:%[5]d"
  }
  file_access = {
    allow_read          = [%[4]q, %[6]q]
    allow_read_write    = [%[7]q]
    deny                = [%[8]q, %[11]q]
    allow_network       = %[9]t
    allow_home_dotfiles = %[10]t
  }
}
`, stateDir, id, image, data, port, home, rw, secret, network, dotfiles, private)
	}
	// sh runs "!sh cmd" through the agent's endpoint and returns the
	// shell's exit code and output.
	sh := func(s *terraform.State, cmd string) (int, string, error) {
		tok := s.RootModule().Resources["meepa_agent.h"].Primary.Attributes["token"]
		r, code, err := sendTo(deploy.Listener{Port: port}, tok, "!sh "+cmd)
		if err != nil || code != 200 {
			return 0, "", fmt.Errorf("%q: %d %v %+v", cmd, code, err, r)
		}
		var exit int
		if _, err := fmt.Sscanf(r.Reply, "exit %d", &exit); err != nil {
			return 0, "", fmt.Errorf("%q: reply %q", cmd, r.Reply)
		}
		_, out, _ := strings.Cut(r.Reply, "\n")
		return exit, out, nil
	}
	ok := func(s *terraform.State, cmd, want string) error {
		code, out, err := sh(s, cmd)
		if err != nil {
			return err
		}
		if code != 0 || !strings.Contains(out, want) {
			return fmt.Errorf("%q: exit %d, output %q; want exit 0 and %q", cmd, code, out, want)
		}
		return nil
	}
	// denied wants a failure that Landlock made (the path exists in the
	// runner, so the error is not a missing file) and nothing of leak.
	denied := func(s *terraform.State, cmd, leak string) error {
		code, out, err := sh(s, cmd)
		if err != nil {
			return err
		}
		if code == 0 || !strings.Contains(out, "Permission denied") || (leak != "" && strings.Contains(out, leak)) {
			return fmt.Errorf("%q: exit %d, output %q; want Permission denied", cmd, code, out)
		}
		return nil
	}
	// fails wants a failure, whatever its cause, that shows nothing of leak.
	fails := func(s *terraform.State, cmd, leak string) error {
		code, out, err := sh(s, cmd)
		if err != nil {
			return err
		}
		if code == 0 || strings.Contains(out, leak) {
			return fmt.Errorf("%q: exit %d, output %q; want a failure", cmd, code, out)
		}
		return nil
	}
	dial := fmt.Sprintf("nc 127.0.0.1 %d </dev/null", srvPort)

	resource.Test(t, resource.TestCase{
		PreCheck:                 func() { testAccPreCheck(t) },
		TerraformVersionChecks:   []tfversion.TerraformVersionCheck{tfversion.SkipBelow(tfversion.Version1_11_0)},
		ProtoV6ProviderFactories: testAccProviders,
		Steps: []resource.TestStep{{
			Config: cfg(false, false),
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("runner_status"), knownvalue.StringExact("running")),
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("landlock_abi"), knownvalue.NotNull()),
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("agent_uid"), knownvalue.Int64Exact(int64(agentUID))),
				statecheck.ExpectKnownValue("meepa_agent.h", tfjsonpath.New("endpoint"), knownvalue.StringExact(fmt.Sprintf("http://127.0.0.1:%d", port))),
			},
			Check: func(s *terraform.State) error {
				a := s.RootModule().Resources["meepa_agent.h"].Primary.Attributes
				if a["landlock_abi"] == "0" {
					return fmt.Errorf("landlock_abi 0: the runner container sees no Landlock")
				}
				// The runner runs with the Landlock-enabling seccomp profile,
				// never unconfined.
				ci, err := cli.ContainerInspect(context.Background(), deploy.ContainerName(id))
				if err != nil {
					return err
				}
				seccomp := ""
				for _, o := range ci.HostConfig.SecurityOpt {
					if strings.HasPrefix(o, "seccomp=") {
						seccomp = o
					}
				}
				if !strings.Contains(seccomp, "landlock_create_ruleset") || strings.Contains(seccomp, "unconfined") {
					return fmt.Errorf("runner seccomp option %.80q", seccomp)
				}
				if err := startLoopbackServer(cli, deploy.ContainerName(id), srvPort); err != nil {
					return err
				}
				// Each check runs even when one before it failed, so one run
				// shows the whole table.
				return errors.Join(
					ok(s, "cat "+filepath.Join(data, "doc.txt"), "readable doc"),
					fails(s, "echo x > "+filepath.Join(data, "new.txt")+" && echo WROTE", "WROTE"),
					ok(s, "echo written > "+filepath.Join(rw, "existing.txt")+" && echo new > "+filepath.Join(rw, "sub", "new.txt")+" && echo WROTE", "WROTE"),
					checkFileContent(filepath.Join(rw, "existing.txt"), "written\n"),
					checkFileContent(filepath.Join(rw, "sub", "new.txt"), "new\n"),
					// Deny inside allow is exact: the runner container has an
					// empty read-only mount over each denied path, so the
					// tree around them stays whole (create and list directly
					// in it) and the denied paths show nothing.
					ok(s, "echo made > "+filepath.Join(rw, "created.txt")+" && ls "+rw, "created.txt"),
					checkFileContent(filepath.Join(rw, "created.txt"), "made\n"),
					ok(s, "test -z \"$(ls -A "+secret+")\" && echo EMPTY", "EMPTY"),
					fails(s, "cat "+filepath.Join(secret, "key"), "top-secret"),
					ok(s, "test ! -s "+private+" && echo EMPTYFILE", "EMPTYFILE"),
					fails(s, "echo x > "+filepath.Join(secret, "key")+" && echo WROTE", "WROTE"),
					fails(s, "echo x > "+filepath.Join(secret, "new")+" && echo WROTE", "WROTE"),
					fails(s, "echo x > "+private+" && echo WROTE", "WROTE"),
					checkFileContent(filepath.Join(secret, "key"), "top-secret"),
					checkFileContent(private, "file-secret"),
					// The runner image has no /etc/shadow; /etc/passwd it has,
					// and it is not granted.
					fails(s, "cat /etc/shadow", "root:"),
					denied(s, "cat /etc/passwd", "root:"),
					// Another agent's workspace is not even mounted into this
					// agent's runner; whatever the cause, it stays unreadable.
					fails(s, "cat "+filepath.Join(other, "MEMORY.md"), "other agent memory"),
					denied(s, "cat "+deploy.LayoutFor(stateDir, id).ConfigFile, a["token"]),
					// The journal holds message text: this very message's
					// record is in it while it runs.
					denied(s, "ls "+deploy.LayoutFor(stateDir, id).JournalDir, "msg-"),
					// The runner's /tmp is writable by the runner, not by the
					// agent (its TMPDIR is a private directory inside it).
					denied(s, "echo x > /tmp/meepa-outside-"+runID, ""),
					denied(s, "cat "+filepath.Join(home, ".netrc"), "hunter2"),
					ok(s, "cat "+filepath.Join(home, "notes.txt"), "home notes"),
					ok(s, "echo ok > note.txt && cat note.txt", "ok"),
					denied(s, dial, "hello-from-test"),
					// Its own uid, and no capability left from the runner's
					// (chown of its own file to root fails): chmod, which
					// Landlock does not govern, fails on the runner's
					// directories because they are not its own.
					ok(s, "id -u", strconv.Itoa(agentUID)),
					fails(s, "chown 0:0 note.txt && echo CHOWN", "CHOWN"),
					fails(s, "chmod 0777 "+deploy.LayoutFor(stateDir, id).SocketDir+" && echo CHMOD", "CHMOD"),
					fails(s, "chmod 0644 "+deploy.LayoutFor(stateDir, id).ConfigFile+" && echo CHMOD", "CHMOD"),
				)
			},
		}, {
			Config: cfg(true, true),
			Check: func(s *terraform.State) error {
				// The runner was replaced: the server starts in the new one.
				if err := startLoopbackServer(cli, deploy.ContainerName(id), srvPort); err != nil {
					return err
				}
				return errors.Join(
					ok(s, dial, "hello-from-test"),
					ok(s, "cat "+filepath.Join(home, ".netrc"), "hunter2"),
					fails(s, "cat "+filepath.Join(secret, "key"), "top-secret"),
				)
			},
		}},
	})
}

// checkFileContent compares a host file with what it must hold.
func checkFileContent(p, want string) error {
	raw, err := os.ReadFile(p)
	if err != nil {
		return err
	}
	if string(raw) != want {
		return fmt.Errorf("%s holds %q, want %q", p, raw, want)
	}
	return nil
}

// startLoopbackServer starts a TCP server on 127.0.0.1:port inside a
// running container (busybox nc, answering every connection with
// "hello-from-test") and waits until it answers a probe made outside any
// agent sandbox, so that a refused agent connection means the sandbox
// refused it.
func startLoopbackServer(cli client.APIClient, ctr string, port int) error {
	ctx := context.Background()
	ex, err := cli.ContainerExecCreate(ctx, ctr, container.ExecOptions{
		Cmd: []string{"nc", "-ll", "-p", strconv.Itoa(port), "-e", "echo", "hello-from-test"},
	})
	if err != nil {
		return fmt.Errorf("loopback server: %w", err)
	}
	if err := cli.ContainerExecStart(ctx, ex.ID, container.ExecStartOptions{Detach: true}); err != nil {
		return fmt.Errorf("loopback server: %w", err)
	}
	var last string
	for range 50 {
		probe, err := cli.ContainerExecCreate(ctx, ctr, container.ExecOptions{
			Cmd: []string{"sh", "-c", fmt.Sprintf("nc 127.0.0.1 %d </dev/null", port)}, AttachStdout: true, AttachStderr: true,
		})
		if err != nil {
			return fmt.Errorf("loopback server probe: %w", err)
		}
		hr, err := cli.ContainerExecAttach(ctx, probe.ID, container.ExecAttachOptions{})
		if err != nil {
			return fmt.Errorf("loopback server probe: %w", err)
		}
		var out bytes.Buffer
		_, _ = stdcopy.StdCopy(&out, &out, hr.Reader)
		hr.Close()
		if strings.Contains(out.String(), "hello-from-test") {
			return nil
		}
		last = out.String()
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("loopback server in %s never answered: %q", ctr, last)
}

// freePort asks the kernel for a loopback port that is free right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
