package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/sandbox"
)

// localBroker is the runner's own egress proxy, for the bound secrets of
// an agent without a topology (agentspec.BrokerRunner). It lets every
// host through (proxy.Options.AnyHost) and exists to broker, opening no
// reach the tools lack: a host-mode agent's tools share the runner's
// network, and the broker reaches every range, as they do; a bridge
// container's tools reach it through a unix socket in the relay's
// directory, and it refuses the ranges the managed bridge drops. Its key
// is made when it starts and lives in the runner's memory only; each
// message gets a credential minted under it, as a FETCH message does
// under its topology's.
type localBroker struct {
	key    []byte
	ca     string // the upstream CA PEM it trusts besides the system's
	socket string // its unix socket for bridge containers; "" in host mode
	url    string // its loopback address, for the runner's own calls
	srv    *proxy.Server
}

// everything is every address: a host-mode agent's broker connects from
// the runner's network namespace, under the same rules as the tools.
var everything = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// bridgeReach is the one special range the managed bridge lets a
// container reach (firewall.BridgeBlocked leaves benchmarking space
// out); a bridge agent's broker refuses every other one, as the bridge
// drops them.
var bridgeReach = []netip.Prefix{netip.MustParsePrefix("198.18.0.0/15")}

// startLocalBroker starts the broker on loopback and, when socketDir is
// set (a bridge agent), on agentspec.EgressSocketName in it.
func startLocalBroker(log hclog.Logger, upstreamCA, socketDir string) (*localBroker, error) {
	key := make([]byte, proxy.KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("egress broker key: %w", err)
	}
	roots, err := proxy.UpstreamRoots(upstreamCA)
	if err != nil {
		return nil, fmt.Errorf("egress_upstream_ca: %w", err)
	}
	reach := everything
	if socketDir != "" {
		reach = bridgeReach
	}
	blog := log.Named("egress")
	srv, err := proxy.New(proxy.Options{Key: key, AnyHost: true, AllowPrivate: reach, UpstreamRoots: roots,
		Audit: auditLines{blog}, Logger: blog})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress broker: %w", err)
	}
	b := &localBroker{key: key, ca: upstreamCA, url: "http://" + ln.Addr().String(), srv: srv}
	if socketDir != "" {
		b.socket = filepath.Join(socketDir, agentspec.EgressSocketName)
		uln, err := listenSocket(b.socket)
		if err != nil {
			return nil, errors.Join(err, ln.Close())
		}
		go func() { _ = srv.Serve(uln) }() // returns once close shuts it down
	}
	go func() { _ = srv.Serve(ln) }()
	return b, nil
}

// listenSocket opens the broker's socket with the runner's own Listen
// (a stale socket replaced, nothing else), for any uid to connect to: the
// sandbox user is not the runner's, and only a live message's credential
// gets anything.
func listenSocket(path string) (net.Listener, error) {
	ln, err := Listen("unix://" + path)
	if err != nil {
		return nil, fmt.Errorf("egress broker: %w", err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		return nil, errors.Join(fmt.Errorf("egress broker: %w", err), ln.Close())
	}
	return ln, nil
}

func (b *localBroker) close(ctx context.Context) error { return b.srv.Shutdown(ctx) }

// auditLines writes the broker's audit lines into the runner's log.
type auditLines struct{ log hclog.Logger }

func (a auditLines) Write(p []byte) (int, error) {
	for line := range strings.SplitSeq(strings.TrimSpace(string(p)), "\n") {
		if line != "" {
			a.log.Info("egress audit", "record", line)
		}
	}
	return len(p), nil
}

// egressConfig is cfg as a message's egress sees it: an agent with bound
// secrets and no topology gets the runner's own broker (started on first
// need, and again when egress_upstream_ca changed) as its proxy, and a
// bridge container the broker's socket as it is mounted in the sandbox.
// Any other config is returned as it is.
func (s *Server) egressConfig(ctx context.Context, cfg *agentspec.Config) (c *agentspec.Config, socket string, err error) {
	if cfg.Egress != nil || len(cfg.SecretBindings) == 0 {
		return cfg, "", nil
	}
	if broker, _ := agentspec.BrokerOf(cfg); broker != agentspec.BrokerRunner {
		return cfg, "", nil // refused when the config was read
	}
	socketDir := ""
	if cfg.Container.Enabled {
		if socketDir = s.relay.Dir(); socketDir == "" {
			return nil, "", errors.New("the relay's directory, where a bridge container finds the broker, is not open")
		}
	}
	s.brokerMu.Lock()
	defer s.brokerMu.Unlock()
	if s.local != nil && (s.local.ca != cfg.EgressUpstreamCA || (s.local.socket == "") != (socketDir == "")) {
		if err := s.local.close(ctx); err != nil {
			s.log.Warn("egress broker did not stop cleanly", "error", err)
		}
		s.local = nil
	}
	if s.local == nil {
		b, err := startLocalBroker(s.log, cfg.EgressUpstreamCA, socketDir)
		if err != nil {
			return nil, "", err
		}
		s.local = b
		s.log.Info("egress broker started", "listen", strings.TrimPrefix(b.url, "http://"))
	}
	e := *cfg
	e.Egress = &agentspec.Egress{Key: hex.EncodeToString(proxy.AgentKey(s.local.key, cfg.AgentID)), Proxy: s.local.url}
	if socketDir != "" {
		socket = path.Join(sandbox.RelayMountDir, agentspec.EgressSocketName)
	}
	return &e, socket, nil
}

// closeBroker stops the runner's broker, if it runs.
func (s *Server) closeBroker(ctx context.Context) error {
	s.brokerMu.Lock()
	defer s.brokerMu.Unlock()
	if s.local == nil {
		return nil
	}
	err := s.local.close(ctx)
	s.local = nil
	return err
}
