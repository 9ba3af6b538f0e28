package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/sextant-mesh/sextant/internal/jwt"
)

// jwksCache holds the remote JWKS of the JWT filters in force, fetched in
// the background: a call reads the keys there are (nil before the first
// fetch succeeds: its token fails, never passes) and never waits for a
// fetch. Keys are fetched again after their source's cache duration; a
// failed fetch keeps the keys it had and is retried with backoff (1 s
// doubling to 1 min). One fetch per URI at a time; sources the config no
// longer names are dropped by retain.
//
// Lock order: mu only. Fetch goroutines are owned by the cache: ctx ends
// them, close waits for them.
type jwksCache struct {
	log    *slog.Logger
	client *http.Client
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	entries map[string]*jwksEntry // by URI
}

type jwksEntry struct {
	keys     *jwt.KeySet // nil: none fetched yet
	fetched  time.Time   // of keys
	fetching bool
	retryAt  time.Time // after a failure: no fetch before
	backoff  time.Duration
	lastErr  error
}

// maxJWKSEntries bounds the cache: a config naming more URIs gets the
// first ones fetched; the others' tokens fail.
const maxJWKSEntries = 256

// newJWKSCache returns an empty cache logging to log (nil: discard).
func newJWKSCache(log *slog.Logger) *jwksCache {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &jwksCache{log: log, client: &http.Client{}, ctx: ctx, cancel: cancel, entries: map[string]*jwksEntry{}}
}

var _ keySource = (*jwksCache)(nil)

// keys returns s's keys, starting a fetch when there are none, they are
// older than s.cache, or a retry is due. It never blocks on the fetch.
// Call's goroutine.
func (c *jwksCache) keys(s *jwksSource) *jwt.KeySet {
	if c == nil || s == nil {
		return nil
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[s.uri]
	if e == nil {
		if len(c.entries) >= maxJWKSEntries {
			return nil
		}
		e = &jwksEntry{}
		c.entries[s.uri] = e
	}
	if !e.fetching && now.After(e.retryAt) && (e.keys == nil || now.Sub(e.fetched) >= s.cache) {
		c.startLocked(s, e)
	}
	return e.keys
}

// prefetch starts fetching sources' keys (Envoy's async_fetch: at config
// time, not at a call's); retain drops the entries of other URIs. Update's
// goroutine.
func (c *jwksCache) prefetch(sources []*jwksSource) {
	keep := map[string]bool{}
	for _, s := range sources {
		keep[s.uri] = true
		c.keys(s)
	}
	c.mu.Lock()
	for uri, e := range c.entries {
		if !keep[uri] && !e.fetching {
			delete(c.entries, uri)
		}
	}
	c.mu.Unlock()
}

// startLocked starts e's fetch; under mu.
func (c *jwksCache) startLocked(s *jwksSource, e *jwksEntry) {
	if c.ctx.Err() != nil {
		return
	}
	e.fetching = true
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ks, err := c.fetch(s)
		c.mu.Lock()
		defer c.mu.Unlock()
		e.fetching = false
		if err != nil {
			e.backoff = min(max(2*e.backoff, time.Second), time.Minute)
			e.retryAt = time.Now().Add(e.backoff)
			if e.lastErr == nil || e.lastErr.Error() != err.Error() {
				c.log.Warn("JWKS fetch failed; tokens of its issuer fail until it succeeds", "uri", s.uri, "err", err, "retry_in", e.backoff)
			}
			e.lastErr = err
			return
		}
		e.keys, e.fetched, e.backoff, e.retryAt, e.lastErr = ks, time.Now(), 0, time.Time{}, nil
	}()
}

func (c *jwksCache) fetch(s *jwksSource) (*jwt.KeySet, error) {
	ctx, cancel := context.WithTimeout(c.ctx, s.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.uri, nil)
	if err != nil {
		return nil, fmt.Errorf("gateway: jwks: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("gateway: jwks: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gateway: jwks: %s answered %s", s.uri, resp.Status)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, jwt.MaxKeySetBytes+1))
	if err != nil {
		return nil, fmt.Errorf("gateway: jwks: %w", err)
	}
	ks, err := jwt.ParseKeySet(b)
	if err != nil {
		return nil, fmt.Errorf("gateway: jwks %s: %w", s.uri, err)
	}
	return ks, nil
}

// close stops the fetches and waits for them.
func (c *jwksCache) close() {
	c.mu.Lock() // no fetch starts after: startLocked checks ctx under mu
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
}
