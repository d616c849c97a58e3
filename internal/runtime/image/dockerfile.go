package image

import (
	"fmt"
	"strings"
)

// TemplateVersion is part of every content hash: bump it whenever the
// generated Dockerfiles change, so that images made by an older template get
// a new tag instead of silently standing for the new one.
const TemplateVersion = "1"

// RunnerPath is where the isolation layer puts agent-runner.
const RunnerPath = "/usr/local/bin/agent-runner"

// installCommand is the shell command that installs pkgs with m.
func installCommand(m Manager, pkgs []string) string {
	list := strings.Join(pkgs, " ")
	switch m {
	case ManagerApt:
		return "apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends " + list +
			" && rm -rf /var/lib/apt/lists/*"
	case ManagerApk:
		return "apk add --no-cache " + list
	case ManagerDnf:
		return "dnf install -y --setopt=install_weak_deps=False " + list + " && dnf clean all"
	}
	return ""
}

// RenderContainer renders the container image's Dockerfile: the base, the
// package install (one RUN, so a failed install leaves no layer) and the env
// vars. Inputs are validated first; packages and env keys come out sorted so
// that the text, like the hash, does not depend on input order.
func RenderContainer(s Spec) (string, error) {
	if err := s.Validate(); err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "FROM %s\n", s.BaseImage)
	if pkgs := s.sortedPackages(); len(pkgs) > 0 {
		switch m := s.manager(); m {
		case ManagerAuto:
			// Detected at build time: the base image is the only place that
			// knows which manager it has.
			fmt.Fprintf(&b, "RUN set -e; \\\n"+
				"    if command -v apt-get >/dev/null 2>&1; then %s; \\\n"+
				"    elif command -v apk >/dev/null 2>&1; then %s; \\\n"+
				"    elif command -v dnf >/dev/null 2>&1; then %s; \\\n"+
				"    else echo 'meepa: no apt-get, apk or dnf in the base image; set package_manager' >&2; exit 1; fi\n",
				installCommand(ManagerApt, pkgs), installCommand(ManagerApk, pkgs), installCommand(ManagerDnf, pkgs))
		default:
			fmt.Fprintf(&b, "RUN %s\n", installCommand(m, pkgs))
		}
	}
	if keys := s.sortedEnvKeys(); len(keys) > 0 {
		b.WriteString("ENV")
		for i, k := range keys {
			if i > 0 {
				b.WriteString(" \\\n   ")
			}
			fmt.Fprintf(&b, " %s=%s", k, quoteEnvValue(s.Env[k]))
		}
		b.WriteString("\n")
	}
	return b.String(), nil
}

// quoteEnvValue quotes a value for a Dockerfile ENV instruction. Inside
// double quotes the Dockerfile word parser unescapes exactly \\, \" and \$
// and expands $VAR, so escaping those three makes every printable value
// literal; control characters are rejected by ValidateEnvValue because a
// newline would end the instruction.
func quoteEnvValue(v string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`)
	return `"` + r.Replace(v) + `"`
}

// RenderIsolation renders the isolation layer's Dockerfile on top of from
// (the container image's tag, or the base when there is no container layer).
// The binary is sent in the build context as "agent-runner".
func RenderIsolation(from string) string {
	return "FROM " + from + "\n" +
		"COPY agent-runner " + RunnerPath + "\n" +
		"ENV HOME=/workspace TMPDIR=/tmp\n" +
		"WORKDIR /workspace\n"
}
