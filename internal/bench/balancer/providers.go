package balancer

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// ErrProviders marks an invalid providers file.
var ErrProviders = errors.New("bench: invalid providers file")

// RaceProviders is the 2019 race's own providers file, built in so that
// the benches run from any checkout.
//
//go:embed testdata/race-providers.json
var RaceProviders []byte

// ProvidersFile is the race's provider configuration
// (testdata/race-providers.json): per provider, its thread count and,
// per phase, how many calls it serves at once and their mean service time.
type ProvidersFile struct {
	Source       string                     `json:"source"`
	Threads      map[string]int             `json:"threads"`
	PhaseSeconds float64                    `json:"phase_seconds"`
	Phases       map[string][]ProviderPhase `json:"phases"`
}

// ProviderPhase is one provider's capacity during one phase.
type ProviderPhase struct {
	MaxConcurrent int     `json:"max_concurrent"`
	AvgRTTMs      float64 `json:"avg_rtt_ms"`
}

// LoadProviders reads and validates a providers file; "" is the built-in
// RaceProviders.
func LoadProviders(path string) (*ProvidersFile, error) {
	if path == "" {
		return ParseProviders(RaceProviders)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("bench: read providers: %w", err)
	}
	return ParseProviders(b)
}

// ParseProviders decodes a providers file strictly (unknown fields are
// errors) and validates it; errors name the offending field.
func ParseProviders(b []byte) (*ProvidersFile, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f ProvidersFile
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProviders, err)
	}
	if !(f.PhaseSeconds > 0) || math.IsInf(f.PhaseSeconds, 0) {
		return nil, fmt.Errorf("%w: phase_seconds must be > 0, got %v", ErrProviders, f.PhaseSeconds)
	}
	if len(f.Threads) == 0 {
		return nil, fmt.Errorf("%w: threads: no provider", ErrProviders)
	}
	n := -1
	for name, t := range f.Threads {
		if t <= 0 {
			return nil, fmt.Errorf("%w: threads.%s must be > 0, got %d", ErrProviders, name, t)
		}
		ph, ok := f.Phases[name]
		if !ok {
			return nil, fmt.Errorf("%w: phases.%s missing (provider listed in threads)", ErrProviders, name)
		}
		if len(ph) == 0 {
			return nil, fmt.Errorf("%w: phases.%s is empty", ErrProviders, name)
		}
		if n >= 0 && len(ph) != n {
			return nil, fmt.Errorf("%w: phases.%s has %d phases, others %d", ErrProviders, name, len(ph), n)
		}
		n = len(ph)
		for i, p := range ph {
			if p.MaxConcurrent <= 0 {
				return nil, fmt.Errorf("%w: phases.%s[%d].max_concurrent must be > 0, got %d", ErrProviders, name, i, p.MaxConcurrent)
			}
			if !(p.AvgRTTMs > 0) || math.IsInf(p.AvgRTTMs, 0) {
				return nil, fmt.Errorf("%w: phases.%s[%d].avg_rtt_ms must be > 0, got %v", ErrProviders, name, i, p.AvgRTTMs)
			}
		}
	}
	for name := range f.Phases {
		if _, ok := f.Threads[name]; !ok {
			return nil, fmt.Errorf("%w: phases.%s has no threads.%s", ErrProviders, name, name)
		}
	}
	return &f, nil
}

// simProvider is one scaled provider of the race: Threads calls at most
// (more are rejected at once with 503), of which the current phase's
// MaxConcurrent are served and the rest wait for a permit, in order.
type simProvider struct {
	name    string
	threads int64
	phases  []ProviderPhase // scaled
	warmup  ProviderPhase   // served before phase 0

	busy    atomic.Int64
	permits *permits
	phase   atomic.Int64 // current phase index; -1: warm-up

	rngMu sync.Mutex
	rng   *rand.Rand

	srv  *http.Server
	addr string
}

// current is the provider's true capacity now (the oracle reads it).
func (p *simProvider) current() ProviderPhase {
	if i := p.phase.Load(); i >= 0 {
		return p.phases[i]
	}
	return p.warmup
}

// serviceMs draws a service time: the smallest whole millisecond x >= 1
// with 1 - e^(-x/avg) > u, u uniform in [0,1).
func (p *simProvider) serviceMs(avg float64) int {
	p.rngMu.Lock()
	u := p.rng.Float64()
	p.rngMu.Unlock()
	return int(math.Floor(-avg*math.Log1p(-u))) + 1
}

// meanServiceMs is E[x] for that draw: sum over k >= 0 of P(x > k).
func meanServiceMs(avg float64) float64 { return 1 / (1 - math.Exp(-1/avg)) }

func (p *simProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if p.busy.Add(1) > p.threads {
		p.busy.Add(-1)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	defer p.busy.Add(-1)
	if err := p.permits.acquire(r.Context()); err != nil {
		return // the caller gave up
	}
	ms := p.serviceMs(p.current().AvgRTTMs)
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	p.permits.release()
	w.WriteHeader(http.StatusOK)
}

// start listens on a loopback port and serves until stop.
func (p *simProvider) start() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("bench: provider %s: %w", p.name, err)
	}
	p.addr = ln.Addr().String()
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = p.srv.Serve(ln) }() // ends when stop closes the server
	return nil
}

func (p *simProvider) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if p.srv.Shutdown(ctx) != nil {
		_ = p.srv.Close()
	}
}

// setPhase switches the provider to phase i (-1: warm-up).
func (p *simProvider) setPhase(i int) {
	p.phase.Store(int64(i))
	p.permits.setCapacity(int64(p.current().MaxConcurrent))
}

// newSimProviders scales the file by k (threads and max_concurrent divided
// by k, at least 1) and orders providers by thread count. Warm-up serves the
// last phase, so phase 0 starts with a capacity change like every other.
func newSimProviders(f *ProvidersFile, k int, seed uint64) []*simProvider {
	names := make([]string, 0, len(f.Threads))
	for n := range f.Threads {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if f.Threads[names[i]] != f.Threads[names[j]] {
			return f.Threads[names[i]] < f.Threads[names[j]]
		}
		return names[i] < names[j]
	})
	out := make([]*simProvider, len(names))
	for i, n := range names {
		p := &simProvider{
			name:    n,
			threads: int64(max(f.Threads[n]/k, 1)),
			rng:     rand.New(rand.NewPCG(seed, uint64(i))),
		}
		for _, ph := range f.Phases[n] {
			p.phases = append(p.phases, ProviderPhase{MaxConcurrent: max(ph.MaxConcurrent/k, 1), AvgRTTMs: ph.AvgRTTMs})
		}
		p.warmup = p.phases[len(p.phases)-1]
		p.permits = &permits{capacity: int64(p.warmup.MaxConcurrent)}
		p.phase.Store(-1)
		out[i] = p
	}
	return out
}

// permits is a counting semaphore whose capacity may change; waiters are
// served first come, first served.
type permits struct {
	mu       sync.Mutex
	capacity int64
	inUse    int64
	waiters  []chan struct{}
}

func (s *permits) acquire(ctx context.Context) error {
	s.mu.Lock()
	if s.inUse < s.capacity && len(s.waiters) == 0 {
		s.inUse++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				s.mu.Unlock()
				return ctx.Err()
			}
		}
		s.mu.Unlock()
		s.release() // granted while we gave up: hand it on
		return ctx.Err()
	}
}

func (s *permits) release() {
	s.mu.Lock()
	s.inUse--
	s.grant()
	s.mu.Unlock()
}

func (s *permits) setCapacity(c int64) {
	s.mu.Lock()
	s.capacity = c
	s.grant()
	s.mu.Unlock()
}

// grant hands free permits to waiters in order; called with mu held.
func (s *permits) grant() {
	for s.inUse < s.capacity && len(s.waiters) > 0 {
		close(s.waiters[0])
		s.waiters = s.waiters[1:]
		s.inUse++
	}
}
