package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/bogpad/terraform-provider-meepa/internal/runtime/proxy"
)

func init() {
	register("proxy", "run the ThreeGate egress proxy (HTTP CONNECT + forward, host:port allowlist)", runProxy)
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func runProxy(args []string) int {
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	var f proxyFlags
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "proxy: unexpected arguments %q\n", fs.Args())
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "proxy", Level: hclog.LevelFromString(f.logLevel), Output: os.Stderr, JSONFormat: true})

	opts, err := f.options(log)
	if err != nil {
		log.Error("invalid configuration", "error", err)
		return 2
	}
	opts.Audit = os.Stdout
	if f.audit != "-" {
		af, err := os.OpenFile(f.audit, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			log.Error("opening audit log", "error", err)
			return 1
		}
		defer func() {
			// Buffered audit records reach the disk only if this succeeds.
			if err := af.Close(); err != nil {
				log.Error("closing audit log", "error", err)
			}
		}()
		opts.Audit = af
	}
	srv, err := proxy.New(opts)
	if err != nil {
		log.Error("proxy setup", "error", err)
		return 2
	}
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		log.Error("listen", "address", f.listen, "error", err)
		return 1
	}
	if len(opts.Allow) == 0 {
		log.Warn("the allowlist is empty: every request will be refused")
	}
	log.Info("proxy listening", "address", ln.Addr().String(), "allow", opts.Allow.Strings(), "credential", opts.Key != nil,
		"allow_private", []string(f.allowPrivate), "dns", []string(f.dns))
	return serveUntilSignal(srv, ln, f.grace, log)
}

// proxyFlags is the proxy's command line.
type proxyFlags struct {
	allow, allowFiles, dns, allowPrivate stringList
	listen, audit, logLevel, upstreamCA  string
	requireCredential                    bool
	maxConns                             int
	dialTimeout, idleTimeout, grace      time.Duration
}

func (f *proxyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.listen, "listen", ":"+strconv.Itoa(proxy.DefaultPort), "address to listen on")
	fs.Var(&f.allow, "allow", "allowed destination pattern: host | host:port | *.domain[:port] | IP | [IPv6]:port (repeatable; bare host means port 443)")
	fs.Var(&f.allowFiles, "allow-file", "file with one allow pattern per line; '#' starts a comment (repeatable)")
	fs.Var(&f.dns, "dns", "DNS server ip[:port] to resolve with, tried in order (repeatable; default: the system resolver)")
	fs.Var(&f.allowPrivate, "allow-private", "CIDR exempt from the private/special-range refusal (repeatable)")
	fs.StringVar(&f.audit, "audit", "-", "audit log destination: - for stdout, or a file path (appended)")
	fs.IntVar(&f.maxConns, "max-conns", proxy.DefaultMaxConns, "maximum concurrent client connections")
	fs.DurationVar(&f.dialTimeout, "dial-timeout", proxy.DefaultDialTimeout, "timeout for resolving and connecting upstream")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", proxy.DefaultIdleTimeout, "close tunnels and connections idle this long")
	fs.DurationVar(&f.grace, "shutdown-grace", 8*time.Second, "on SIGTERM, how long open tunnels may finish")
	fs.BoolVar(&f.requireCredential, "require-credential", false,
		"require a per-message egress credential on every request (the topology's key, hex, in $"+proxy.EnvEgressKey+")")
	fs.StringVar(&f.upstreamCA, "upstream-ca", "",
		"PEM of CA certificates a bound host's certificate may also chain to, besides the system's (for brokered secrets)")
	fs.StringVar(&f.logLevel, "log-level", "info", "operational log level on stderr (trace, debug, info, warn, error)")
}

// options turns the policy flags into proxy.Options (all but Audit).
func (f *proxyFlags) options(log hclog.Logger) (proxy.Options, error) {
	entries := append([]string(nil), f.allow...)
	for _, file := range f.allowFiles {
		lines, err := readAllowFile(file)
		if err != nil {
			return proxy.Options{}, err
		}
		entries = append(entries, lines...)
	}
	list, err := proxy.ParseAllowlist(entries)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("allowlist: %w", err)
	}
	prefixes, err := proxy.ParsePrefixes(f.allowPrivate)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("--allow-private: %w", err)
	}
	var servers []netip.AddrPort
	for _, d := range f.dns {
		ap, err := proxy.ParseDNSServer(d)
		if err != nil {
			return proxy.Options{}, fmt.Errorf("--dns: %w", err)
		}
		servers = append(servers, ap)
	}
	var key []byte
	if f.requireCredential {
		if key, err = proxy.ParseKey(os.Getenv(proxy.EnvEgressKey)); err != nil {
			return proxy.Options{}, fmt.Errorf("--require-credential: $%s: %w", proxy.EnvEgressKey, err)
		}
	}
	roots, err := proxy.UpstreamRoots(f.upstreamCA)
	if err != nil {
		return proxy.Options{}, fmt.Errorf("--upstream-ca: %w", err)
	}
	return proxy.Options{
		Key:           key,
		UpstreamRoots: roots,
		Allow:         list,
		AllowPrivate:  prefixes,
		Resolver:      proxy.NewDNSResolver(servers),
		DialTimeout:   f.dialTimeout,
		IdleTimeout:   f.idleTimeout,
		MaxConns:      f.maxConns,
		Logger:        log,
	}, nil
}

// serveUntilSignal serves until SIGTERM or SIGINT, then lets open tunnels
// finish for up to grace. It returns the process exit code.
func serveUntilSignal(srv *proxy.Server, ln net.Listener, grace time.Duration, log hclog.Logger) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		log.Error("serve", "error", err)
		return 1
	case <-ctx.Done():
	}
	log.Info("shutting down", "grace", grace.String())
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "error", err)
		return 1
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "error", err)
		return 1
	}
	return 0
}

func readAllowFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("allow file: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("allow file %s: %w", path, err)
	}
	return out, nil
}
