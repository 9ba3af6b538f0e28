package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
)

// serveFloor is the "go-floor" candidate: the least an HTTP/1.1
// keep-alive proxy written the usual Go way can do, a goroutine per client
// connection on the runtime's poller with one upstream connection of its
// own, bytes forwarded as they are (a head is framed by its blank line and
// Content-Length, nothing else of it is read). What the gateway costs
// above it is its own code; what it costs above nginx is Go's (issue 48).
// Chunked bodies are refused, and an answer without Content-Length is
// taken as empty: it serves the bench's upstream, nothing else.
func serveFloor(ctx context.Context, ln net.Listener, upstream string) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]bool{}
	closed := false
	closeAll := func() {
		mu.Lock()
		defer mu.Unlock()
		closed = true
		for c := range conns {
			c.Close()
		}
	}
	// track records an open connection (closed at once once closeAll ran)
	// or forgets a finished one.
	track := func(c net.Conn, on bool) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case on && closed:
			c.Close()
		case on:
			conns[c] = true
		default:
			delete(conns, c)
		}
	}
	stop := context.AfterFunc(ctx, func() {
		ln.Close()
		closeAll()
	})
	defer func() {
		// However Accept ended, the connections end before this returns.
		stop()
		closeAll()
		wg.Wait()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		track(c, true)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer track(c, false)
			defer c.Close()
			up, err := net.Dial("tcp", upstream)
			if err != nil {
				return
			}
			track(up, true)
			defer track(up, false)
			defer up.Close()
			in, out := newFloorLeg(c), newFloorLeg(up)
			for {
				// The request, then its answer, each whole before it is sent.
				msg, err := in.message()
				if err != nil {
					return
				}
				if _, err := up.Write(msg); err != nil {
					return
				}
				if msg, err = out.message(); err != nil {
					return
				}
				if _, err := c.Write(msg); err != nil {
					return
				}
			}
		}()
	}
}

// floorLeg reads HTTP/1.1 messages from one side of a floor connection.
type floorLeg struct {
	c net.Conn
	floorFrame
}

func newFloorLeg(c net.Conn) *floorLeg {
	return &floorLeg{c: c, floorFrame: floorFrame{buf: make([]byte, 16<<10)}}
}

// message returns the next message, head and body, valid until the next
// call.
func (l *floorLeg) message() ([]byte, error) {
	for {
		if msg, err := l.next(); msg != nil || err != nil {
			return msg, err
		}
		if err := l.fill(); err != nil {
			return nil, err
		}
	}
}

// floorFrame frames the HTTP/1.1 messages in the bytes read from one side
// of a connection (go-floor's and go-epoll's).
type floorFrame struct {
	buf  []byte
	n    int // bytes in buf
	used int // bytes of buf the last message took
}

var errFloorChunked = errors.New("bench: go-floor: chunked bodies are not forwarded")

// next returns the next message, head and body, valid until the next
// call, or nil until all of it has been read.
func (f *floorFrame) next() ([]byte, error) {
	if f.used > 0 {
		copy(f.buf, f.buf[f.used:f.n])
		f.n -= f.used
		f.used = 0
	}
	end := bytes.Index(f.buf[:f.n], []byte("\r\n\r\n"))
	if end < 0 {
		return nil, nil
	}
	size, err := floorBodySize(f.buf[:end+2])
	if err != nil {
		return nil, err
	}
	total := end + 4 + size
	if total > len(f.buf) {
		return nil, fmt.Errorf("bench: go-floor: a %d-byte message", total)
	}
	if f.n < total {
		return nil, nil
	}
	f.used = total
	return f.buf[:total], nil
}

func (l *floorLeg) fill() error {
	if l.n == len(l.buf) {
		return errors.New("bench: go-floor: a head larger than its buffer")
	}
	k, err := l.c.Read(l.buf[l.n:])
	l.n += k
	if k > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// floorBodySize reads Content-Length off a head (its lines up to the
// blank one).
func floorBodySize(head []byte) (int, error) {
	for len(head) > 0 {
		i := bytes.Index(head, []byte("\r\n"))
		if i < 0 {
			break
		}
		line := head[:i]
		head = head[i+2:]
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
			if err != nil || n < 0 {
				return 0, fmt.Errorf("bench: go-floor: Content-Length %q", v)
			}
			return n, nil
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			return 0, errFloorChunked
		}
	}
	return 0, nil
}
