package image

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
)

// Binary describes the agent-runner file that goes into an isolation image.
type Binary struct {
	Path   string
	Arch   string // GOARCH of the ELF machine, e.g. "amd64"
	SHA256 string // hex
	// Interp is the dynamic loader the binary asks for; empty for a static
	// binary, which is what runs in any base image.
	Interp string
}

// ErrArchMismatch marks a runner binary built for another architecture than
// the daemon's: the "exec format error" of the isolation spec, caught before
// anything is built.
var ErrArchMismatch = errors.New("agent-runner architecture does not match the Docker daemon")

// InspectBinary reads the ELF header and hashes the file.
func InspectBinary(path string) (Binary, error) {
	f, err := os.Open(path)
	if err != nil {
		return Binary{}, fmt.Errorf("open agent-runner: %w", err)
	}
	defer func() { _ = f.Close() }() // read-only
	b := Binary{Path: path}
	ef, err := elf.NewFile(f)
	if err != nil {
		return Binary{}, fmt.Errorf("%s is not a Linux ELF executable (%w); the isolation image needs agent-runner built with GOOS=linux", path, err)
	}
	b.Arch = elfGOARCH(ef)
	if b.Arch == "" {
		return Binary{}, fmt.Errorf("%s: unsupported ELF machine %v", path, ef.Machine)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			data, err := io.ReadAll(p.Open())
			if err == nil {
				b.Interp = string(trimNUL(data))
			}
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Binary{}, fmt.Errorf("rewind agent-runner: %w", err)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return Binary{}, fmt.Errorf("hash agent-runner: %w", err)
	}
	b.SHA256 = hex.EncodeToString(h.Sum(nil))
	return b, nil
}

// CheckArch returns ErrArchMismatch (wrapped with both architectures and
// what to do) when the binary cannot run on a daemon of daemonArch (GOARCH).
func (b Binary) CheckArch(daemonArch string) error {
	if b.Arch == daemonArch {
		return nil
	}
	return fmt.Errorf("%w: %s is linux/%s, the daemon runs linux/%s; containers would fail with "+
		"\"exec format error\". Build it with GOOS=linux GOARCH=%s (make build does) or point runner_binary at one",
		ErrArchMismatch, b.Path, b.Arch, daemonArch, daemonArch)
}

func trimNUL(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == 0 {
		b = b[:len(b)-1]
	}
	return b
}

// elfGOARCH maps an ELF header onto the GOARCH names Docker reports.
func elfGOARCH(f *elf.File) string {
	is64 := f.Class == elf.ELFCLASS64
	le := f.Data == elf.ELFDATA2LSB
	switch f.Machine {
	case elf.EM_X86_64:
		return "amd64"
	case elf.EM_386:
		return "386"
	case elf.EM_AARCH64:
		return "arm64"
	case elf.EM_ARM:
		return "arm"
	case elf.EM_PPC64:
		if le {
			return "ppc64le"
		}
		return "ppc64"
	case elf.EM_S390:
		return "s390x"
	case elf.EM_RISCV:
		if is64 {
			return "riscv64"
		}
	case elf.EM_LOONGARCH:
		return "loong64"
	case elf.EM_MIPS:
		switch {
		case is64 && le:
			return "mips64le"
		case is64:
			return "mips64"
		case le:
			return "mipsle"
		default:
			return "mips"
		}
	}
	return ""
}
