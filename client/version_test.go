package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestVersionIsALabel: an instance registered with a version (and no
// "version" metadata) is found by the server's selectors and by the
// view's selector and subset picks, as the label "version"; its metadata
// answers what was registered. A register whose metadata contradicts the
// version is refused naming metadata.version.
func TestVersionIsALabel(t *testing.T) {
	_, c, _ := stackClient(t)
	ctx := context.Background()
	mustRegister(t, c,
		Instance{ID: "a1", Service: "orders", Host: "10.0.0.1", Port: 80, Version: "v1", Metadata: map[string]string{"zone": "z1"}},
		Instance{ID: "a2", Service: "orders", Host: "10.0.0.2", Port: 80, Version: "v2", Metadata: map[string]string{"zone": "z1"}},
		Instance{ID: "a3", Service: "orders", Host: "10.0.0.3", Port: 80, Version: "v2", Metadata: map[string]string{"version": "v2"}},
	)
	q, err := c.Query(ctx, "default", "orders", QueryOptions{Selector: "version=v2"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, in := range q.Instances {
		got = append(got, in.ID)
	}
	if !slices.Equal(got, []string{"a2", "a3"}) {
		t.Fatalf("server selector version=v2: %v", got)
	}
	if in, err := c.Get(ctx, "a2"); err != nil || !maps.Equal(in.Metadata, map[string]string{"zone": "z1"}) {
		t.Fatalf("a2's metadata %v (%v), want what was registered", in.Metadata, err)
	}

	v := newView(t, c, ViewOptions{Subsets: SubsetConfig{Selectors: []SubsetSelector{{Keys: []string{"version"}}}}}, "orders")
	for _, tc := range []struct {
		opts PickOptions
		want string
	}{
		{PickOptions{Selector: "version=v2"}, "[a2 a3]"},
		{PickOptions{Selector: "version=v1,zone=z1"}, "[a1]"},
		{PickOptions{Match: map[string]string{"version": "v2"}}, "[a2 a3]"},
		{PickOptions{Match: map[string]string{"version": "v1"}}, "[a1]"},
	} {
		picked, err := pickIDs(t, v, "orders", tc.opts, 20)
		if err != nil {
			t.Fatalf("%+v: %v", tc.opts, err)
		}
		if ids := slices.Sorted(maps.Keys(picked)); fmt.Sprint(ids) != tc.want {
			t.Errorf("%+v picked %v, want %s", tc.opts, ids, tc.want)
		}
	}

	_, err = c.Register(ctx, Instance{ID: "bad", Service: "orders", Host: "10.0.0.9", Port: 80, Version: "v2", Metadata: map[string]string{"version": "v1"}})
	var apiErr *Error
	if !errors.As(err, &apiErr) || apiErr.Field != "instances[0].metadata.version" || !strings.Contains(apiErr.Message, `"v1" differs from version "v2"`) {
		t.Fatalf("contradicting register: %v (%+v)", err, apiErr)
	}
}
