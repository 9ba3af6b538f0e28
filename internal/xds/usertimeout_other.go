//go:build !linux

package xds

import (
	"syscall"
	"time"
)

// setUserTimeout does nothing where TCP_USER_TIMEOUT does not exist (gRPC
// sets it on Linux only too).
func setUserTimeout(syscall.Conn, time.Duration) error { return nil }
