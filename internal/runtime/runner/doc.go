// Package runner is the per-agent service behind `agent-runner serve`: an
// HTTP API that takes messages, runs each in a fresh sandbox one at a time
// (the spec's per-agent mutex) with a bounded queue, and answers the agent's
// reply or a typed error.
//
// The API, on Config.Listen ("unix:///path" or "127.0.0.1:PORT"):
//
//	POST /v1/messages   Authorization: Bearer <Config.Token>
//	                    Idempotency-Key: <key> (optional; 1-255 printable ASCII)
//	                    body MessageRequest {"text", "sender", "channel", "conversation_id"}
//	  200  agent.Reply JSON (reply, steps, usage, duration_ms, message_id)
//	  400 bad_request, 401 unauthorized, 413 too_large, 429 queue_full,
//	  503 shutting_down, not_enforced or journal, 504 timeout, 500 with the
//	  agent's error kind (oom, exit, protocol, sandbox, llm, steps, request,
//	  internal) or interrupted, all as
//	  ErrorBody {"error": {"kind", "message"}, "message_id"}.
//	  Every answer to a message that ran carries X-Message-Id.
//	POST /v1/messages?wait=false   the same, asynchronously: the message is
//	                    checked and queued exactly like a blocking one (same
//	                    token, same queue, same 400/401/413/429/503 refusals),
//	                    and the answer is at once
//	  202  AsyncStatus {"message_id", "state": "queued"}, with X-Message-Id
//	       and Location: /v1/messages/{id}.
//	  wait=true (or no wait) is the blocking call; any other value is 400.
//	GET /v1/messages/{id}   Authorization: Bearer <Config.Token>
//	  200  AsyncStatus {"message_id", "state"}: state is queued, running or
//	       done; when done, "status" is the HTTP status and "result" the JSON
//	       body that the blocking call would have answered (the agent.Reply,
//	       or the ErrorBody with its error kind).
//	  401 unauthorized; 404 not_found for an id that is unknown, has
//	  expired, or was a blocking message without an Idempotency-Key (its
//	  caller had the answer). Finished outcomes are kept for
//	  DefaultOutcomeTTL (15 minutes), at most DefaultMaxOutcomes (1,000)
//	  of them and DefaultOutcomeBytes (32 MiB) of them together, the
//	  oldest evicted first; 410 evicted (with the status it had) for one
//	  evicted before its 15 minutes, by id and by key (a repeat of its key
//	  does not run it again), also after a restart (the journal keeps the
//	  record without its body). A body over 8 KiB is read from its journal
//	  record each time, never held in memory. A reply is at most
//	  agentspec.MaxReplyBytes (4 MiB): agent-run cuts a longer one, saying so
//	  (agent.FitReply), and the backends read no more from a sandbox
//	  (sandbox.ErrReplyTooLarge: 500 protocol).
//	GET /healthz        Health JSON: ok, agent_id, mode, ready (a prestarted
//	                    sandbox waits), prestart, queued, busy, plus backend
//	                    fields (landlock_abi); 503 while shutting down.
//	GET /metrics        Prometheus text, meepa_runner_* metrics.
//
// /healthz and /metrics need no token, by decision: the provider, Docker
// and kubelet probes and Prometheus read them without one, and they hold
// state and counts only, never a message, a reply, a token or a secret.
// Every route is bounded before the token is checked (apiLimits, apiConns).
//
// Accepted means answered. With Config.Journal, a message is written to
// the journal (one file per message, synced) before it is acknowledged or
// queued, marked started before a sandbox sees it, and done with its
// answer. A runner that starts resumes the journal its predecessor left
// (after a crash, a kill or a restart): accepted messages run again, in
// their order, as asynchronous ones; a message that had started is never
// run again but answered 500 interrupted (it may have had effects); done
// outcomes answer GET and repeated keys as before. Without a journal a
// restart forgets every queued message and every kept outcome.
//
// Idempotency-Key: a key seen before (per agent, while its first message
// is kept) returns the first message's outcome and runs nothing: when it
// is done, its status and body with the first X-Message-Id and
// Idempotent-Replayed: true, whether the repeat is blocking or not; while
// it waits or runs, a blocking repeat waits for it and an asynchronous one
// gets 202 with the first id. The key alone decides: a different text
// under a used key gets the first outcome. Only the key's SHA-256 is kept
// (in memory and the journal), and the audit line shows a prefix of it.
//
// A waiting blocking request whose client goes away leaves the queue (it is
// withdrawn from the journal, and its key is free again); a running one
// finishes (the agent may be writing its memory) within timeout_seconds.
// Shutdown answers waiting blocking requests shutting_down (withdrawn
// likewise); an asynchronous message stays queued until it runs, or until
// Shutdown, which leaves it accepted in the journal for the next start (or,
// without a journal, answers it shutting_down).
//
// The sandbox a message runs in comes ready from package backends (the
// Docker container, the host child or a Pod, chosen there once per
// config), already connected to this runner's LLM relay (package relay,
// which counts into the server's metrics); the server asks
// the backend how its sandboxes reach the relay (sandbox.RelayLink) and
// nothing about which kind it is.
package runner
