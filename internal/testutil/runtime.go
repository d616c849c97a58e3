package testutil

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/docker/docker/client"
)

// RequireRuntime skips unless the daemon has the OCI runtime name (as
// scripts/runsc.sh registers "runsc"); like RequireDocker it needs TF_ACC.
// Only a runtime that is not registered skips: a daemon that cannot be
// asked fails the test.
func RequireRuntime(t testing.TB, cli *client.Client, name string) {
	t.Helper()
	RequireDocker(t)
	info, err := cli.Info(context.Background())
	if err != nil {
		t.Fatalf("docker info: %v", err)
	}
	if _, ok := info.Runtimes[name]; ok {
		return
	}
	have := make([]string, 0, len(info.Runtimes))
	for k := range info.Runtimes {
		have = append(have, k)
	}
	sort.Strings(have)
	t.Skipf("the Docker daemon has no %q runtime (it has %s): run scripts/runsc.sh docker to build and register gVisor's runsc",
		name, strings.Join(have, ", "))
}
