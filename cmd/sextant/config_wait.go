package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/push"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// waitInterval is how often "config apply --wait" asks push status.
const waitInterval = 100 * time.Millisecond

// behind says why a subscriber's type is not in sync with what the
// control plane published: pending updates, a response not answered yet,
// or the last response rejected; "" when it is in sync.
func behind(ts xds.TypeStatus) string {
	switch {
	case len(ts.NACKs) > 0 && !ts.NACKs[len(ts.NACKs)-1].At.Before(ts.AckedAt):
		n := ts.NACKs[len(ts.NACKs)-1]
		return fmt.Sprintf("NACKED version %s: %s", n.Version, n.Message)
	case ts.Pending > 0:
		return fmt.Sprintf("%d updates not sent yet", ts.Pending)
	case ts.AwaitingAnswer:
		return fmt.Sprintf("version %s sent, not ACKed yet", ts.VersionSent)
	}
	return ""
}

// lagging lists, per subscriber not in sync, "node (address): type: why".
func lagging(st push.Status) []string {
	var out []string
	for _, s := range st.Subscribers {
		for _, ts := range s.Types {
			if why := behind(ts); why != "" {
				out = append(out, fmt.Sprintf("%s (%s): %s: %s", s.NodeID, s.Address, ts.Type, why))
			}
		}
	}
	return out
}

// waitApplied waits until every connected xDS subscriber has been sent and
// has ACKed everything the control plane published up to the write's
// revision (the server answered the write once it had published it): no
// update pending, no response unanswered, none rejected. It prints who is
// still behind when timeout passes, and fails then. verb names the command
// in errors ("config apply").
func waitApplied(ctx context.Context, out io.Writer, c *client.Client, verb string, rev int64, published *bool, warning string, timeout time.Duration) error {
	if published == nil {
		return fmt.Errorf("%s --wait: the server runs no control plane (no --xds listener): nothing to wait for", verb)
	}
	if !*published {
		return fmt.Errorf("%s --wait: %s", verb, warning)
	}
	start := time.Now()
	deadline := start.Add(timeout)
	var st push.Status
	for {
		st = push.Status{}
		if err := c.Call(ctx, http.MethodGet, "/v1/push/status", nil, &st); err != nil {
			return failed(verb+" --wait: push status", err)
		}
		lag := lagging(st)
		if len(lag) == 0 {
			fmt.Fprintf(out, "revision %d: ACKed by all %d subscribers (%v)\n", rev, len(st.Subscribers),
				time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Now().After(deadline) {
			for _, l := range lag {
				fmt.Fprintln(out, "  behind:", l)
			}
			return fmt.Errorf("%s --wait: revision %d not ACKed by every subscriber within %v (%d behind, listed above)",
				verb, rev, timeout, len(lag))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(waitInterval):
		}
	}
}
