// Command meepa-mirror checks a release in dist/ (what `make release-snapshot`
// or `make release` wrote) and installs it into a Terraform provider mirror
// (`make install-mirror`): packed zips for a filesystem_mirror, and the
// index.json / <version>.json a network mirror serves, in one folder.
//
//	meepa-mirror -dist dist -version 0.1.0 -runners amd64,arm64 -dir bin/mirror
//
// Check the SHA256SUMS signature with gpg before: this command trusts the
// sums file and checks everything else against it.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/mirror"
)

func main() {
	r := mirror.Release{Type: "meepa", Namespace: "bogpad", Host: "registry.terraform.io"}
	var dir, runners string
	flag.StringVar(&r.Dist, "dist", "dist", "the folder with the release's artifacts")
	flag.StringVar(&r.Version, "version", "", "the release's version, e.g. 0.1.0 (required)")
	flag.StringVar(&runners, "runners", "amd64,arm64", "comma-separated Linux architectures whose agent-runner every archive must carry")
	flag.StringVar(&dir, "dir", "", "the mirror's root folder (required)")
	flag.StringVar(&r.Host, "host", r.Host, "the provider source's hostname")
	flag.Parse()
	if r.Version == "" || dir == "" {
		flag.Usage()
		os.Exit(2)
	}
	for _, a := range strings.Split(runners, ",") {
		if a = strings.TrimSpace(a); a != "" {
			r.Runners = append(r.Runners, a)
		}
	}
	archives, err := r.Check()
	if err != nil {
		fmt.Fprintln(os.Stderr, "meepa-mirror:", err)
		os.Exit(1)
	}
	dst, err := r.Install(dir, archives)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meepa-mirror:", err)
		os.Exit(1)
	}
	for _, a := range archives {
		size := int64(-1)
		if st, err := os.Stat(a.File); err == nil {
			size = st.Size()
		}
		fmt.Printf("%-12s %9d bytes  %s  zh:%s\n", a.Platform, size, a.H1, a.SHA256)
	}
	fmt.Printf("mirror: %s (%s, %s)\n", dst, filepath.Join(dst, "index.json"), filepath.Join(dst, r.Version+".json"))
}
