package client

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/balancer"
)

func mustRegister(t *testing.T, c *Client, ins ...Instance) RegisterResult {
	t.Helper()
	res, err := c.Register(context.Background(), ins...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func newView(t *testing.T, c *Client, opts ViewOptions, services ...string) *View {
	t.Helper()
	v, err := c.NewView(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Add(ctx, services...); err != nil {
		t.Fatal(err)
	}
	return v
}

func ids(st ServiceState) map[string]bool {
	m := map[string]bool{}
	for _, in := range st.Instances {
		m[in.ID] = true
	}
	return m
}

func TestViewFollowsRegistrations(t *testing.T) {
	_, c, _ := stackClient(t)
	mustRegister(t, c, Instance{ID: "a", Namespace: "prod", Service: "orders", Host: "10.0.0.1", Port: 80})
	v := newView(t, c, ViewOptions{Namespace: "prod"}, "orders", "prod/payments")
	var changes atomic.Int64
	unsub, err := v.Subscribe("prod/orders", func() { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	defer unsub()
	st, _ := v.State("orders")
	if !ids(st)["a"] || st.Revision == 0 {
		t.Fatalf("first state %+v", st)
	}
	if p, _ := v.State("prod/payments"); len(p.Instances) != 0 || p.Revision != 0 {
		t.Fatalf("unknown service state %+v", p)
	}
	mustRegister(t, c, Instance{ID: "b", Namespace: "prod", Service: "orders", Host: "10.0.0.2", Port: 80})
	eventually(t, 10*time.Second, "view sees b", func() bool { st, _ := v.State("orders"); return ids(st)["b"] })
	if _, err := c.DeregisterOne(context.Background(), "a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "view drops a", func() bool { st, _ := v.State("orders"); return !ids(st)["a"] })
	for range 20 {
		p, err := v.Pick("prod/orders", PickOptions{})
		if err != nil || p.Instance.ID != "b" || p.Addr() != "10.0.0.2:80" {
			t.Fatalf("Pick = %+v, %v", p.Instance, err)
		}
		p.Done(time.Millisecond, nil)
	}
	if changes.Load() < 3 {
		t.Errorf("subscriber called %d times, want >= 3", changes.Load())
	}
	if _, err := v.Pick("other", PickOptions{}); !errors.Is(err, ErrUnknownService) {
		t.Errorf("Pick(other) = %v", err)
	}
}

func TestViewAddRejectsBadName(t *testing.T) {
	_, c, _ := stackClient(t)
	v, err := c.NewView(ViewOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if err := v.Add(context.Background(), "a/b/c"); !errors.Is(err, ErrInvalidPick) {
		t.Errorf("Add(a/b/c) = %v", err)
	}
	err = v.Add(context.Background(), "Bad_Name!")
	if !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Add(Bad_Name!) = %v, want the server's invalid_argument", err)
	}
	if _, err := v.State("Bad_Name!"); !errors.Is(err, ErrUnknownService) {
		t.Errorf("a rejected service stays in the view: %v", err)
	}
}

func TestNewViewValidates(t *testing.T) {
	c, _ := New("http://127.0.0.1:1")
	for name, opts := range map[string]ViewOptions{
		"policy":   {Policy: "fastest"},
		"fallback": {Subsets: SubsetConfig{FallbackPolicy: "SOMETIMES"}},
		"keys":     {ServiceSubsets: map[string]SubsetConfig{"orders": {Selectors: []SubsetSelector{{Keys: []string{"a", "a"}}}}}},
	} {
		if _, err := c.NewView(opts); err == nil {
			t.Errorf("%s: NewView accepted %+v", name, opts)
		}
	}
}

// pickIDs picks n times and counts the ids picked.
func pickIDs(t *testing.T, v *View, service string, opts PickOptions, n int) (map[string]int, error) {
	t.Helper()
	got := map[string]int{}
	for range n {
		p, err := v.Pick(service, opts)
		if err != nil {
			return got, err
		}
		got[p.Instance.ID]++
		p.Report(time.Millisecond, OutcomeSuccess)
	}
	return got, nil
}

func TestPickSubsetsAndFallbacks(t *testing.T) {
	_, c, _ := stackClient(t)
	mustRegister(t, c,
		Instance{ID: "v1-z1", Service: "orders", Host: "10.0.0.1", Port: 80, Metadata: map[string]string{"version": "v1", "zone": "z1"}},
		Instance{ID: "v1-z2", Service: "orders", Host: "10.0.0.2", Port: 80, Metadata: map[string]string{"version": "v1", "zone": "z2"}},
		Instance{ID: "v2-z1", Service: "orders", Host: "10.0.0.3", Port: 80, Metadata: map[string]string{"version": "v2", "zone": "z1"}},
		Instance{ID: "v2-z2-iso", Service: "orders", Host: "10.0.0.4", Port: 80, Isolated: true, Metadata: map[string]string{"version": "v2", "zone": "z2"}},
	)
	v := newView(t, c, ViewOptions{Policy: PolicyRoundRobin, Subsets: SubsetConfig{
		FallbackPolicy: FallbackDefaultSubset,
		DefaultSubset:  map[string]string{"version": "v1"},
		Selectors: []SubsetSelector{
			{Keys: []string{"version", "zone"}, FallbackPolicy: FallbackKeysSubset, FallbackKeysSubset: []string{"version"}},
			{Keys: []string{"version"}},
		},
	}}, "orders")

	tests := []struct {
		name    string
		opts    PickOptions
		want    []string
		wantErr error
	}{
		{name: "exact subset", opts: PickOptions{Match: map[string]string{"version": "v2", "zone": "z1"}}, want: []string{"v2-z1"}},
		{name: "subset of isolated only: no fallback, no instance",
			opts: PickOptions{Match: map[string]string{"version": "v2", "zone": "z2"}}, wantErr: ErrNoInstance},
		{name: "keys subset fallback", opts: PickOptions{Match: map[string]string{"version": "v1", "zone": "z9"}}, want: []string{"v1-z1", "v1-z2"}},
		{name: "keys subset, then cluster default subset",
			opts: PickOptions{Match: map[string]string{"version": "v3", "zone": "z1"}}, want: []string{"v1-z1", "v1-z2"}},
		{name: "no selector for the keys: cluster fallback", opts: PickOptions{Match: map[string]string{"zone": "z1"}}, want: []string{"v1-z1", "v1-z2"}},
		{name: "fallback override none",
			opts: PickOptions{Match: map[string]string{"zone": "z1"}, Fallback: FallbackNone}, wantErr: ErrNoSubset},
		{name: "fallback override any",
			opts: PickOptions{Match: map[string]string{"zone": "z1"}, Fallback: FallbackAny}, want: []string{"v1-z1", "v1-z2", "v2-z1"}},
		{name: "bad fallback", opts: PickOptions{Match: map[string]string{"zone": "z1"}, Fallback: FallbackKeysSubset}, wantErr: ErrInvalidPick},
		{name: "no match: every healthy instance", opts: PickOptions{}, want: []string{"v1-z1", "v1-z2", "v2-z1"}},
		{name: "selector", opts: PickOptions{Selector: "version=v2"}, want: []string{"v2-z1"}},
		{name: "selector set", opts: PickOptions{Selector: "zone in (z1,z2),version!=v2"}, want: []string{"v1-z1", "v1-z2"}},
		{name: "selector with a policy", opts: PickOptions{Selector: "zone=z1", Policy: PolicyLeastRequest}, want: []string{"v1-z1", "v2-z1"}},
		{name: "selector nothing", opts: PickOptions{Selector: "zone=z7"}, wantErr: ErrNoInstance},
		{name: "bad selector", opts: PickOptions{Selector: "zone in (z1"}, wantErr: ErrInvalidPick},
		{name: "match and selector", opts: PickOptions{Selector: "zone=z1", Match: map[string]string{"zone": "z1"}}, wantErr: ErrInvalidPick},
		{name: "unknown policy", opts: PickOptions{Policy: "fastest"}, wantErr: ErrInvalidPick},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := pickIDs(t, v, "orders", tt.opts, 30)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("picked %v, want each of %v", got, tt.want)
			}
			for _, id := range tt.want {
				if got[id] == 0 {
					t.Fatalf("picked %v, want each of %v", got, tt.want)
				}
			}
		})
	}

	// The isolated instance turns pickable: the view follows and the
	// exact subset answers again.
	mustRegister(t, c, Instance{ID: "v2-z2-iso", Service: "orders", Host: "10.0.0.4", Port: 80, Metadata: map[string]string{"version": "v2", "zone": "z2"}})
	eventually(t, 10*time.Second, "v2-z2 pickable", func() bool {
		p, err := v.Pick("orders", PickOptions{Match: map[string]string{"version": "v2", "zone": "z2"}})
		if err == nil {
			p.Report(0, OutcomeCanceled)
		}
		return err == nil && p.Instance.ID == "v2-z2-iso"
	})
}

// TestPickOutcomesEject: failures reported through Picked eject the
// instance (outlier ejection learns from the caller's reports).
func TestPickOutcomesEject(t *testing.T) {
	_, c, _ := stackClient(t)
	mustRegister(t, c,
		Instance{ID: "good", Service: "web", Host: "10.0.0.1", Port: 80, Metadata: map[string]string{"v": "1"}},
		Instance{ID: "bad", Service: "web", Host: "10.0.0.2", Port: 80, Metadata: map[string]string{"v": "1"}},
	)
	v := newView(t, c, ViewOptions{
		Policy:          PolicyRoundRobin,
		OutlierEjection: &OutlierEjection{ConsecutiveFailures: 3, BaseEjection: time.Minute},
		Subsets:         SubsetConfig{Selectors: []SubsetSelector{{Keys: []string{"v"}}}},
	}, "web")
	for _, opts := range []PickOptions{{Match: map[string]string{"v": "1"}}, {Selector: "v=1"}} {
		for range 20 {
			p, err := v.Pick("web", opts)
			if err != nil {
				t.Fatal(err)
			}
			var callErr error
			if p.Instance.ID == "bad" {
				callErr = errors.New("connection refused")
			}
			p.Done(time.Millisecond, callErr)
		}
		got, err := pickIDs(t, v, "web", opts, 20)
		if err != nil || got["bad"] != 0 || got["good"] != 20 {
			t.Errorf("%+v: after failures picked %v, %v; want only good", opts, got, err)
		}
	}
}

func TestOutcomeValues(t *testing.T) {
	pairs := map[Outcome]balancer.Outcome{
		OutcomeSuccess: balancer.Success, OutcomeRejected: balancer.Rejected, OutcomeTimeout: balancer.Timeout,
		OutcomeFailed: balancer.Failed, OutcomeCanceled: balancer.Canceled,
	}
	for o, b := range pairs {
		if uint8(o) != uint8(b) || o.String() != b.String() {
			t.Errorf("client outcome %d (%s) is not balancer's %d (%s)", o, o, b, b)
		}
	}
	for err, want := range map[error]Outcome{
		nil:                                   OutcomeSuccess,
		fmt.Errorf("429: %w", ErrRejected):    OutcomeRejected,
		context.DeadlineExceeded:              OutcomeTimeout,
		fmt.Errorf("x: %w", context.Canceled): OutcomeCanceled,
		errors.New("boom"):                    OutcomeFailed,
	} {
		if got := OutcomeOf(err); got != want {
			t.Errorf("OutcomeOf(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestViewSurvivesServerRestart: the watch retries while the server is
// down and resumes; after a restart that lost the data it follows the new
// registrations.
func TestViewSurvivesServerRestart(t *testing.T) {
	st, c, _ := stackClient(t)
	mustRegister(t, c, Instance{ID: "a", Service: "orders", Host: "10.0.0.1", Port: 80})
	var errs atomic.Int64
	v := newView(t, c, ViewOptions{Wait: time.Second, OnError: func(string, error) { errs.Add(1) }}, "orders")

	st.Stop()
	eventually(t, 10*time.Second, "a watch error while the server is down", func() bool { return errs.Load() > 0 })
	if p, err := v.Pick("orders", PickOptions{}); err != nil || p.Instance.ID != "a" {
		t.Fatalf("while the server is down Pick = %v, %v; want the last state", p.Instance, err)
	} else {
		p.Report(0, OutcomeCanceled)
	}
	mustOK(t, st.Start())
	mustRegister(t, c, Instance{ID: "b", Service: "orders", Host: "10.0.0.2", Port: 80})
	eventually(t, 10*time.Second, "view sees b after a restart", func() bool { s, _ := v.State("orders"); return ids(s)["a"] && ids(s)["b"] })

	mustOK(t, st.Wipe())
	mustOK(t, st.Start())
	mustRegister(t, c, Instance{ID: "c", Service: "orders", Host: "10.0.0.3", Port: 80})
	eventually(t, 10*time.Second, "view follows a server that lost its data", func() bool {
		s, _ := v.State("orders")
		return ids(s)["c"] && !ids(s)["a"]
	})
}
