package dnsapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Server serves a handler over UDP and TCP on one address. Listen opens
// both sockets, so that an address in use fails early; Serve serves them
// until Shutdown. The goroutine that calls Serve owns the servers'
// goroutines: Serve returns once they all stopped.
type Server struct {
	addr string
	pc   net.PacketConn
	ln   net.Listener

	mu      sync.Mutex
	servers [2]*dns.Server // UDP, TCP; set by Serve
	started [2]chan struct{}
	done    [2]chan struct{}
	serving bool // Serve was called
	stopped bool // Shutdown was called
}

// shutdownTimeout bounds how long Shutdown waits for queries in flight.
const shutdownTimeout = 5 * time.Second

// Listen listens on addr over UDP and TCP, on the same port: with port 0,
// one free for both.
func Listen(addr string) (*Server, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dnsapi: %w", err)
	}
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		ln, err = net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dnsapi: %w", err)
		}
		udpAddr := addr
		if port == "0" {
			udpAddr = net.JoinHostPort(host, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
		}
		pc, err = net.ListenPacket("udp", udpAddr)
		if err == nil {
			break
		}
		ln.Close()
		if port != "0" || try == 10 || !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("dnsapi: %w", err)
		}
		// The port TCP picked is taken over UDP: pick another.
	}
	return &Server{addr: ln.Addr().String(), pc: pc, ln: ln}, nil
}

// Addr is the address served, host:port (the same over UDP and TCP).
func (s *Server) Addr() string { return s.addr }

// Serve answers with h over UDP and TCP until Shutdown, then returns nil.
// If either stops on its own, Serve stops the other and returns the error.
// h is called on a goroutine per UDP query and per TCP connection.
func (s *Server) Serve(h dns.Handler) error {
	s.mu.Lock()
	if s.stopped || s.serving {
		s.mu.Unlock()
		return nil
	}
	s.serving = true
	for i := range s.servers {
		started := make(chan struct{})
		s.started[i], s.done[i] = started, make(chan struct{})
		// Queries are read into buffers of maxUDPSize: a query with EDNS0
		// options may exceed 512 bytes.
		s.servers[i] = &dns.Server{Handler: h, UDPSize: maxUDPSize, NotifyStartedFunc: func() { close(started) }}
	}
	s.servers[0].PacketConn, s.servers[1].Listener = s.pc, s.ln
	s.mu.Unlock()
	errc := make(chan error, len(s.servers))
	for i, srv := range s.servers {
		go func() {
			defer close(s.done[i])
			errc <- srv.ActivateAndServe()
		}()
	}
	err := <-errc
	stopErr := s.Shutdown()
	return errors.Join(err, <-errc, stopErr)
}

// Shutdown stops serving: it closes the sockets and waits (a few seconds
// at most) for the queries in flight. Calls after the first do nothing.
func (s *Server) Shutdown() error {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return nil
	}
	s.stopped = true
	serving := s.serving
	s.mu.Unlock()
	if !serving {
		return errors.Join(s.pc.Close(), s.ln.Close())
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	var errs []error
	for i, srv := range s.servers {
		// A dns.Server not started yet would refuse to stop and then
		// start: wait for it to start, or to have failed.
		select {
		case <-s.started[i]:
		case <-s.done[i]:
			continue
		}
		if err := srv.ShutdownContext(ctx); err != nil {
			errs = append(errs, fmt.Errorf("dnsapi: stop %s: %w", [...]string{"udp", "tcp"}[i], err))
		}
	}
	return errors.Join(errs...)
}
