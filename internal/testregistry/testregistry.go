// Package testregistry runs an OCI registry (go-containerregistry's
// pkg/registry, blobs in memory) for tests and for a test cluster: nothing
// is ever pulled from outside, so the images the provider builds reach a
// cluster's nodes through this.
//
// A cluster whose nodes live in their own network namespace (the
// project's single-node test cluster) reaches the registry when the same
// Server also listens inside that namespace: ListenInNetns opens a listener
// there, and Serve serves it from the same storage. Listen on the same
// address in both namespaces (127.0.0.1:<port>) and one image reference,
// 127.0.0.1:<port>/meepa-sandbox@sha256:…, works for the pusher on the host
// and for containerd in the cluster. The registry speaks plain HTTP: the
// pusher needs Insecure, containerd a mirror entry with an http:// endpoint.
package testregistry

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"golang.org/x/sys/unix"
)

// Options configure a Server. The zero value is an anonymous registry that
// logs nothing.
type Options struct {
	// Username and Password, when set, are required as Basic credentials.
	Username string
	Password string
	// Token, when set, is accepted as a bearer token.
	Token string
	// Log receives one line per request (method, path, status); nil: none.
	Log io.Writer
}

// Server is one registry, served on any number of listeners.
type Server struct {
	handler http.Handler
	mu      sync.Mutex
	servers []*http.Server
	errs    []error
	wg      sync.WaitGroup
}

// New returns a registry that serves nothing yet.
func New(o Options) *Server {
	logger := log.New(io.Discard, "", 0)
	if o.Log != nil {
		logger = log.New(o.Log, "registry: ", log.LstdFlags)
	}
	h := registry.New(registry.Logger(logger))
	if o.Username != "" || o.Token != "" {
		h = requireAuth(o, h)
	}
	return &Server{handler: h}
}

// Start listens on addr ("127.0.0.1:0" for a free port) in this process's
// network namespace and serves; it returns the Server and the address
// taken.
func Start(addr string, o Options) (*Server, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("registry listen %s: %w", addr, err)
	}
	s := New(o)
	s.Serve(ln)
	return s, ln.Addr().String(), nil
}

// Serve serves ln until Close. Every listener shares the same storage.
func (s *Server) Serve(ln net.Listener) {
	hs := &http.Server{Handler: s.handler, ReadHeaderTimeout: 30 * time.Second}
	s.mu.Lock()
	s.servers = append(s.servers, hs)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.mu.Lock()
			s.errs = append(s.errs, fmt.Errorf("registry serve %s: %w", ln.Addr(), err))
			s.mu.Unlock()
		}
	}()
}

// Close stops every listener and reports any serve error met.
func (s *Server) Close() error {
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	var errs []error
	for _, hs := range servers {
		errs = append(errs, hs.Close())
	}
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return errors.Join(append(errs, s.errs...)...)
}

// requireAuth answers 401 with a Basic challenge unless the request
// carries the configured Basic credentials or bearer token.
func requireAuth(o Options, next http.Handler) http.Handler {
	eq := func(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := false
		if u, p, basic := r.BasicAuth(); basic && o.Username != "" {
			ok = eq(u, o.Username) && eq(p, o.Password)
		} else if tok, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); bearer && o.Token != "" {
			ok = eq(tok, o.Token)
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Basic realm="meepa-test-registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ListenInNetns opens a TCP listener on addr inside the network namespace
// at nsPath (such as /proc/<pid>/ns/net). The listener stays in that
// namespace; the calling goroutine's thread is moved there and back, and
// is not reused if moving back fails.
func ListenInNetns(nsPath, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ln, home, err := listenOnThread(nsPath, addr)
		if home {
			runtime.UnlockOSThread() // else the thread dies with the goroutine
		}
		ch <- result{ln, err}
	}()
	r := <-ch
	return r.ln, r.err
}

func listenOnThread(nsPath, addr string) (ln net.Listener, home bool, err error) {
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("open own network namespace: %w", err)
	}
	defer func() { _ = unix.Close(self) }() // read-only descriptor
	target, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, true, fmt.Errorf("open network namespace %s: %w", nsPath, err)
	}
	defer func() { _ = unix.Close(target) }() // read-only descriptor
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return nil, true, fmt.Errorf("enter network namespace %s: %w", nsPath, err)
	}
	ln, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
		if ln != nil {
			_ = ln.Close() // the thread is lost; so is this listener
		}
		return nil, false, fmt.Errorf("return from network namespace %s: %w", nsPath, err)
	}
	if lerr != nil {
		return nil, true, fmt.Errorf("registry listen %s in %s: %w", addr, nsPath, lerr)
	}
	return ln, true, nil
}
