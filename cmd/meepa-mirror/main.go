// Command meepa-mirror checks a release in dist/ (what `make release-snapshot`
// or `make release` wrote) and installs it into a Terraform provider mirror
// (`make install-mirror`): packed zips for a filesystem_mirror, and the
// index.json / <version>.json a network mirror serves, in one folder, under
// both registry.terraform.io/ and registry.opentofu.org/ (-host).
//
//	meepa-mirror -dist dist -version 0.1.0 -runners amd64,arm64 -dir bin/mirror
//	meepa-mirror -dist dist -version 0.1.0 -check-only
//
// The SHA256SUMS signature must be by the release key built into it
// (releasekey/release-key.asc), whatever dist/signing-key.asc says;
// -trust-snapshot-key FINGERPRINT accepts one throwaway snapshot key too,
// for a snapshot made on this machine (scripts/release.sh passes it when
// MEEPA_TRUST_SNAPSHOT_KEY is set).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/bogpad/terraform-provider-meepa/internal/mirror"
	"github.com/bogpad/terraform-provider-meepa/releasekey"
)

func main() {
	r := mirror.Release{Type: "meepa", Namespace: "bogpad"}
	var dir, runners, hosts string
	var trust mirror.Trust
	var checkOnly bool
	flag.StringVar(&r.Dist, "dist", "dist", "the folder with the release's artifacts")
	flag.StringVar(&r.Version, "version", "", "the release's version, e.g. 0.1.0 (required)")
	flag.StringVar(&runners, "runners", "amd64,arm64", "comma-separated Linux architectures whose agent-runner every archive must carry")
	flag.StringVar(&dir, "dir", "", "the mirror's root folder (required)")
	// "bogpad/meepa" means registry.terraform.io/bogpad/meepa to Terraform
	// and registry.opentofu.org/bogpad/meepa to OpenTofu, and a mirror only
	// serves a provider under the hostname its folder names: both, by default.
	flag.StringVar(&hosts, "host", "registry.terraform.io,registry.opentofu.org", "comma-separated hostnames of the provider's source address to serve it under")
	flag.StringVar(&trust.SnapshotKey, "trust-snapshot-key", "", "fingerprint of a throwaway snapshot key to accept besides the pinned release key (its public half from dist/signing-key.asc); for a snapshot built on this machine only")
	flag.BoolVar(&checkOnly, "check-only", false, "check dist/ and install nothing (make release's last step)")
	flag.Parse()
	if r.Version == "" || (dir == "" && !checkOnly) {
		flag.Usage()
		os.Exit(2)
	}
	for _, a := range strings.Split(runners, ",") {
		if a = strings.TrimSpace(a); a != "" {
			r.Runners = append(r.Runners, a)
		}
	}
	signer, archives, err := r.Check(trust)
	if err != nil {
		fmt.Fprintln(os.Stderr, "meepa-mirror:", err)
		if errors.Is(err, mirror.ErrUntrustedSigner) && trust.SnapshotKey == "" {
			fmt.Fprintln(os.Stderr, "meepa-mirror: a snapshot signed on this machine with its throwaway key installs only when asked: make install-mirror MEEPA_TRUST_SNAPSHOT_KEY=1")
		}
		os.Exit(1)
	}
	if signer.Pinned {
		fmt.Printf("signature: good, by the pinned release key %s (%s)\n", signer.Fingerprint, releasekey.File)
	} else {
		fmt.Printf("signature: good, by %s: trusting this run's throwaway snapshot key (MEEPA_TRUST_SNAPSHOT_KEY=1), not the pinned release key %s; right for a snapshot built here, never for a release\n",
			signer.Fingerprint, pinnedFingerprint())
	}
	if checkOnly {
		for _, a := range archives {
			fmt.Printf("%-12s %s  zh:%s\n", a.Platform, a.H1, a.SHA256)
		}
		return
	}
	var dsts []string
	for _, h := range strings.Split(hosts, ",") {
		if r.Host = strings.TrimSpace(h); r.Host == "" {
			continue
		}
		dst, err := r.Install(dir, archives)
		if err != nil {
			fmt.Fprintln(os.Stderr, "meepa-mirror:", err)
			os.Exit(1)
		}
		dsts = append(dsts, dst)
	}
	if len(dsts) == 0 {
		fmt.Fprintln(os.Stderr, "meepa-mirror: -host names no hostname")
		os.Exit(2)
	}
	for _, a := range archives {
		size := int64(-1)
		if st, err := os.Stat(a.File); err == nil {
			size = st.Size()
		}
		fmt.Printf("%-12s %9d bytes  %s  zh:%s\n", a.Platform, size, a.H1, a.SHA256)
	}
	for _, dst := range dsts {
		fmt.Printf("mirror: %s (%s, %s)\n", dst, filepath.Join(dst, "index.json"), filepath.Join(dst, r.Version+".json"))
	}
}

// pinnedFingerprint names the release key in messages; Check has already
// parsed the same key, so an error here cannot happen after it succeeded.
func pinnedFingerprint() string {
	el, err := mirror.ReadKeys(releasekey.Armored)
	if err != nil || len(el) == 0 {
		return releasekey.File
	}
	return mirror.Fingerprint(el[0])
}
