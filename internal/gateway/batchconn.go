package gateway

import (
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// batchConn coalesces an HTTP/2 connection's writes into fewer system
// calls. net/http's HTTP/2 server and transport flush after nearly every
// frame (a stream's headers, each DATA frame, its END_STREAM, a handler's
// Flush): one write system call each, and over TLS one record each. A
// batchConn's Write only appends to a buffer and wakes the connection's
// writer goroutine, which writes everything that accumulated by the time it
// runs: the frames the goroutines serving the connection wrote before they
// blocked (a unary gRPC call's headers, message and trailers; many streams'
// frames at once) go out in one system call, as nginx's and MOSN's write
// loops do. Nothing waits on a timer: the writer runs as soon as the
// scheduler gets to it, so a stream's frames are not held.
//
// Write reports the error of an earlier write (the peer went away), and
// blocks while more than batchMax bytes are pending (the peer reads
// slowly), which bounds the buffer; the buffer goes back to a pool once
// written, so an idle connection holds none. The writer goroutine is the
// connection's: it ends when the connection is closed or a write fails.
type batchConn struct {
	net.Conn
	on atomic.Bool // batching; until then Write writes directly

	mu      sync.Mutex
	cond    sync.Cond // signalled when the writer took the buffer, or ended
	buf     *[]byte   // pending bytes (from batchBufs; nil: none)
	err     error     // the first write error, or net.ErrClosed after Close
	closing bool
	running bool // the writer goroutine was started
	idle    bool // the writer waits for bytes
	wake    chan struct{}
	done    chan struct{} // closed when the writer ended
}

const (
	batchMax     = 1 << 20         // pending bytes over which Write waits
	batchKeep    = 32 << 10        // a buffer up to this goes back to batchBufs
	batchLinger  = 5 * time.Second // how long Close lets pending bytes go out
	batchInitial = 16 << 10
)

// batchBufs are the pending bytes' buffers: an idle connection holds none.
var batchBufs = sync.Pool{New: func() any { s := make([]byte, 0, batchInitial); return &s }}

// pending is how many bytes wait; b.mu is held.
func (b *batchConn) pending() int {
	if b.buf == nil {
		return 0
	}
	return len(*b.buf)
}

// newBatchConn wraps c; its writes are batched once start is called (a TLS
// listener starts it when ALPN chose h2, so that a handshake and HTTP/1.1
// write directly).
func newBatchConn(c net.Conn) *batchConn {
	b := &batchConn{Conn: c} // the rest in start: an HTTP/1.1 connection over TLS never starts
	b.cond.L = &b.mu
	return b
}

// start starts batching: the writer goroutine.
func (b *batchConn) start() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.running || b.closing {
		return
	}
	b.running = true
	b.wake, b.done = make(chan struct{}, 1), make(chan struct{})
	b.on.Store(true)
	go b.writer()
}

func (b *batchConn) Write(p []byte) (int, error) {
	if !b.on.Load() {
		return b.Conn.Write(p)
	}
	b.mu.Lock()
	for b.err == nil && b.pending() > batchMax {
		b.cond.Wait()
	}
	if b.err != nil {
		err := b.err
		b.mu.Unlock()
		return 0, err
	}
	if b.buf == nil {
		b.buf = batchBufs.Get().(*[]byte)
	}
	*b.buf = append(*b.buf, p...)
	wake := b.idle
	b.idle = false
	b.mu.Unlock()
	if wake {
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// writer writes what Write buffered until the connection is closed (after
// writing what is pending) or a write fails.
func (b *batchConn) writer() {
	defer close(b.done)
	for {
		b.mu.Lock()
		for b.pending() == 0 && !b.closing {
			b.idle = true
			b.mu.Unlock()
			<-b.wake
			// Let the goroutines already runnable (other streams'
			// handlers, most often) add their frames first: one system
			// call for all of them.
			runtime.Gosched()
			b.mu.Lock()
		}
		out := b.buf
		b.buf = nil
		closing := b.closing
		b.cond.Broadcast()
		b.mu.Unlock()
		if out != nil {
			_, err := b.Conn.Write(*out)
			if cap(*out) <= batchKeep {
				*out = (*out)[:0]
				batchBufs.Put(out)
			}
			if err != nil {
				b.mu.Lock()
				if b.err == nil {
					b.err = err
				}
				b.buf = nil
				b.cond.Broadcast()
				b.mu.Unlock()
				return
			}
		}
		b.mu.Lock()
		if closing && b.pending() == 0 {
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
	}
}

// Close writes what is pending (for at most batchLinger) and closes the
// connection.
func (b *batchConn) Close() error {
	b.mu.Lock()
	if b.closing {
		b.mu.Unlock()
		return net.ErrClosed
	}
	b.closing = true
	running := b.running
	if b.err == nil {
		b.err = net.ErrClosed
	}
	b.cond.Broadcast()
	b.mu.Unlock()
	if running {
		// The writer may be in a write to a peer that does not read.
		_ = b.Conn.SetWriteDeadline(time.Now().Add(batchLinger))
		select {
		case b.wake <- struct{}{}:
		default:
		}
		<-b.done
	}
	return b.Conn.Close()
}
