//go:build unix

package connlimit

import "syscall"

// DefaultTotal is half the process's open-file limit (Go raises the soft
// limit to the hard one at start), so that a full listener leaves the
// other half to the store, the other listeners and the connections out;
// 4096 when the limit cannot be read.
func DefaultTotal() int {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil || r.Cur == 0 {
		return 4096
	}
	if r.Cur > 1<<22 {
		return 1 << 21
	}
	return int(r.Cur / 2)
}
