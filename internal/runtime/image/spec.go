// Package image generates and builds the two images of the isolation spec:
// the container image (a base image plus packages and env vars, tagged
// meepa-sandbox:<content-hash>) and the isolation image on top of it (the
// agent-runner binary, HOME=/workspace, TMPDIR=/tmp, WORKDIR /workspace,
// tagged meepagateway-isolated:{version}-{base}). Everything here talks to
// the Docker Engine API; nothing knows about Terraform.
package image

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Manager is a package manager the generated Dockerfile can drive.
type Manager string

const (
	// ManagerAuto detects apt-get, apk or dnf inside the base at build time.
	ManagerAuto Manager = "auto"
	ManagerApt  Manager = "apt"
	ManagerApk  Manager = "apk"
	ManagerDnf  Manager = "dnf"
	// ManagerNone installs nothing; only env vars may be added.
	ManagerNone Manager = "none"
)

// Managers lists every accepted package manager, in documentation order.
// The provider builds its validator and its description from this list.
var Managers = []Manager{ManagerAuto, ManagerApt, ManagerApk, ManagerDnf, ManagerNone}

// DefaultBaseImage is the spec's default base image.
const DefaultBaseImage = "ghcr.io/bogpad/meepagateway-sandbox:latest"

// Spec is what the container image is made of. The zero Manager means auto.
type Spec struct {
	BaseImage string
	Packages  []string
	Manager   Manager
	Env       map[string]string
}

// HasContainerLayer reports whether a container image is built at all: with
// no packages and no env vars the isolation image layers straight onto the
// base, as the isolation spec says.
func (s Spec) HasContainerLayer() bool { return len(s.Packages) > 0 || len(s.Env) > 0 }

func (s Spec) manager() Manager {
	if s.Manager == "" {
		return ManagerAuto
	}
	return s.Manager
}

// sortedPackages returns the packages sorted: the order of a package list
// changes neither what is installed nor the content hash.
func (s Spec) sortedPackages() []string {
	p := append([]string(nil), s.Packages...)
	sort.Strings(p)
	return p
}

func (s Spec) sortedEnvKeys() []string {
	keys := make([]string, 0, len(s.Env))
	for k := range s.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// ErrInvalidSpec marks a spec that Validate refuses.
var ErrInvalidSpec = errors.New("invalid image spec")

// Validate checks every input that ends up in the generated Dockerfile.
// Render calls it too, so nothing unchecked ever reaches a RUN line.
func (s Spec) Validate() error {
	var errs []string
	if s.BaseImage == "" {
		errs = append(errs, "base image is empty")
	} else if err := ValidateImageRef(s.BaseImage); err != nil {
		errs = append(errs, err.Error())
	}
	m := s.manager()
	if !m.valid() {
		errs = append(errs, fmt.Sprintf("unknown package manager %q", m))
	}
	if m == ManagerNone && len(s.Packages) > 0 {
		errs = append(errs, `package manager "none" installs no packages; remove the packages or choose a package manager`)
	}
	for _, p := range s.Packages {
		if err := ValidatePackage(m, p); err != nil {
			errs = append(errs, err.Error())
		}
	}
	for _, k := range s.sortedEnvKeys() {
		if err := ValidateEnvName(k); err != nil {
			errs = append(errs, err.Error())
		}
		if err := ValidateEnvValue(s.Env[k]); err != nil {
			errs = append(errs, fmt.Sprintf("env var %s: %v", k, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidSpec, strings.Join(errs, "; "))
	}
	return nil
}

func (m Manager) valid() bool {
	for _, v := range Managers {
		if m == v {
			return true
		}
	}
	return false
}

// Package names and version pins, per package manager. Every pattern admits
// only characters a shell passes through literally: no spaces, quotes, `;`,
// `$`, backticks, globs, redirections or newlines, and never a leading `-`
// (which apt-get, apk and dnf would read as an option).
var (
	// Debian: lowercase name (policy 5.6.1), optional :arch, optional =version.
	aptPackage = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?(=[A-Za-z0-9.+~:-]+)?$`)
	// Alpine: name, optional =version or ~version.
	apkPackage = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._-]*([=~][A-Za-z0-9.+_-]+)?$`)
	// Fedora/RHEL: NEVRA forms, name-version[-release][.arch], epoch with ':'.
	dnfPackage = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._:~-]*$`)
	// auto: the union, since the manager is only known at build time.
	anyPackage = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._:=~-]*$`)

	envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// PackagePatternDescription names the characters every manager accepts, for
// documentation and error text.
const PackagePatternDescription = "a package name starting with a letter or digit, followed by letters, digits and " +
	"`+ . _ - : = ~` (apt: lowercase names, optional `:arch` and `=version`; apk: optional `=version` or `~version`; " +
	"dnf: name-version-release.arch forms)"

// MaxPackageLen bounds a single package argument.
const MaxPackageLen = 200

// ValidatePackage checks one package argument against what the manager
// accepts.
func ValidatePackage(m Manager, p string) error {
	if p == "" {
		return fmt.Errorf("empty package name")
	}
	if len(p) > MaxPackageLen {
		return fmt.Errorf("package name %.40q… is longer than %d characters", p, MaxPackageLen)
	}
	if !anyPackage.MatchString(p) {
		return fmt.Errorf("%q is not a package name: expected %s", p, PackagePatternDescription)
	}
	// A '~' right after '=' or ':' would be a tilde expansion for shells
	// that treat assignment-like words specially (bash).
	if strings.Contains(p, "=~") || strings.Contains(p, ":~") {
		return fmt.Errorf("%q is not a package name: '~' may not follow '=' or ':'", p)
	}
	var re *regexp.Regexp
	switch m {
	case ManagerApt:
		re = aptPackage
	case ManagerApk:
		re = apkPackage
	case ManagerDnf:
		re = dnfPackage
	default:
		return nil
	}
	if !re.MatchString(p) {
		return fmt.Errorf("%q is not a valid %s package: expected %s", p, m, PackagePatternDescription)
	}
	return nil
}

// ValidateEnvName checks an environment variable name.
func ValidateEnvName(k string) error {
	if !envName.MatchString(k) {
		return fmt.Errorf("%q is not an environment variable name: use letters, digits and _, not starting with a digit", k)
	}
	if reserved, ok := ReservedEnv[k]; ok {
		return fmt.Errorf("%s is set by the isolation image to %s and cannot be overridden", k, reserved)
	}
	return nil
}

// ReservedEnv are the variables the isolation layer sets, as the isolation
// spec requires; a user value for them would silently lose.
var ReservedEnv = map[string]string{"HOME": "/workspace", "TMPDIR": "/tmp"}

// ValidateEnvValue rejects control characters: a Dockerfile instruction ends
// at a newline, so a value cannot carry one, and the others have no safe
// literal form there. Every printable character is accepted and quoted.
func ValidateEnvValue(v string) error {
	for i, r := range v {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return fmt.Errorf("value has control character %U at byte %d; newlines and other control characters cannot be set through a Dockerfile ENV", r, i)
		}
	}
	return nil
}

// ValidateImageRef is a light check of an image reference: no whitespace or
// control characters, nothing that could end the FROM line. The daemon has
// the final word on whether the reference exists.
func ValidateImageRef(ref string) error {
	for _, r := range ref {
		if r <= 0x20 || r == 0x7f || r == '"' || r == '\'' || r == '\\' || r == '$' || r == '`' {
			return fmt.Errorf("%q is not an image reference (whitespace, quotes, `$`, backslashes and backticks are not allowed)", ref)
		}
	}
	return nil
}
