package client

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// realServer starts the real server stack (pebble store in a temp dir,
// registry, HTTP API) on an httptest listener: the client against the
// actual implementation of the contract.
func realServer(t *testing.T) *Client {
	t.Helper()
	srv := apitest.Start(t)
	c, err := New(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.http.CloseIdleConnections)
	return c
}

func TestRealServer(t *testing.T) {
	c := realServer(t)
	ctx := context.Background()

	// Register: weight 0 survives the round trip; a bad instance names its field.
	var batch []Instance
	for i := range 5 {
		batch = append(batch, Instance{
			ID: fmt.Sprintf("o-%d", i), Namespace: "prod", Service: "orders", Host: "10.0.0.1", Port: 8000 + i,
			Weight: Weight(i * 10), Metadata: map[string]string{"zone": fmt.Sprintf("z%d", i%2), "idx": fmt.Sprint(i)},
		})
	}
	reg, err := c.Register(ctx, batch...)
	if err != nil {
		t.Fatal(err)
	}
	if len(reg.IDs) != 5 || reg.IDs[0] != "o-0" || reg.Revision == 0 {
		t.Fatalf("Register = %+v", reg)
	}
	got, err := c.Get(ctx, "o-0")
	if err != nil {
		t.Fatal(err)
	}
	if got.Weight == nil || *got.Weight != 0 || !got.Healthy || got.Revision != reg.Revision || got.CreatedAt.IsZero() {
		t.Errorf("Get(o-0) = %+v (weight %v)", got, got.Weight)
	}
	_, err = c.Register(ctx, Instance{Service: "orders", Host: "h", Port: 1}, Instance{Service: "orders", Host: "h", Port: 0})
	var ae *Error
	if !errors.As(err, &ae) || !errors.Is(err, ErrInvalidArgument) || ae.Field != "instances[1].port" {
		t.Errorf("invalid register: %v (field %q)", err, ae.Field)
	}

	// Query with a selector; list with small pages.
	q, err := c.Query(ctx, "prod", "orders", QueryOptions{Selector: "zone=z1,idx!=3"})
	if err != nil {
		t.Fatal(err)
	}
	if len(q.Instances) != 1 || q.Instances[0].ID != "o-1" || q.Revision != reg.Revision {
		t.Errorf("Query = %+v", q)
	}
	var listed []string
	pages := 0
	err = c.ListAll(ctx, ListOptions{Namespace: "prod", Limit: 2}, func(p ListResult) error {
		pages++
		for _, in := range p.Instances {
			listed = append(listed, in.ID)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != 5 || pages < 3 {
		t.Errorf("ListAll: %v in %d pages, want 5 ids in >= 3 pages", listed, pages)
	}

	// Heartbeats and deregistration report unknown ids.
	nf, err := c.Heartbeat(ctx, "o-0", "ghost")
	if err != nil || len(nf) != 1 || nf[0] != "ghost" {
		t.Errorf("Heartbeat = %v, %v", nf, err)
	}
	if _, err := c.DeregisterOne(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeregisterOne(ghost) = %v, want ErrNotFound", err)
	}
	if _, err := c.Get(ctx, "ghost"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(ghost) = %v, want ErrNotFound", err)
	}

	// The change feed from the register's revision shows what follows.
	rev, nf, err := c.Deregister(ctx, "o-3", "o-4", "ghost")
	if err != nil || len(nf) != 1 || rev <= reg.Revision {
		t.Fatalf("Deregister = %d %v %v", rev, nf, err)
	}
	ch, err := c.Changes(ctx, reg.Revision, 100)
	if err != nil {
		t.Fatal(err)
	}
	deleted := 0
	for _, x := range ch.Changes {
		if x.Op == OpDelete {
			deleted++
		}
	}
	if deleted != 2 || ch.More || ch.Revision < rev {
		t.Errorf("Changes = %+v", ch)
	}

	ns, err := c.Namespaces(ctx)
	if err != nil || len(ns.Namespaces) != 1 || ns.Namespaces[0] != "prod" {
		t.Errorf("Namespaces = %+v, %v", ns, err)
	}
	svcs, err := c.Services(ctx, "prod")
	if err != nil || len(svcs.Services) != 1 || svcs.Services[0].Instances != 3 {
		t.Errorf("Services = %+v, %v", svcs, err)
	}
}

func TestRealServerWatch(t *testing.T) {
	c := realServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := c.Watch(ctx, "default", "web", WatchOptions{Wait: 10 * time.Second})
	if got := recv(t, w); got.Revision != 0 || len(got.Instances) != 0 {
		t.Fatalf("first state %+v, want the unknown service at revision 0", got)
	}
	// Registers may land before the blocking query parks; the watch still
	// sees each state or a later one, never an older one.
	var last uint64
	for i := range 3 {
		res, err := c.Register(context.Background(), Instance{ID: fmt.Sprint("w", i), Service: "web", Host: "h", Port: 1 + i})
		if err != nil {
			t.Fatal(err)
		}
		for last < res.Revision {
			got := recv(t, w)
			if got.Revision <= last {
				t.Fatalf("revision went from %d to %d", last, got.Revision)
			}
			last = got.Revision
		}
	}
	cancel()
	for range w.C {
	}
	if err := w.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() = %v", err)
	}
}
