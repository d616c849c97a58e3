package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// fakeLLM is a loopback server that answers with scripted bodies, one per
// request in order, and records what it was sent.
type fakeLLM struct {
	t       *testing.T
	srv     *httptest.Server
	path    string
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
	answers []fakeAnswer
}

type fakeAnswer struct {
	status int
	body   string
	header map[string]string
}

func newFakeLLM(t *testing.T, path string, answers ...fakeAnswer) *fakeLLM {
	t.Helper()
	f := &fakeLLM{t: t, path: path, answers: answers}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != f.path {
		f.t.Errorf("fake LLM: unexpected %s %s (want POST %s)", r.Method, r.URL.Path, f.path)
		http.Error(w, `{"error":{"message":"wrong path"}}`, http.StatusNotFound)
		return
	}
	data, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(data, &body); err != nil {
		f.t.Errorf("fake LLM: request body is not JSON: %v", err)
	}
	f.bodies = append(f.bodies, body)
	f.headers = append(f.headers, r.Header.Clone())
	n := len(f.bodies) - 1
	if n >= len(f.answers) {
		f.t.Errorf("fake LLM: request %d has no scripted answer", n+1)
		http.Error(w, `{"error":{"message":"no more answers"}}`, http.StatusInternalServerError)
		return
	}
	a := f.answers[n]
	w.Header().Set("Content-Type", "application/json")
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	if a.status == 0 {
		a.status = http.StatusOK
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (f *fakeLLM) requests() []map[string]any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]map[string]any(nil), f.bodies...)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func runReq(t *testing.T, ws string, req Request) *Reply {
	t.Helper()
	rep := Run(context.Background(), &req, Options{Workspace: ws})
	if rep == nil {
		t.Fatal("Run returned nil")
	}
	return rep
}

// assertNoSecretOnDisk fails when any file under dir holds the secret.
func assertNoSecretOnDisk(t *testing.T, dir, secret string) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		files++
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Errorf("secret found on disk in %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files == 0 {
		t.Errorf("no file in %s: the scan proves nothing (memory.db should be there)", dir)
	}
}
