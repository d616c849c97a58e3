package image

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestInspectBinaryOwnExecutable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the test binary is an ELF file only on linux")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := InspectBinary(exe)
	if err != nil {
		t.Fatal(err)
	}
	if b.Arch != runtime.GOARCH {
		t.Errorf("arch %q, want %q", b.Arch, runtime.GOARCH)
	}
	data, _ := os.ReadFile(exe)
	sum := sha256.Sum256(data)
	if b.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sha256 mismatch")
	}
	if err := b.CheckArch(runtime.GOARCH); err != nil {
		t.Errorf("same arch: %v", err)
	}
}

// patchedELF copies the test binary with its e_machine set to machine, the
// cheapest real ELF file of another architecture.
func patchedELF(t *testing.T, machine uint16) string {
	t.Helper()
	exe, _ := os.Executable()
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	data[18], data[19] = byte(machine), byte(machine>>8) // little-endian e_machine
	p := filepath.Join(t.TempDir(), "agent-runner")
	if err := os.WriteFile(p, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInspectBinaryForeignArch(t *testing.T) {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skip("patches an amd64 ELF header")
	}
	b, err := InspectBinary(patchedELF(t, 183)) // EM_AARCH64
	if err != nil {
		t.Fatal(err)
	}
	if b.Arch != "arm64" {
		t.Fatalf("arch %q, want arm64", b.Arch)
	}
	err = b.CheckArch("amd64")
	if !errors.Is(err, ErrArchMismatch) {
		t.Fatalf("CheckArch: %v, want ErrArchMismatch", err)
	}
	t.Log(err)
}

func TestInspectBinaryNotELF(t *testing.T) {
	p := filepath.Join(t.TempDir(), "agent-runner")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho agent-runner 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := InspectBinary(p); err == nil {
		t.Fatal("a shell script passed as an ELF binary")
	}
	if _, err := InspectBinary(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a missing file passed")
	}
}

func TestInspectBinaryStaticAndDynamic(t *testing.T) {
	// busybox-static is what the test images are built from; /bin/ls is a
	// typical dynamically linked binary.
	for p, wantInterp := range map[string]bool{"/bin/busybox": false, "/bin/ls": true} {
		if _, err := os.Stat(p); err != nil {
			t.Logf("skipping %s: %v", p, err)
			continue
		}
		b, err := InspectBinary(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if (b.Interp != "") != wantInterp {
			t.Errorf("%s: interpreter %q, want one: %v", p, b.Interp, wantInterp)
		}
	}
}

func TestParseRunnerVersion(t *testing.T) {
	v, err := ParseRunnerVersion("agent-runner 0.1.0 (commit abc123, linux/amd64)\n")
	if err != nil || v != "0.1.0" {
		t.Errorf("got %q, %v", v, err)
	}
	if _, err := ParseRunnerVersion("exec format error"); err == nil {
		t.Error("accepted garbage")
	}
}
