// Package proxy is ThreeGate's egress proxy, run as `agent-runner proxy`:
// an HTTP forward proxy (CONNECT tunnels for https, absolute-URI forwarding
// for plain http) that lets through only allowlisted host:port destinations
// and answers everything else with a 403 whose short text body names the
// refused host:port and the reason.
//
// # Allowlist patterns
//
// Matching is case-insensitive and one trailing dot on a name is ignored.
//
//	example.com             example.com, port 443 (a bare host means 443)
//	example.com:8443        that name and port (1-65535)
//	*.example.com[:port]    any subdomain at any depth (a.example.com,
//	                        a.b.example.com), NOT example.com itself; list
//	                        the apex separately when it is wanted
//	203.0.113.7[:port]      an IPv4 literal
//	[2001:db8::7][:port]    an IPv6 literal, always in brackets
//
// Rejected, with an error that says why: a scheme (https://), a path, a
// query or fragment, userinfo (user@), whitespace, an empty host, a
// wildcard other than one leading "*." or with fewer than two labels after
// it ("*", "*.com"), an unbracketed IPv6 address, an IPv6 zone, a last label
// that is all digits but not a valid IPv4 address ("127.1"), non-ASCII
// names (use punycode), and a port that is 0, above 65535 or not a number.
// A name pattern matches requests for that name only; an IP pattern matches
// requests for that IP literal only (never a name that resolves to it).
//
// # Destination addresses
//
// The proxy resolves names itself (the system resolver, or the servers
// given with --dns) and refuses any address in a special range (see
// SpecialRange: loopback, RFC 1918, CGNAT, link-local including cloud
// metadata 169.254.169.254 and fd00:ec2::254, ULA fc00::/7, unspecified,
// multicast, documentation, benchmarking, reserved, 6to4/Teredo, NAT64 of
// any of these, and IPv6 outside 2000::/3). Two things exempt an address:
//   - an AllowPrivate CIDR (--allow-private, repeatable) that contains it;
//   - an allowlist entry that is that exact IP literal (the operator named
//     the address on purpose), for requests to that IP literal.
//
// A name whose answer mixes acceptable and refused addresses is dialed at
// the acceptable ones only; when none is acceptable the request is refused
// with the first refused address in the reason.
//
// It dials exactly the vetted IP, never the name, so a second DNS answer
// (rebinding) is never used; the socket's Control hook re-checks that the
// address being connected is the vetted one and still passes the policy,
// and the connected peer is compared with it once more.
//
// # Per-message credentials
//
// With Options.Key (`--require-credential`, the key in $MEEPA_EGRESS_KEY)
// every request must carry a live credential of one message in
// Proxy-Authorization (Basic, the agent id as user name), else 407. A
// credential is minted by the agent's runner under the agent's key derived
// from the topology's (AgentKey, Mint) and carries the agent, role,
// message id, expiry and the agent's Policy, which narrows the allowlist
// for that request (the allowlist still applies). The runner revokes it at
// the message's end (RevokePath) and gets the message's Counts. See
// credential.go for the design.
//
// # Audit
//
// One JSON line per request (AuditRecord), written when the request or
// tunnel ends; decisions are allow, deny (403 policy, 407 no live
// credential, 400 malformed, 503 over the connection bound), error (502,
// allowed but the upstream failed) and revoke (a message ended). With a
// key, each line names the credential's agent, role and message once its
// MAC holds. Paths, queries, headers, bodies and credentials are never
// logged.
package proxy
