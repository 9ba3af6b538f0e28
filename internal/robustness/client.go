package robustness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"
)

// Client makes operations on servers over HTTP and records them in a
// history. One goroutine uses one Client.
type Client struct {
	ID      int
	History *History
	// Timeout bounds one request; a write not answered within it is of
	// unknown outcome.
	Timeout time.Duration
	// DiesWithStore: the servers keep their store in their own process (the
	// embedded store), so a write whose connection broke before its answer,
	// other than by the client's timeout, took effect before the break or
	// never.
	DiesWithStore bool
	http          *http.Client
}

// NewClient is a client with its own connections (a keep-alive connection
// is never shared between clients, so a request is never queued behind
// another client's).
func NewClient(id int, h *History, timeout time.Duration) *Client {
	return &Client{ID: id, History: h, Timeout: timeout,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: timeout}}
}

// Close drops the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// errWorkload is an answer api.md does not give to a read, or a body that
// does not parse: the run stops on it. (A write answered so is recorded as
// a violation, History.Outside, and the run goes on.)
var errWorkload = errors.New("robustness: an answer outside the contract")

type instanceJSON struct {
	ID       string            `json:"id"`
	Service  string            `json:"service"`
	Revision int64             `json:"revision"`
	Metadata map[string]string `json:"metadata"`
}

func (in instanceJSON) seen() Seen { return Seen{ID: in.ID, Value: in.Metadata["v"], Rev: in.Revision} }

// do sends one request. A nil error with status 0 never happens: either
// the server answered (status, body) or err says why not; sent reports
// whether the request may have reached the server.
func (c *Client) do(ctx context.Context, method, base, path string, body any) (status int, b []byte, sent bool, err error) {
	var r io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		return 0, nil, false, err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// A refused connection never reached a server; anything else may
		// have.
		return 0, nil, !errors.Is(err, syscall.ECONNREFUSED) && !isDialError(err), err
	}
	defer resp.Body.Close()
	b, err = io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, true, err
	}
	return resp.StatusCode, b, true, nil
}

func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Register upserts one instance of service with metadata {"v": value}.
// fresh says value was never registered before.
func (c *Client) Register(ctx context.Context, server int, base, id, service, value string, fresh bool) (Op, error) {
	o := Op{Client: c.ID, Server: server, Kind: Register, ID: id, Service: service, Value: value, Fresh: fresh}
	body := map[string]any{"id": id, "service": service, "host": "10.0.0.1", "port": 8080, "metadata": map[string]string{"v": value}}
	o.Call = c.History.Now()
	status, b, sent, err := c.do(ctx, "POST", base, "/v1/instances", body)
	o.Return = c.History.Now()
	return c.write(o, status, b, sent, err)
}

// Deregister deletes one instance.
func (c *Client) Deregister(ctx context.Context, server int, base, id, service string) (Op, error) {
	o := Op{Client: c.ID, Server: server, Kind: Deregister, ID: id, Service: service}
	o.Call = c.History.Now()
	status, b, sent, err := c.do(ctx, "DELETE", base, "/v1/instances/"+url.PathEscape(id), nil)
	o.Return = c.History.Now()
	return c.write(o, status, b, sent, err)
}

// write classifies a write's answer and records it. A write that never
// reached a server, or that the server says wrote nothing (500, api.md),
// is dropped: it has no effect to check.
func (c *Client) write(o Op, status int, b []byte, sent bool, err error) (Op, error) {
	switch {
	case err != nil && !sent, status == http.StatusInternalServerError:
		o.Status = Unknown // to the caller; not recorded
		return o, nil
	case err != nil, status == http.StatusServiceUnavailable:
		o.Status = Unknown
		// An answered 503 bounds the write too: a server on the embedded
		// store writes nothing after it answered.
		var ne net.Error
		o.Bounded = c.DiesWithStore && !(errors.As(err, &ne) && ne.Timeout())
	case status == http.StatusOK:
		var r struct{ Revision int64 }
		if err := json.Unmarshal(b, &r); err != nil || r.Revision <= 0 {
			return o, fmt.Errorf("%w: %s answered 200 %s", errWorkload, o.Kind, b)
		}
		o.Status, o.Rev = OK, r.Revision
	case status == http.StatusNotFound && o.Kind == Deregister:
		o.Status = NotFound
	default:
		// Not an answer api.md gives (a register answered 409): a violation
		// of its own, and the write may or may not have been made.
		c.History.Outside(fmt.Sprintf("%s %s through s%d answered %d %s", o.Kind, o.ID, o.Server, status, b))
		o.Status = Unknown
	}
	c.History.Add(o)
	return o, nil
}

// Get reads one instance.
func (c *Client) Get(ctx context.Context, server int, base, id, service string) (Op, error) {
	o := Op{Client: c.ID, Server: server, Kind: Get, ID: id, Service: service}
	o.Call = c.History.Now()
	status, b, _, err := c.do(ctx, "GET", base, "/v1/instances/"+url.PathEscape(id), nil)
	o.Return = c.History.Now()
	switch {
	case err != nil || status >= 500:
		return o, nil // a read that failed has no effect
	case status == http.StatusNotFound:
		o.Status = NotFound
	case status == http.StatusOK:
		var in instanceJSON
		if err := json.Unmarshal(b, &in); err != nil || in.ID != id {
			return o, fmt.Errorf("%w: get %s answered %s", errWorkload, id, b)
		}
		o.Seen = []Seen{in.seen()}
	default:
		return o, fmt.Errorf("%w: get %s answered %d %s", errWorkload, id, status, b)
	}
	c.History.Add(o)
	return o, nil
}

// List reads every instance of a service.
func (c *Client) List(ctx context.Context, server int, base, service string) (Op, error) {
	o := Op{Client: c.ID, Server: server, Kind: List, Service: service}
	o.Call = c.History.Now()
	status, b, _, err := c.do(ctx, "GET", base, "/v1/namespaces/default/services/"+url.PathEscape(service)+"/instances", nil)
	o.Return = c.History.Now()
	switch {
	case err != nil || status >= 500:
		return o, nil
	case status == http.StatusOK:
		var r struct {
			Revision  int64          `json:"revision"`
			Instances []instanceJSON `json:"instances"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return o, fmt.Errorf("%w: list %s answered %s", errWorkload, service, b)
		}
		o.Rev = r.Revision
		for _, in := range r.Instances {
			o.Seen = append(o.Seen, in.seen())
		}
	default:
		return o, fmt.Errorf("%w: list %s answered %d %s", errWorkload, service, status, b)
	}
	c.History.Add(o)
	return o, nil
}

// Changes reads one page of the change feed after since and records it. ok
// is false when the server did not answer (the page is not recorded).
func (c *Client) Changes(ctx context.Context, server int, base string, since int64) (p FeedPage, ok bool, err error) {
	return c.page(ctx, server, base, since, false)
}

func (c *Client) page(ctx context.Context, server int, base string, since int64, follower bool) (p FeedPage, ok bool, err error) {
	p = FeedPage{Client: c.ID, Server: server, Since: since, Follower: follower}
	p.Call = c.History.Now()
	status, b, _, err := c.do(ctx, "GET", base, "/v1/changes?limit=1000&since="+strconv.FormatInt(since, 10), nil)
	p.Return = c.History.Now()
	switch {
	case err != nil || status >= 500:
		return p, false, nil
	case status == http.StatusGone:
		p.Reset = true
	case status == http.StatusOK:
		var r struct {
			Revision int64 `json:"revision"`
			More     bool  `json:"more"`
			Changes  []struct {
				Revision int64         `json:"revision"`
				Op       string        `json:"op"`
				ID       string        `json:"id"`
				Instance *instanceJSON `json:"instance"`
			} `json:"changes"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			return p, false, fmt.Errorf("%w: /v1/changes answered %s", errWorkload, b)
		}
		p.Rev, p.More = r.Revision, r.More
		for _, ch := range r.Changes {
			switch {
			case ch.Op == "delete":
				p.Changes = append(p.Changes, Change{Rev: ch.Revision, Delete: true, ID: ch.ID})
			case ch.Op == "upsert" && ch.Instance != nil:
				p.Changes = append(p.Changes, Change{Rev: ch.Revision, ID: ch.Instance.ID, Value: ch.Instance.Metadata["v"]})
			default:
				return p, false, fmt.Errorf("%w: /v1/changes holds %+v", errWorkload, ch)
			}
		}
	default:
		return p, false, fmt.Errorf("%w: /v1/changes answered %d %s", errWorkload, status, b)
	}
	c.History.AddPage(p)
	return p, true, nil
}

// Follow reads a server's change feed from since until ctx ends,
// recording every page; after a 410 it goes on from the head the server
// answers. It returns the revision it caught up to.
func (c *Client) Follow(ctx context.Context, server int, base func() string, since int64) int64 {
	for ctx.Err() == nil {
		p, ok, err := c.page(ctx, server, base(), since, true)
		switch {
		case err != nil || !ok:
			// The server is down or restarting: ask again shortly.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		case p.Reset:
			// Its history starts later now: continue from its head; this
			// reader's feed is no longer whole (Check knows from Reset).
			since = c.head(ctx, base())
		default:
			since = p.Rev
			if !p.More {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		}
	}
	return since
}

// head is the revision a server's catalog is at (0 if it does not answer).
func (c *Client) head(ctx context.Context, base string) int64 {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/namespaces", nil)
	if err != nil {
		return 0
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	rev, _ := strconv.ParseInt(resp.Header.Get("X-Sextant-Revision"), 10, 64)
	return rev
}
