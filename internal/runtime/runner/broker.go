package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// localBroker is the runner's own egress proxy, for a host-mode agent's
// bound secrets (agentspec.BrokerRunner). The agent's tools run in the
// runner's network namespace, so it listens on loopback and lets every
// destination through (proxy.Options.AnyHost, every range): it opens no
// reach the tools lack, and exists to broker. Its key is made when it
// starts and lives in the runner's memory only; each message gets a
// credential minted under it, as a FETCH message does under its
// topology's.
type localBroker struct {
	key []byte
	ca  string // the upstream CA PEM it trusts besides the system's
	url string
	srv *proxy.Server
}

// everything is every address: the broker's connections leave from the
// runner's network namespace, under the same rules as the tools' own.
var everything = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

func startLocalBroker(log hclog.Logger, upstreamCA string) (*localBroker, error) {
	key := make([]byte, proxy.KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("egress broker key: %w", err)
	}
	roots, err := proxy.UpstreamRoots(upstreamCA)
	if err != nil {
		return nil, fmt.Errorf("egress_upstream_ca: %w", err)
	}
	blog := log.Named("egress")
	srv, err := proxy.New(proxy.Options{Key: key, AnyHost: true, AllowPrivate: everything, UpstreamRoots: roots,
		Audit: auditLines{blog}, Logger: blog})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress broker: %w", err)
	}
	go func() { _ = srv.Serve(ln) }() // returns once close shuts it down
	return &localBroker{key: key, ca: upstreamCA, url: "http://" + ln.Addr().String(), srv: srv}, nil
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

// egressConfig is cfg as a message's egress sees it: a host-mode agent
// with bound secrets gets the runner's own broker (started on first
// need, and again when egress_upstream_ca changed) as its proxy. Any
// other config is returned as it is.
func (s *Server) egressConfig(ctx context.Context, cfg *agentspec.Config) (*agentspec.Config, error) {
	if cfg.Egress != nil || len(cfg.SecretBindings) == 0 {
		return cfg, nil
	}
	if broker, _ := agentspec.BrokerOf(cfg); broker != agentspec.BrokerRunner {
		return cfg, nil // refused when the config was read
	}
	s.brokerMu.Lock()
	defer s.brokerMu.Unlock()
	if s.local != nil && s.local.ca != cfg.EgressUpstreamCA {
		if err := s.local.close(ctx); err != nil {
			s.log.Warn("egress broker did not stop cleanly", "error", err)
		}
		s.local = nil
	}
	if s.local == nil {
		b, err := startLocalBroker(s.log, cfg.EgressUpstreamCA)
		if err != nil {
			return nil, err
		}
		s.local = b
		s.log.Info("egress broker started", "listen", strings.TrimPrefix(b.url, "http://"))
	}
	c := *cfg
	c.Egress = &agentspec.Egress{Key: hex.EncodeToString(proxy.AgentKey(s.local.key, cfg.AgentID)), Proxy: s.local.url}
	return &c, nil
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
