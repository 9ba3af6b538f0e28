package xds

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets c's TCP_USER_TIMEOUT to d.
func setUserTimeout(c syscall.Conn, d time.Duration) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
	}); err != nil {
		return err
	}
	return serr
}
