package landlock

import (
	"os"
	"strconv"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// MaxABIEnv is a TEST HOOK: when it holds a number, DetectABI reports at
// most that Landlock ABI, so a test can make the runner see a kernel without
// (say) ABI 4 and prove that it fails closed. It can only lower what the
// kernel offers, never raise it, and it is read here and nowhere else; the
// restricted child never sees it (its environment is rebuilt from scratch).
const MaxABIEnv = "MEEPA_LANDLOCK_MAX_ABI"

// DetectABI is the Landlock ABI version the running kernel offers, 0 when
// it has none (not built in, not enabled at boot, or the landlock syscalls
// blocked by a seccomp profile). Like go-landlock, it counts a kernel whose
// signal-scoping fix (erratum 2) is missing as ABI 5.
func DetectABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		v = 0
	}
	if v >= 6 {
		if errata, err := llsys.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			v = 5
		}
	}
	if s := os.Getenv(MaxABIEnv); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n < v {
			v = n
		}
	}
	return v
}
