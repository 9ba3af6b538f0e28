//go:build !linux

package gateway

import (
	"context"
	"errors"
	"net"
)

// serveEpollFloor needs Linux's epoll.
func serveEpollFloor(context.Context, net.Listener, string, bool) error {
	return errors.New("bench: go-epoll: epoll is Linux's")
}
