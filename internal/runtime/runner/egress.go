package runner

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agent"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// egressSlack is added to a message's timeout for its credential's
// expiry: the sandbox is killed at the timeout, and the runner revokes
// the credential then; the expiry is the backstop when the revoke is lost.
const egressSlack = 30 * time.Second

// egressMessage is one message's egress identity.
type egressMessage struct {
	self proxy.Self
}

// proxyLocator is a backend that finds the topology's proxy afresh for
// each message (a cluster's: the proxy pod's address changes when it is
// replaced); "" means the config's.
type proxyLocator interface {
	EgressProxy(ctx context.Context) (string, error)
}

// beginEgress mints the message's credential and puts it in req's proxy
// variables' userinfo (req.Env is replaced, never changed), at proxyURL,
// or the config's proxy when it is "". With bound secrets it registers
// them with the proxy and gives req their placeholders and the agent's
// CA. Without cfg.Egress it changes nothing and returns nil.
func beginEgress(ctx context.Context, cfg *agentspec.Config, id string, req *agent.Request, proxyURL string) (*egressMessage, error) {
	e := cfg.Egress
	if e == nil {
		return nil, nil
	}
	if proxyURL == "" {
		proxyURL = e.Proxy
	}
	key, err := hex.DecodeString(e.Key)
	if err != nil {
		return nil, fmt.Errorf("egress key: %w", err)
	}
	cred, err := proxy.Mint(key, proxy.Claims{Agent: cfg.AgentID, Role: cfg.Role, Message: id,
		Expiry: time.Now().Add(cfg.Container.Timeout() + egressSlack).Unix(), Policy: e.Policy})
	if err != nil {
		return nil, err
	}
	u, err := proxy.ProxyURLWith(proxyURL, cfg.AgentID, cred)
	if err != nil {
		return nil, err
	}
	m := &egressMessage{self: proxy.Self{Proxy: strings.TrimSuffix(proxyURL, "/"), Agent: cfg.AgentID, Credential: cred}}
	if len(cfg.SecretBindings) > 0 {
		if err := m.broker(ctx, cfg, key, id, req); err != nil {
			return nil, err
		}
	}
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
		env[k] = u
	}
	req.Env = env
	return m, nil
}

// broker registers the message's bound secrets with the proxy, each under
// a new placeholder, and gives req the placeholders and the agent's CA.
func (m *egressMessage) broker(ctx context.Context, cfg *agentspec.Config, key []byte, id string, req *agent.Request) error {
	var binds []proxy.Binding
	for _, name := range agentspec.BoundSecretNames(cfg) {
		b := cfg.SecretBindings[name]
		value, ok := cfg.Secrets[name]
		if !ok {
			return fmt.Errorf("secret_bindings[%q]: no such secret", name)
		}
		hosts, err := proxy.ParseAllowlist(b.Hosts)
		if err != nil {
			return fmt.Errorf("secret_bindings[%q]: %w", name, err)
		}
		ph, err := proxy.NewPlaceholder(name)
		if err != nil {
			return err
		}
		binds = append(binds, proxy.Binding{Name: name, Placeholder: ph, Value: value, Hosts: hosts, Header: b.HeaderOrDefault(), BasicUser: b.BasicUser})
		req.Brokered = append(req.Brokered, agent.Brokered{Name: name, Placeholder: ph, SecretBinding: b})
	}
	if err := m.self.Register(ctx, key, id, binds); err != nil {
		return err
	}
	ca, err := m.self.AgentCA(ctx)
	if err != nil {
		return err
	}
	req.EgressCA = string(ca)
	return nil
}

// end revokes the credential at the proxy and returns the message's
// egress counts as the proxy kept them (the sandbox cannot write them:
// the proxy counts the requests that carried this message's credential).
func (m *egressMessage) end(ctx context.Context) (proxy.Counts, error) {
	return m.self.Revoke(ctx)
}
