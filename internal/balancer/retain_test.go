package balancer

import "testing"

// A subset balancer builds pickers of different endpoint sets from one
// policy; after Retain, building one subset's picker must not forget what
// another subset's picker learned.
func TestRetainKeepsStateAcrossSubsets(t *testing.T) {
	a := []Endpoint{{ID: "e1", Weight: 1}, {ID: "e2", Weight: 1}}
	b := []Endpoint{{ID: "e3", Weight: 1}}
	for _, retain := range []bool{true, false} {
		p := NewLeastRequest(1)
		if retain {
			p.Retain([]string{"e1", "e2", "e3"})
		}
		pa := p.Build(a)
		busy, err := pa.Pick() // one call in flight on a[busy]
		if err != nil {
			t.Fatal(err)
		}
		p.Build(b) // another subset
		pa2 := p.Build(a)
		lr := pa2.(*lrPicker)
		got := lr.states[busy].active.Load()
		if retain && got != 1 {
			t.Fatalf("retained: the in-flight call on %s was forgotten (active %d)", a[busy].ID, got)
		}
		if !retain && got != 0 {
			t.Fatalf("without Retain the old behaviour (forget) changed: active %d", got)
		}
		pa.Done(busy, 0, Success)
	}
	// Retain drops endpoints that left the cluster.
	p := NewLeastRequest(1)
	p.Retain([]string{"e1"})
	p.Build(a)
	p.Retain([]string{"e2"})
	if _, ok := p.states.m["e1"]; ok {
		t.Fatal("e1 left the cluster but its state stayed")
	}
}
