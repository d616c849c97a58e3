package agentspec

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// NewToken returns a fresh bearer token for a runner: 32 random bytes, hex.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// ConfigHash identifies everything that makes a runner what it is: the
// config without its secrets, the deployment settings, and a keyed hash of
// the secrets (token, API key, secret values). It is stored in Terraform
// state and beside the runner (a container label, a Deployment
// annotation), so a change of any input — including a write-only API key
// that state never holds — shows up as a changed hash, while neither state
// nor the backend's objects can be used to test guesses of a secret
// without the key.
func ConfigHash(c Config, d DeploySettings, key []byte) string {
	secret := struct {
		Token   string            `json:"token"`
		APIKey  string            `json:"api_key"`
		Secrets map[string]string `json:"secrets"`
	}{c.Token, c.LLM.APIKey, c.Secrets}
	c.Token, c.LLM.APIKey = "", ""
	// Secret names are not secret, but keep them out of the plain part so
	// the one place secrets are hashed is the keyed part.
	names := make([]string, 0, len(c.Secrets))
	for k := range c.Secrets {
		names = append(names, k)
	}
	sort.Strings(names)
	c.Secrets = nil
	plain, _ := json.Marshal(struct {
		Config      Config         `json:"config"`
		SecretNames []string       `json:"secret_names"`
		Deployment  DeploySettings `json:"deployment"`
	}{c, names, d})
	sj, _ := json.Marshal(secret) // map keys are sorted by encoding/json
	mac := hmac.New(sha256.New, key)
	mac.Write(sj)
	h := sha256.New()
	h.Write(plain)
	h.Write([]byte{0})
	h.Write(mac.Sum(nil))
	return hex.EncodeToString(h.Sum(nil))
}

// DeploySettings are the deployment choices that are not in Config but
// change the runner, hashed beside it (ConfigHash).
type DeploySettings struct {
	// Mode is "container", "external" or "kubernetes".
	Mode string `json:"mode"`
	// Image runs `agent-runner serve` (a runner the backend runs).
	Image string `json:"image,omitempty"`
	// Version of the provider that made the deployment: a new provider may
	// make a different runner.
	Version string `json:"version,omitempty"`
	// ThreegateNetwork and ThreegateRole stand for the role's networks and
	// env, which are resolved only at apply.
	ThreegateNetwork string `json:"threegate_network,omitempty"`
	ThreegateRole    string `json:"threegate_role,omitempty"`
}
