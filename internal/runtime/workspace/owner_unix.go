//go:build unix

package workspace

import (
	"io/fs"
	"syscall"
)

func statOwner(st fs.FileInfo) (Owner, bool) {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return Owner{}, false
	}
	return Owner{UID: int(sys.Uid), GID: int(sys.Gid)}, true
}
