package robustness

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Server is one real `sextant server` process that a scenario starts,
// kills and restarts on the same data (embedded) or database (cluster).
type Server struct {
	Index int
	Addr  string   // its HTTP address, the same across restarts
	Bin   string   // the sextant binary
	Args  []string // after "server"; --http is added

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
	log  *syncBuffer
}

// Base is the server's URL.
func (s *Server) Base() string { return "http://" + s.Addr }

// Start runs the server and waits until /readyz answers 200, or ctx ends.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	args := append([]string{"server", "--http", s.Addr}, s.Args...)
	cmd := exec.Command(s.Bin, args...)
	if s.log == nil {
		s.log = &syncBuffer{}
	}
	cmd.Stdout, cmd.Stderr = s.log, s.log
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("robustness: start s%d: %w", s.Index, err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() { cmd.Wait(); close(done) }()

	c := &http.Client{Timeout: time.Second}
	for {
		resp, err := c.Get(s.Base() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("robustness: s%d not ready: %w; its log:\n%s", s.Index, ctx.Err(), s.Log())
		case <-done:
			return fmt.Errorf("robustness: s%d exited before it was ready: %s; its log:\n%s", s.Index, cmd.ProcessState, s.Log())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL and waits for the process to end.
func (s *Server) Kill() { s.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits for the process to end.
func (s *Server) Stop() { s.signal(syscall.SIGTERM) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	cmd.Process.Signal(sig)
	<-done
}

// Log is what the server wrote to stdout and stderr, every run of it.
func (s *Server) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if os.Getenv("SEXTANT_TEST_SERVER_LOGS") != "" {
		os.Stderr.Write(p)
	}
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
