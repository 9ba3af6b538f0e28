package registry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sextant-mesh/sextant/client"
)

// querySelector matches half the query service (meta-key01 has two values).
const querySelector = "meta-key01=v01-000001,meta-key02!=x"

// query runs the scenario: GET of one service of QuerySize instances with a
// two-term selector, from QueryConns connections.
func (r *run) query(ctx context.Context) (*Throughput, error) {
	n := r.cfg.QuerySize
	t := newTemplate(r.cfg.Namespace, "query", "query-", n, 0)
	t.set(0)
	f := r.family("query-")
	loadc := r.caller()
	_, err := loadc.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body)
	loadc.close()
	if err != nil {
		return nil, err
	}
	f.n.Store(int64(n))
	check, err := r.c.Query(ctx, r.cfg.Namespace, "query", client.QueryOptions{Selector: querySelector})
	if err != nil {
		return nil, err
	}
	if want := n / 2; len(check.Instances) != want {
		return nil, fmt.Errorf("selector %q matched %d instances, want %d", querySelector, len(check.Instances), want)
	}
	target := r.base + "/v1/namespaces/" + r.cfg.Namespace + "/services/query/instances?selector=" +
		"meta-key01%3Dv01-000001%2Cmeta-key02%21%3Dx"
	if r.cfg.QueryGzip {
		// Check that the server compresses, then read its answers as they
		// come: the figure is the server's, not an inflater's.
		c := r.caller()
		c.hdr = "Accept-Encoding: gzip\r\n"
		_, err := c.send(ctx, http.MethodGet, target, nil)
		c.close()
		if err != nil {
			return nil, err
		}
		if len(c.buf) < 2 || c.buf[0] != 0x1f || c.buf[1] != 0x8b {
			return nil, fmt.Errorf("asked for gzip, the answer is not gzip: %.40q", c.buf)
		}
	}
	res, err := r.loop(ctx, "query", r.cfg.QueryConns, func(ctx context.Context, g int, c *caller) (int, bool, error) {
		if r.cfg.QueryGzip {
			c.hdr = "Accept-Encoding: gzip\r\n"
		}
		_, err := c.send(ctx, http.MethodGet, target, nil)
		return 1, false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "queries", 1, 30_000
		res.Note = fmt.Sprintf("service of %d instances, selector %q matching %d", n, querySelector, n/2)
		if r.cfg.QueryGzip {
			res.Note += ", Accept-Encoding: gzip"
		}
	}
	return res, err
}
