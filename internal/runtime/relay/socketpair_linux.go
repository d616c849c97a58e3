package relay

import "syscall"

// socketpair is a connected pair of Unix stream sockets, close-on-exec.
func socketpair() ([2]int, error) {
	return syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
}
