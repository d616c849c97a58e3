package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	var allow, allowFiles, dns, allowPrivate stringList
	listen := fs.String("listen", ":"+strconv.Itoa(proxy.DefaultPort), "address to listen on")
	fs.Var(&allow, "allow", "allowed destination pattern: host | host:port | *.domain[:port] | IP | [IPv6]:port (repeatable; bare host means port 443)")
	fs.Var(&allowFiles, "allow-file", "file with one allow pattern per line; '#' starts a comment (repeatable)")
	fs.Var(&dns, "dns", "DNS server ip[:port] to resolve with, tried in order (repeatable; default: the system resolver)")
	fs.Var(&allowPrivate, "allow-private", "CIDR exempt from the private/special-range refusal (repeatable)")
	audit := fs.String("audit", "-", "audit log destination: - for stdout, or a file path (appended)")
	maxConns := fs.Int("max-conns", proxy.DefaultMaxConns, "maximum concurrent client connections")
	dialTimeout := fs.Duration("dial-timeout", proxy.DefaultDialTimeout, "timeout for resolving and connecting upstream")
	idleTimeout := fs.Duration("idle-timeout", proxy.DefaultIdleTimeout, "close tunnels and connections idle this long")
	grace := fs.Duration("shutdown-grace", 8*time.Second, "on SIGTERM, how long open tunnels may finish")
	logLevel := fs.String("log-level", "info", "operational log level on stderr (trace, debug, info, warn, error)")
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
	log := hclog.New(&hclog.LoggerOptions{Name: "proxy", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr, JSONFormat: true})

	entries := append([]string(nil), allow...)
	for _, f := range allowFiles {
		lines, err := readAllowFile(f)
		if err != nil {
			log.Error("reading allow file", "error", err)
			return 2
		}
		entries = append(entries, lines...)
	}
	list, err := proxy.ParseAllowlist(entries)
	if err != nil {
		log.Error("invalid allowlist", "error", err)
		return 2
	}
	prefixes, err := proxy.ParsePrefixes(allowPrivate)
	if err != nil {
		log.Error("invalid --allow-private", "error", err)
		return 2
	}
	var servers []netip.AddrPort
	for _, d := range dns {
		ap, err := proxy.ParseDNSServer(d)
		if err != nil {
			log.Error("invalid --dns", "error", err)
			return 2
		}
		servers = append(servers, ap)
	}

	var auditW io.Writer = os.Stdout
	if *audit != "-" {
		f, err := os.OpenFile(*audit, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			log.Error("opening audit log", "error", err)
			return 1
		}
		defer f.Close()
		auditW = f
	}

	srv, err := proxy.New(proxy.Options{
		Allow:        list,
		AllowPrivate: prefixes,
		Resolver:     proxy.NewDNSResolver(servers),
		DialTimeout:  *dialTimeout,
		IdleTimeout:  *idleTimeout,
		MaxConns:     *maxConns,
		Audit:        auditW,
		Logger:       log,
	})
	if err != nil {
		log.Error("proxy setup", "error", err)
		return 2
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		log.Error("listen", "address", *listen, "error", err)
		return 1
	}
	if len(list) == 0 {
		log.Warn("the allowlist is empty: every request will be refused")
	}
	log.Info("proxy listening", "address", ln.Addr().String(), "allow", list.Strings(), "allow_private", allowPrivate, "dns", []string(dns))

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
	sctx, cancel := context.WithTimeout(context.Background(), *grace)
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
	defer f.Close()
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
