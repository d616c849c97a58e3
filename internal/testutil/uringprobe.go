package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// uringProbe calls io_uring_setup (425 on amd64 and arm64 alike) and exits
// 0 when it worked, 13 on EPERM or EACCES, 38 on ENOSYS, 1 otherwise.
const uringProbe = `package main

import (
	"os"
	"syscall"
	"unsafe"
)

func main() {
	var params [120]byte // struct io_uring_params
	fd, _, e := syscall.Syscall(425, 1, uintptr(unsafe.Pointer(&params[0])), 0)
	os.Stdout.WriteString("io_uring_setup: " + e.Error() + "\n")
	switch e {
	case 0:
		syscall.Close(int(fd))
		os.Exit(0)
	case syscall.EPERM, syscall.EACCES:
		os.Exit(13)
	case syscall.ENOSYS:
		os.Exit(38)
	}
	os.Exit(1)
}
`

// URingProbe builds the io_uring probe as a static Linux program (a
// program of its own: test binaries are linked with libc) and returns it.
func URingProbe(t testing.TB) []byte {
	t.Helper()
	return buildStatic(t, "uringprobe", uringProbe)
}

// buildStatic builds the one-file Go program src as a static Linux
// binary and returns it.
func buildStatic(t testing.TB, name, src string) []byte {
	t.Helper()
	dir := t.TempDir()
	for file, body := range map[string]string{"go.mod": "module " + name + "\n\ngo 1.22\n", "main.go": src} {
		Must(t, os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644))
	}
	cmd := exec.Command("go", "build", "-o", name, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", name, err, out)
	}
	bin, err := os.ReadFile(filepath.Join(dir, name))
	Must(t, err)
	return bin
}
