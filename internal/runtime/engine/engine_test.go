package engine

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestConnectNamesTheHostItTried(t *testing.T) {
	host := "unix:///nonexistent/meepa-test.sock"
	_, err := Connect(context.Background(), Options{Host: host})
	if err == nil {
		t.Fatal("Connect to a missing socket succeeded")
	}
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), host) {
		t.Fatalf("error %q should wrap ErrUnreachable and name %s", err, host)
	}
}

// A daemon that speaks an older API: the client must negotiate down to it
// rather than send requests the daemon rejects.
func TestConnectNegotiatesAPIVersion(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		w.Header().Set("Api-Version", "1.41")
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte("OK"))
	}))
	defer srv.Close()
	cli, err := Connect(context.Background(), Options{Host: "tcp://" + strings.TrimPrefix(srv.URL, "http://")})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cli.Close() }()
	if got := cli.ClientVersion(); got != "1.41" {
		t.Fatalf("negotiated API version %q, want 1.41 (requests: %v)", got, paths)
	}
}

func TestLabelsPrefixAndOwnership(t *testing.T) {
	l := Labels("runner", map[string]string{"agent-id": "a1", LabelPrefix + "message-id": "m1"})
	want := map[string]string{
		LabelManagedBy:             ManagedByValue,
		LabelComponent:             "runner",
		LabelPrefix + "agent-id":   "a1",
		LabelPrefix + "message-id": "m1",
	}
	if len(l) != len(want) {
		t.Fatalf("labels %v, want %v", l, want)
	}
	for k, v := range want {
		if l[k] != v {
			t.Fatalf("label %s = %q, want %q (all: %v)", k, l[k], v, l)
		}
	}
}
