//go:build linux

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// serveEpollFloor is the "go-epoll" candidate: go-floor's forwarding (a
// message, head and Content-Length body, read whole, then written) on an
// event loop of its own, nginx's shape: one goroutine owns an epoll set
// (level-triggered) over non-blocking sockets and never parks on a
// connection. A read that fills less than its buffer is not retried: the
// next readiness says when there is more, so no read finds nothing. Set
// beside go-floor, it splits what the gateway pays above nginx into the
// goroutine-per-connection model (go-floor - go-epoll) and everything else
// (issue 48).
//
// With block (the "go-epoll-block" candidate, gnet's way) the goroutine,
// on a locked thread, waits in a blocking epoll_wait; without, it asks with
// a zero timeout and, when nothing is ready, parks in Go's poller on the
// epoll descriptor itself, so the runtime never sees a blocking system call.
func serveEpollFloor(ctx context.Context, ln net.Listener, upstream string, block bool) error {
	ua, err := net.ResolveTCPAddr("tcp4", upstream)
	if err != nil {
		return fmt.Errorf("bench: go-epoll: upstream: %w", err)
	}
	up := &unix.SockaddrInet4{Port: ua.Port}
	copy(up.Addr[:], ua.IP.To4())
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return fmt.Errorf("bench: go-epoll: a %T, want a TCP listener", ln)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	// A descriptor of the loop's own for the listening socket: Go's
	// poller keeps the original (never accepted on here).
	lfd := -1
	if err := rc.Control(func(fd uintptr) { lfd, err = unix.Dup(int(fd)) }); err != nil {
		return err
	}
	if err != nil {
		return fmt.Errorf("bench: go-epoll: dup: %w", err)
	}
	defer unix.Close(lfd)
	l := &epollLoop{up: up, lfd: lfd}
	if l.ep, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC); err != nil {
		return fmt.Errorf("bench: go-epoll: %w", err)
	}
	defer unix.Close(l.ep)
	if l.stop, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC); err != nil {
		return fmt.Errorf("bench: go-epoll: %w", err)
	}
	defer unix.Close(l.stop)
	for _, fd := range []int{lfd, l.stop} {
		if err := l.watch(unix.EPOLL_CTL_ADD, fd, unix.EPOLLIN); err != nil {
			return err
		}
	}
	wake := context.AfterFunc(ctx, func() { unix.Write(l.stop, []byte{1, 0, 0, 0, 0, 0, 0, 0}) })
	defer wake()
	defer l.closeAll()
	if block {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		return l.run(func(events []unix.EpollEvent) (int, error) { return unix.EpollWait(l.ep, events, -1) })
	}
	// The epoll descriptor is readable while an event is ready: Go's
	// poller watches it (it owns and closes this duplicate).
	pfd, err := unix.Dup(l.ep)
	if err != nil {
		return fmt.Errorf("bench: go-epoll: dup: %w", err)
	}
	if err := unix.SetNonblock(pfd, true); err != nil {
		unix.Close(pfd)
		return fmt.Errorf("bench: go-epoll: %w", err)
	}
	f := os.NewFile(uintptr(pfd), "epoll")
	defer f.Close()
	prc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return l.run(func(events []unix.EpollEvent) (n int, err error) {
		rerr := prc.Read(func(uintptr) bool {
			n, err = unix.EpollWait(l.ep, events, 0)
			return n != 0 || err != nil && !errors.Is(err, unix.EINTR)
		})
		if err == nil {
			err = rerr
		}
		return n, err
	})
}

// epollLoop is the go-epoll candidate's state, owned by its one goroutine.
type epollLoop struct {
	ep, lfd, stop int
	up            *unix.SockaddrInet4
	legs          []*epollLeg // by descriptor
	// closed are the descriptors of pairs ended during a batch of events,
	// closed at its end: a number accept reused within the batch would
	// take a later event of it meant for the old socket.
	closed []int
}

// epollLeg is one socket of a client-upstream pair.
type epollLeg struct {
	fd   int
	peer *epollLeg
	floorFrame
	out        []byte // bytes of the peer's messages the socket did not take yet
	connecting bool
}

func (l *epollLoop) watch(op, fd int, events uint32) error {
	if err := unix.EpollCtl(l.ep, op, fd, &unix.EpollEvent{Events: events, Fd: int32(fd)}); err != nil {
		return fmt.Errorf("bench: go-epoll: epoll_ctl: %w", err)
	}
	return nil
}

// run serves until the stop descriptor is written, wait returning the
// ready events.
func (l *epollLoop) run(wait func([]unix.EpollEvent) (int, error)) error {
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := wait(events)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("bench: go-epoll: epoll_wait: %w", err)
		}
		for _, ev := range events[:n] {
			switch fd := int(ev.Fd); fd {
			case l.stop:
				return nil
			case l.lfd:
				if err := l.accept(); err != nil {
					return err
				}
			default:
				if fd < len(l.legs) && l.legs[fd] != nil {
					l.ready(l.legs[fd], ev.Events)
				}
			}
		}
		for _, fd := range l.closed {
			unix.Close(fd)
		}
		l.closed = l.closed[:0]
	}
}

// accept takes every pending client and dials its upstream connection.
func (l *epollLoop) accept() error {
	for {
		cfd, _, err := unix.Accept4(l.lfd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		switch {
		case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.ECONNABORTED), errors.Is(err, unix.EINTR):
			return nil
		case err != nil: // EMFILE too: a level-triggered listener would spin
			return fmt.Errorf("bench: go-epoll: accept: %w", err)
		}
		ufd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			unix.Close(cfd)
			continue
		}
		for _, fd := range []int{cfd, ufd} {
			unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) // as Go's and nginx's sockets
		}
		if err := unix.Connect(ufd, l.up); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			unix.Close(cfd)
			unix.Close(ufd)
			continue
		}
		c := &epollLeg{fd: cfd, floorFrame: floorFrame{buf: make([]byte, 16<<10)}}
		u := &epollLeg{fd: ufd, floorFrame: floorFrame{buf: make([]byte, 16<<10)}, connecting: true}
		c.peer, u.peer = u, c
		for _, g := range []*epollLeg{c, u} {
			for g.fd >= len(l.legs) {
				l.legs = append(l.legs, nil)
			}
			l.legs[g.fd] = g
		}
		if l.watch(unix.EPOLL_CTL_ADD, cfd, unix.EPOLLIN) != nil || l.watch(unix.EPOLL_CTL_ADD, ufd, unix.EPOLLOUT) != nil {
			l.close(c)
		}
	}
}

// ready handles one socket's readiness: its pending output first, then
// what it has to read, forwarded to its peer a whole message at a time.
func (l *epollLoop) ready(g *epollLeg, events uint32) {
	if events&(unix.EPOLLERR|unix.EPOLLHUP) != 0 && events&unix.EPOLLIN == 0 {
		l.close(g)
		return
	}
	if events&unix.EPOLLOUT != 0 {
		if g.connecting {
			if e, err := unix.GetsockoptInt(g.fd, unix.SOL_SOCKET, unix.SO_ERROR); err != nil || e != 0 {
				l.close(g)
				return
			}
			g.connecting = false
		}
		if !l.flush(g) {
			return
		}
	}
	if events&unix.EPOLLIN == 0 {
		return
	}
	k, err := unix.Read(g.fd, g.buf[g.n:])
	switch {
	case errors.Is(err, unix.EAGAIN), errors.Is(err, unix.EINTR):
		return
	case err != nil || k == 0:
		l.close(g)
		return
	}
	g.n += k
	for {
		msg, err := g.next()
		if err != nil {
			l.close(g)
			return
		}
		if msg == nil {
			break
		}
		if !l.send(g.peer, msg) {
			return
		}
	}
	if g.n == len(g.buf) {
		l.close(g) // a head larger than the buffer
	}
}

// send writes msg to g, keeping what the socket does not take; false
// when the pair was closed.
func (l *epollLoop) send(g *epollLeg, msg []byte) bool {
	if len(g.out) > 0 || g.connecting {
		g.out = append(g.out, msg...)
		return true
	}
	k, err := unix.Write(g.fd, msg)
	if errors.Is(err, unix.EAGAIN) {
		k, err = 0, nil
	}
	if err != nil {
		l.close(g)
		return false
	}
	if k < len(msg) {
		g.out = append(g.out, msg[k:]...)
		if l.watch(unix.EPOLL_CTL_MOD, g.fd, unix.EPOLLIN|unix.EPOLLOUT) != nil {
			l.close(g)
			return false
		}
	}
	return true
}

// flush writes g's pending output once it can take it; false when the
// pair was closed.
func (l *epollLoop) flush(g *epollLeg) bool {
	for len(g.out) > 0 {
		k, err := unix.Write(g.fd, g.out)
		if errors.Is(err, unix.EAGAIN) {
			return true
		}
		if err != nil {
			l.close(g)
			return false
		}
		g.out = g.out[:copy(g.out, g.out[k:])]
	}
	if l.watch(unix.EPOLL_CTL_MOD, g.fd, unix.EPOLLIN) != nil {
		l.close(g)
		return false
	}
	return true
}

// close ends a pair, whichever side failed: both sockets leave the epoll
// set now and are closed at the end of the batch.
func (l *epollLoop) close(g *epollLeg) {
	for _, s := range []*epollLeg{g, g.peer} {
		if s.fd >= 0 {
			unix.EpollCtl(l.ep, unix.EPOLL_CTL_DEL, s.fd, nil)
			l.legs[s.fd] = nil
			l.closed = append(l.closed, s.fd)
			s.fd = -1
		}
	}
}

func (l *epollLoop) closeAll() {
	for _, g := range l.legs {
		if g != nil {
			l.close(g)
		}
	}
	for _, fd := range l.closed {
		unix.Close(fd)
	}
	l.closed = nil
}
