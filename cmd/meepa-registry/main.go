// Command meepa-registry serves an in-memory OCI registry for a test
// cluster: the provider pushes its images to it and the cluster's nodes
// pull them, with nothing fetched from outside.
//
//	meepa-registry -listen 127.0.0.1:5000 [-netns /proc/<pid>/ns/net]
//
// With -netns it also listens on the same address inside that network
// namespace (the test cluster's), so one reference such as
// 127.0.0.1:5000/meepa-sandbox@sha256:… works on the host and on the node.
// MEEPA_REGISTRY_USERNAME and MEEPA_REGISTRY_PASSWORD, or
// MEEPA_REGISTRY_TOKEN, make it require credentials (read from the
// environment, never from argv, which other users can read). It speaks
// plain HTTP. It runs until interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/bogpad/terraform-provider-meepa/internal/testregistry"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "meepa-registry:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:5000", "address to listen on")
	netns := flag.String("netns", "", "also listen on the same address inside this network namespace (a path such as /proc/<pid>/ns/net)")
	verbose := flag.Bool("v", false, "log every request to stderr")
	flag.Parse()
	o := testregistry.Options{
		Username: os.Getenv("MEEPA_REGISTRY_USERNAME"),
		Password: os.Getenv("MEEPA_REGISTRY_PASSWORD"),
		Token:    os.Getenv("MEEPA_REGISTRY_TOKEN"),
	}
	if (o.Username == "") != (o.Password == "") {
		return errors.New("MEEPA_REGISTRY_USERNAME and MEEPA_REGISTRY_PASSWORD go together")
	}
	if *verbose {
		o.Log = os.Stderr
	}
	srv, addr, err := testregistry.Start(*listen, o)
	if err != nil {
		return err
	}
	fmt.Println("serving on", addr)
	if *netns != "" {
		ln, err := testregistry.ListenInNetns(*netns, addr)
		if err != nil {
			return errors.Join(err, srv.Close())
		}
		srv.Serve(ln)
		fmt.Println("serving on", addr, "in", *netns)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return srv.Close()
}
