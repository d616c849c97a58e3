package agent

import (
	"errors"
	"net/http"
)

// NewOpenAI is replaced by the SDK-backed client.
func NewOpenAI(cfg LLMConfig, hc *http.Client) (Client, error) {
	return nil, errors.New("openai: not built yet")
}

// NewAnthropic is replaced by the SDK-backed client.
func NewAnthropic(cfg LLMConfig, hc *http.Client) (Client, error) {
	return nil, errors.New("anthropic: not built yet")
}
