// Package relay is the runner's LLM relay, which keeps the API key out of
// every sandbox. The agent loop (and, with inject_credentials_env, its
// tools) talk to the relay with a token that is valid for one message only;
// the relay checks it, forwards the call to the agent's configured base_url
// with the real key, and counts the tokens the answer reports.
//
// The loop reaches the relay without any network route:
//   - container mode: a unix socket in RelayDir, bind-mounted read-only at
//     sandbox.RelayMountDir in every per-message container (a prestarted
//     container too: the token arrives with the request on stdin);
//   - host mode: one end of a socketpair made for the message and inherited
//     by the child as fd agent.RelayFD. The child never creates an AF_UNIX
//     socket, so its seccomp filter can keep refusing socket(AF_UNIX), which
//     is what keeps it away from every other unix socket on the host.
//
// Only what the loop itself sends is forwarded: POST of the configured
// provider's one model endpoint (OpenAI-compatible chat/completions, or
// Anthropic v1/messages), for the configured model only, non-streaming,
// without server-side tools, within size and token limits (LLMLimits);
// redirects are not followed, so the key never leaves for another host. What
// the endpoint answers comes back only on success: an error answer's body
// is the endpoint's to word, and one that echoes the key (in whatever
// encoding) must not reach the sandbox, so the relay words its own.
//
// A CORE agent's asks travel the same way (serveAsk): the relay checks the
// target against the message's Asks and hands the ask to the runner's
// AskPoster.
package relay
