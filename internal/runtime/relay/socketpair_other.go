//go:build !linux

package relay

import "syscall"

// socketpair is a connected pair of Unix stream sockets, close-on-exec. Only
// Linux has SOCK_CLOEXEC; elsewhere the flag is set after, under ForkLock so
// that no exec in between inherits the pair. (The relay serves host-mode
// agents, which run on Linux only; this keeps the provider's darwin build.)
func socketpair() ([2]int, error) {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return fds, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	return fds, nil
}
