package runner

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/agentspec"
	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

// egressSlack is added to a message's timeout for its credential's
// expiry: the sandbox is killed at the timeout, and the runner revokes
// the credential then; the expiry is the backstop when the revoke is lost.
const egressSlack = 30 * time.Second

// egressMessage is one message's egress identity.
type egressMessage struct {
	agent, cred, proxyURL string
}

// proxyLocator is a backend that finds the topology's proxy afresh for
// each message (a cluster's: the proxy pod's address changes when it is
// replaced); "" means the config's.
type proxyLocator interface {
	EgressProxy(ctx context.Context) (string, error)
}

// beginEgress mints the message's credential and returns the request env
// with it in the proxy variables' userinfo (env is cloned, never
// changed), at proxyURL, or the config's proxy when it is "". Without
// cfg.Egress it returns env as it is and nil.
func beginEgress(cfg *agentspec.Config, id string, env map[string]string, proxyURL string) (map[string]string, *egressMessage, error) {
	e := cfg.Egress
	if e == nil {
		return env, nil, nil
	}
	if proxyURL == "" {
		proxyURL = e.Proxy
	}
	key, err := hex.DecodeString(e.Key)
	if err != nil {
		return env, nil, fmt.Errorf("egress key: %w", err)
	}
	cred, err := proxy.Mint(key, proxy.Claims{Agent: cfg.AgentID, Role: cfg.Role, Message: id,
		Expiry: time.Now().Add(cfg.Container.Timeout() + egressSlack).Unix(), Policy: e.Policy})
	if err != nil {
		return env, nil, err
	}
	u, err := proxy.ProxyURLWith(proxyURL, cfg.AgentID, cred)
	if err != nil {
		return env, nil, err
	}
	out := maps.Clone(env)
	if out == nil {
		out = map[string]string{}
	}
	for _, k := range []string{"http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"} {
		out[k] = u
	}
	return out, &egressMessage{agent: cfg.AgentID, cred: cred, proxyURL: strings.TrimSuffix(proxyURL, "/")}, nil
}

// end revokes the credential at the proxy and returns the message's
// egress counts as the proxy kept them (the sandbox cannot write them:
// the proxy counts the requests that carried this message's credential).
func (m *egressMessage) end(ctx context.Context) (proxy.Counts, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.proxyURL+proxy.RevokePath, nil)
	if err != nil {
		return proxy.Counts{}, err
	}
	req.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(m.agent+":"+m.cred)))
	resp, err := (&http.Client{Transport: &http.Transport{Proxy: nil}}).Do(req)
	if err != nil {
		return proxy.Counts{}, fmt.Errorf("egress revoke: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // read below
	if resp.StatusCode != http.StatusOK {
		return proxy.Counts{}, fmt.Errorf("egress revoke: proxy answered %s", resp.Status)
	}
	var n proxy.Counts
	if err := json.NewDecoder(io.LimitReader(resp.Body, 4096)).Decode(&n); err != nil {
		return proxy.Counts{}, fmt.Errorf("egress revoke: %w", err)
	}
	return n, nil
}
