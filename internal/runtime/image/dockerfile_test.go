package image

import (
	"strings"
	"testing"
)

func TestRenderContainerGolden(t *testing.T) {
	env := map[string]string{"B_VAR": "two", "A_VAR": "one"}
	tests := []struct {
		name string
		spec Spec
		want string
	}{
		{"apt", Spec{BaseImage: "debian:bookworm", Manager: ManagerApt, Packages: []string{"jq", "curl=7.88.1-10+deb12u5"}},
			"FROM debian:bookworm\n" +
				"RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl=7.88.1-10+deb12u5 jq && rm -rf /var/lib/apt/lists/*\n"},
		{"apk", Spec{BaseImage: "alpine:3.20", Manager: ManagerApk, Packages: []string{"python3", "jq"}},
			"FROM alpine:3.20\nRUN apk add --no-cache jq python3\n"},
		{"dnf", Spec{BaseImage: "fedora:40", Manager: ManagerDnf, Packages: []string{"jq"}},
			"FROM fedora:40\nRUN dnf install -y --setopt=install_weak_deps=False jq && dnf clean all\n"},
		{"auto", Spec{BaseImage: "img", Packages: []string{"jq"}},
			"FROM img\n" +
				"RUN set -e; \\\n" +
				"    if command -v apt-get >/dev/null 2>&1; then apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*; \\\n" +
				"    elif command -v apk >/dev/null 2>&1; then apk add --no-cache jq; \\\n" +
				"    elif command -v dnf >/dev/null 2>&1; then dnf install -y --setopt=install_weak_deps=False jq && dnf clean all; \\\n" +
				"    else echo 'meepa: no apt-get, apk or dnf in the base image; set package_manager' >&2; exit 1; fi\n"},
		{"none with env", Spec{BaseImage: "img", Manager: ManagerNone, Env: env},
			"FROM img\nENV A_VAR=\"one\" \\\n    B_VAR=\"two\"\n"},
		{"apk with env", Spec{BaseImage: "img", Manager: ManagerApk, Packages: []string{"jq"}, Env: map[string]string{"X": "1"}},
			"FROM img\nRUN apk add --no-cache jq\nENV X=\"1\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderContainer(tt.spec)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestRenderIsolationGolden(t *testing.T) {
	want := "FROM meepa-sandbox:0123456789ab\n" +
		"COPY agent-runner /usr/local/bin/agent-runner\n" +
		"ENV HOME=/workspace TMPDIR=/tmp\n" +
		"WORKDIR /workspace\n"
	if got := RenderIsolation("meepa-sandbox:0123456789ab"); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// Env values are quoted so that the Dockerfile parser gives back exactly the
// value: \\ \" and \$ are the only escapes inside double quotes. The real
// round trip through a build is in TestBuildEnvRoundTrip.
func TestEnvQuoting(t *testing.T) {
	tests := map[string]string{
		`plain`:                     `"plain"`,
		`a"b`:                       `"a\"b"`,
		`$HOME ${X}`:                `"\$HOME \${X}"`,
		`back\slash\`:               `"back\\slash\\"`,
		"tab\tz":                    "\"tab\tz\"",
		"`id`; RUN rm -rf / && 'q'": "\"`id`; RUN rm -rf / && 'q'\"",
	}
	for in, want := range tests {
		if got := quoteEnvValue(in); got != want {
			t.Errorf("quoteEnvValue(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestRenderRejectsInjection(t *testing.T) {
	bad := []Spec{
		{BaseImage: "img", Env: map[string]string{"X": "a\nRUN touch /pwned"}},
		{BaseImage: "img", Env: map[string]string{"X": "a\rb"}},
		{BaseImage: "img", Env: map[string]string{"X=Y": "a"}},
		{BaseImage: "img", Env: map[string]string{"HOME": "/root"}},
		{BaseImage: "img", Packages: []string{"jq\nRUN touch /pwned"}},
		{BaseImage: "img\nRUN touch /pwned"},
		{BaseImage: "img", Manager: ManagerNone, Packages: []string{"jq"}},
		{BaseImage: "img", Manager: "pacman", Packages: []string{"jq"}},
	}
	for _, s := range bad {
		if df, err := RenderContainer(s); err == nil {
			t.Errorf("RenderContainer(%+v) accepted it:\n%s", s, df)
		}
	}
}

func TestHostilePackageNames(t *testing.T) {
	hostile := []string{
		"", "jq curl", "jq;id", "jq && id", "jq|id", "jq&", "$(id)", "${IFS}", "$HOME", "`id`",
		"'jq'", `"jq"`, "jq\nid", "jq\rid", "jq\tid", "-y", "--allow-unauthenticated", "-oAPT::x=y",
		"jq>out", "jq<in", "jq*", "jq?", "[jq]", "jq\\", "../jq", "/etc/passwd", "jq#x", "~root",
		"jq=~root", "jq:~root", "jq!", "jq(1)", "jq{a,b}", "jq\x00", "jq\u00a0x", "jé",
		strings.Repeat("a", MaxPackageLen+1),
	}
	for _, m := range Managers {
		if m == ManagerNone {
			continue
		}
		for _, p := range hostile {
			if err := ValidatePackage(m, p); err == nil {
				t.Errorf("%s accepted hostile package %q", m, p)
			}
		}
	}
	good := map[Manager][]string{
		ManagerApt:  {"jq", "g++", "libc6:amd64", "curl=7.88.1-10+deb12u5", "python3.11", "lib32z1", "nodejs=18.19.0+dfsg-6~deb12u2"},
		ManagerApk:  {"jq", "py3-pip", "jq=1.7.1-r0", "python3~3.12", "musl_dev"},
		ManagerDnf:  {"jq", "ImageMagick", "perl-Digest-MD5", "jq-1.7.1-8.fc40.x86_64", "bash-0:5.2.26-3.fc40"},
		ManagerAuto: {"jq", "curl=7.88.1-10+deb12u5", "ImageMagick", "py3-pip"},
	}
	for m, ps := range good {
		for _, p := range ps {
			if err := ValidatePackage(m, p); err != nil {
				t.Errorf("%s rejected good package %q: %v", m, p, err)
			}
		}
	}
	// Per-manager rules: apt names are lowercase, pins differ.
	for m, p := range map[Manager]string{ManagerApt: "ImageMagick", ManagerDnf: "jq=1.7"} {
		if err := ValidatePackage(m, p); err == nil {
			t.Errorf("%s accepted %q", m, p)
		}
	}
}

func TestEnvNames(t *testing.T) {
	for _, ok := range []string{"A", "_x", "PATH", "LANG_2", "lower_case"} {
		if err := ValidateEnvName(ok); err != nil {
			t.Errorf("rejected %q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "1A", "A-B", "A B", "A=B", "A;B", "$A", "A\nB", "HOME", "TMPDIR", "é"} {
		if err := ValidateEnvName(bad); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}
