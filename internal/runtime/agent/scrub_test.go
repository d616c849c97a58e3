package agent

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/redact"
)

// scrubRelay serves ScrubPath on a unix socket as the runner's relay
// would for a key the loop does not hold; down makes it refuse.
func scrubRelay(t *testing.T, key string, down bool) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "relay.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if down || r.URL.Path != ScrubPath || r.Header.Get("Authorization") != "Bearer tok-1" {
			http.Error(w, `{"error":{"message":"no"}}`, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, redact.NewRedactor(key).String(string(body)))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return sock
}

// TestWorkspaceWritesScrubbedByTheRelay: with a relay, memory.db's rows, a
// write_file and the seed are scrubbed of a key only the relay knows; when
// the relay cannot scrub, nothing is written raw: the write fails with a
// clear error.
func TestWorkspaceWritesScrubbedByTheRelay(t *testing.T) {
	const key = "sk-only-the-runner-knows-81f2"
	build := `printf '%s%s' sk-only-the-run ner-knows-81f2`
	for _, down := range []bool{false, true} {
		ws := t.TempDir()
		req := offlineReq("!sh " + build)
		req.LLM.APIKey = "tok-1"
		req.Relay = &Relay{Socket: scrubRelay(t, key, down)}
		rep := runReq(t, ws, req)
		_, err := os.Stat(filepath.Join(ws, MemoryFile))
		rows := ""
		if err == nil {
			rows = memoryRows(t, ws)
		}
		if strings.Contains(rows, key) {
			t.Errorf("down=%v: memory.db holds the key: %q", down, rows)
		}
		if down {
			if rep.ErrorKind != ErrKindWorkspace || !strings.Contains(rep.Error, "could not scrub") || strings.Contains(rows, "sk-only") {
				t.Errorf("relay down: %s %q, rows %q; want a workspace error and nothing stored", rep.ErrorKind, rep.Error, rows)
			}
		} else if rep.ErrorKind != "" || !strings.Contains(rows, redact.Redacted) {
			t.Errorf("relay up: %s %q, rows %q", rep.ErrorKind, rep.Error, rows)
		}

		// The file tool and the seed go the same way.
		tb, err := NewToolbox(ws, nil)
		if err != nil {
			t.Fatal(err)
		}
		tr, stop, err := relayTransport(req.Relay, nil)
		if err != nil {
			t.Fatal(err)
		}
		sc := &scrubber{red: redact.NewRedactor(), remote: relayScrub(tr, "tok-1")}
		tb.red = sc
		_, werr := tb.WriteFile(t.Context(), "notes.txt", "k="+key)
		serr := applySeed(t.Context(), &agentspec.Seed{Soul: "soul " + key, ManageSoul: true}, ws, sc, hclog.NewNullLogger())
		stop()
		_ = tb.Close()
		if down && (werr == nil || serr == nil) {
			t.Errorf("relay down: write_file %v, seed %v; want both refused", werr, serr)
		}
		if !down && (werr != nil || serr != nil) {
			t.Errorf("relay up: write_file %v, seed %v", werr, serr)
		}
		assertNoSecretOnDisk(t, ws, key)
	}
}
