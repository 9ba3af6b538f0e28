package placement

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/sextant-mesh/sextant/internal/label"
)

// The record encodings are a version byte and varint-framed fields: a
// start-up decodes half a million placements, so no JSON and no reflection.

const (
	nodeVersion      = 1
	placementVersion = 1
)

// ErrCorrupt is wrapped by every record decoding error.
var ErrCorrupt = errors.New("placement: corrupt record")

type enc struct{ b []byte }

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *enc) labels(l label.Labels) {
	e.uvarint(uint64(l.Len()))
	for k, v := range l.All() {
		e.str(k)
		e.str(v)
	}
}

func (e *enc) resources(r *Resources) {
	e.varint(r.CPU)
	e.varint(r.Memory)
	e.varint(r.EphemeralStorage)
	e.uvarint(uint64(len(r.Scalars)))
	for _, s := range r.Scalars {
		e.str(s.Name)
		e.varint(s.Value)
	}
}

func (e *enc) selector(s *Selector) {
	e.boolean(s.Nothing)
	e.uvarint(uint64(len(s.Reqs)))
	for _, r := range s.Reqs {
		e.str(r.Key)
		e.b = append(e.b, byte(r.Op))
		e.uvarint(uint64(len(r.Values)))
		for _, v := range r.Values {
			e.str(v)
		}
	}
}

func (e *enc) term(t *AffinityTerm) {
	e.uvarint(uint64(len(t.Namespaces)))
	for _, n := range t.Namespaces {
		e.str(n)
	}
	e.boolean(t.NamespaceSelector != nil)
	if t.NamespaceSelector != nil {
		e.selector(t.NamespaceSelector)
	}
	e.selector(&t.Selector)
	e.str(t.TopologyKey)
}

// MarshalBinary encodes the node record.
func (n *Node) MarshalBinary() ([]byte, error) {
	return n.AppendBinary(make([]byte, 0, 64+len(n.Name)+n.Labels.Len()*32))
}

// AppendBinary appends the node record to b (encoding.BinaryAppender).
// Revision is not part of it: the store keeps it.
func (n *Node) AppendBinary(b []byte) ([]byte, error) {
	e := enc{b: b}
	e.b = append(e.b, nodeVersion)
	e.str(n.Name)
	e.uvarint(n.Seq)
	e.labels(n.Labels)
	e.uvarint(uint64(len(n.Taints)))
	for _, t := range n.Taints {
		e.str(t.Key)
		e.str(t.Value)
		e.str(string(t.Effect))
	}
	e.boolean(n.Unschedulable)
	e.resources(&n.Allocatable)
	e.varint(n.Pods)
	return e.b, nil
}

// MarshalBinary encodes the placement record.
func (p *Placement) MarshalBinary() ([]byte, error) {
	return p.AppendBinary(make([]byte, 0, 64+len(p.Namespace)+len(p.Name)+len(p.Node)+p.Labels.Len()*32))
}

// AppendBinary appends the placement record to b (encoding.BinaryAppender).
// Revision is not part of it: the store keeps it.
func (p *Placement) AppendBinary(b []byte) ([]byte, error) {
	e := enc{b: b}
	e.b = append(e.b, placementVersion)
	e.str(p.Namespace)
	e.str(p.Name)
	e.str(p.Node)
	e.labels(p.Labels)
	e.resources(&p.Requests)
	e.varint(p.NonZeroCPU)
	e.varint(p.NonZeroMemory)
	a := p.Affinity
	if a.empty() {
		e.boolean(false)
		return e.b, nil
	}
	e.boolean(true)
	for _, ts := range [][]AffinityTerm{a.Required, a.RequiredAnti} {
		e.uvarint(uint64(len(ts)))
		for i := range ts {
			e.term(&ts[i])
		}
	}
	for _, ts := range [][]WeightedTerm{a.Preferred, a.PreferredAnti} {
		e.uvarint(uint64(len(ts)))
		for i := range ts {
			e.varint(int64(ts[i].Weight))
			e.term(&ts[i].AffinityTerm)
		}
	}
	return e.b, nil
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) fail() {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated or malformed", ErrCorrupt)
	}
	d.b = nil
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a length no larger than the bytes left (each item takes at
// least one byte), so a corrupt length cannot make a huge allocation.
func (d *dec) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
		return 0
	}
	return int(n)
}

func (d *dec) bytes() []byte {
	n := d.count()
	if d.err != nil {
		return nil
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *dec) str() string { return string(d.bytes()) }

func (d *dec) boolean() bool {
	if len(d.b) == 0 {
		d.fail()
		return false
	}
	v := d.b[0]
	d.b = d.b[1:]
	if v > 1 {
		d.fail()
	}
	return v == 1
}

func (d *dec) labels() label.Labels {
	n := d.count()
	if n == 0 || d.err != nil {
		return label.Labels{}
	}
	var b label.LabelsBuilder
	b.Grow(n, len(d.b))
	for range n {
		k, v := d.bytes(), d.bytes()
		if d.err != nil {
			return label.Labels{}
		}
		b.AddBytes(k, v)
	}
	l, ok := b.Labels()
	if !ok {
		d.fail()
	}
	return l
}

func (d *dec) resources(r *Resources) {
	r.CPU, r.Memory, r.EphemeralStorage = d.varint(), d.varint(), d.varint()
	n := d.count()
	if n > 0 && d.err == nil {
		r.Scalars = make([]Scalar, n)
		for i := range r.Scalars {
			r.Scalars[i] = Scalar{Name: d.str(), Value: d.varint()}
		}
	}
}

func (d *dec) selector(s *Selector) {
	s.Nothing = d.boolean()
	n := d.count()
	if n == 0 || d.err != nil {
		return
	}
	s.Reqs = make(label.Selector, n)
	for i := range s.Reqs {
		r := &s.Reqs[i]
		r.Key = d.str()
		if len(d.b) == 0 {
			d.fail()
			return
		}
		r.Op = label.Op(d.b[0])
		d.b = d.b[1:]
		if r.Op < label.Equals || r.Op > label.NotExists {
			d.fail()
			return
		}
		if m := d.count(); m > 0 && d.err == nil {
			r.Values = make([]string, m)
			for j := range r.Values {
				r.Values[j] = d.str()
			}
		}
	}
}

func (d *dec) term(t *AffinityTerm) {
	if n := d.count(); n > 0 && d.err == nil {
		t.Namespaces = make([]string, n)
		for i := range t.Namespaces {
			t.Namespaces[i] = d.str()
		}
	}
	if d.boolean() {
		t.NamespaceSelector = new(Selector)
		d.selector(t.NamespaceSelector)
	}
	d.selector(&t.Selector)
	t.TopologyKey = d.str()
}

func (d *dec) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%w: %d trailing bytes in %s", ErrCorrupt, len(d.b), what)
	}
	return d.err
}

// UnmarshalBinary decodes a node record.
func (n *Node) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != nodeVersion {
		return fmt.Errorf("%w: unknown node record version", ErrCorrupt)
	}
	d := dec{b: b[1:]}
	*n = Node{Name: d.str(), Seq: d.uvarint(), Labels: d.labels()}
	if c := d.count(); c > 0 && d.err == nil {
		n.Taints = make([]Taint, c)
		for i := range n.Taints {
			n.Taints[i] = Taint{Key: d.str(), Value: d.str(), Effect: corev1.TaintEffect(d.str())}
		}
	}
	n.Unschedulable = d.boolean()
	d.resources(&n.Allocatable)
	n.Pods = d.varint()
	return d.done("node record")
}

// UnmarshalBinary decodes a placement record.
func (p *Placement) UnmarshalBinary(b []byte) error {
	if len(b) == 0 || b[0] != placementVersion {
		return fmt.Errorf("%w: unknown placement record version", ErrCorrupt)
	}
	d := dec{b: b[1:]}
	*p = Placement{Key: Key{Namespace: d.str(), Name: d.str()}, Node: d.str(), Labels: d.labels()}
	d.resources(&p.Requests)
	p.NonZeroCPU, p.NonZeroMemory = d.varint(), d.varint()
	if d.boolean() {
		a := &PodAffinity{}
		for _, ts := range []*[]AffinityTerm{&a.Required, &a.RequiredAnti} {
			if c := d.count(); c > 0 && d.err == nil {
				*ts = make([]AffinityTerm, c)
				for i := range *ts {
					d.term(&(*ts)[i])
				}
			}
		}
		for _, ts := range []*[]WeightedTerm{&a.Preferred, &a.PreferredAnti} {
			if c := d.count(); c > 0 && d.err == nil {
				*ts = make([]WeightedTerm, c)
				for i := range *ts {
					(*ts)[i].Weight = int32(d.varint())
					d.term(&(*ts)[i].AffinityTerm)
				}
			}
		}
		p.Affinity = a
	}
	return d.done("placement record")
}

// sortScalars orders scalars by name and drops zeros.
func sortScalars(s []Scalar) []Scalar {
	s = slices.DeleteFunc(s, func(x Scalar) bool { return x.Value == 0 })
	slices.SortFunc(s, func(a, b Scalar) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	if len(s) == 0 {
		return nil
	}
	return s
}
