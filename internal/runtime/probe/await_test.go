package probe

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

func TestAwait(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := closed.Addr().String()
	_ = closed.Close()
	open := Check{Kind: TCP, Target: ln.Addr().String()}
	shut := Check{Kind: TCP, Target: closedAddr}
	ctx := context.Background()
	if err := Await(ctx, []Check{shut}, []Check{open}, time.Second); err != nil {
		t.Errorf("settled network: %v", err)
	}
	// A listener that stays open where it must be blocked: fail closed.
	err = Await(ctx, []Check{open}, nil, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "still open") {
		t.Errorf("open where blocked is wanted: %v", err)
	}
	// (refused on each round; the round the limit cuts short may read as
	// a timeout instead)
	err = Await(ctx, nil, []Check{shut}, 500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), shut.String()) {
		t.Errorf("closed where open is wanted: %v", err)
	}
}
