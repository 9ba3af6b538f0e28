package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sextant-mesh/sextant/internal/commit"
	"github.com/sextant-mesh/sextant/internal/store"
)

// ErrClaimed is wrapped by the error of an apply whose Gateway claims a
// port and host another Gateway (of any namespace) already serves, or a
// port another Gateway serves with the other kind of protocol (TLS or
// plaintext). The Gateway stored first keeps it: one namespace cannot take
// another's host (and certificate) on a shared gateway port.
var ErrClaimed = errors.New("config: claimed by another Gateway")

// ClaimError is one such refusal: Path is the field of the refused
// document (documents[i].spec.servers[j]...), Msg names the Gateway that
// holds the port and host.
type ClaimError struct {
	Path, Msg string
}

func (e *ClaimError) Error() string { return "config: " + e.Path + ": " + e.Msg }
func (e *ClaimError) Unwrap() error { return ErrClaimed }

// planGateways is every Gateway as the write planning through tx would
// leave it so far: the table's, with the batch's earlier writes (and
// batches not yet applied) over them.
func planGateways(tx *commit.Tx, t *Table) map[Key]*Object {
	out := map[Key]*Object{}
	if t != nil {
		gws, _ := t.List(KindGateway, "")
		for _, e := range gws {
			out[e.Object.Key] = e.Object
		}
	}
	tx.Written(store.Config, func(id string, v any) {
		k, err := ParseKey(id)
		if err != nil || k.Kind != KindGateway {
			return
		}
		if e, ok := v.(*Entry); ok {
			out[k] = e.Object
		} else {
			delete(out, k)
		}
	})
	return out
}

// isTLSServer reports whether a Gateway server's port is a TLS one
// (HTTPS, terminated or passthrough, or TLS).
func isTLSServer(proto string) bool {
	return strings.EqualFold(proto, "HTTPS") || strings.EqualFold(proto, "TLS")
}

// checkClaims refuses Gateway o (document doc of docs) when one of its
// servers claims a port and host that another Gateway of gws serves, or a
// port another serves with the other kind of protocol.
func checkClaims(o *Object, doc, docs int, gws map[Key]*Object) error {
	if o.Gateway == nil {
		return nil
	}
	others := slices.SortedFunc(maps.Keys(gws), Key.Compare)
	prefix := ""
	if docs > 1 {
		prefix = fmt.Sprintf("documents[%d].", doc)
	}
	for i, s := range o.Gateway.Servers {
		n, tls := s.GetPort().GetNumber(), isTLSServer(s.GetPort().GetProtocol())
		for _, k := range others {
			if k == o.Key {
				continue
			}
			for oi, os := range gws[k].Gateway.Servers {
				if os.GetPort().GetNumber() != n {
					continue
				}
				if isTLSServer(os.GetPort().GetProtocol()) != tls {
					kind := map[bool]string{true: "TLS", false: "plaintext"}
					return &ClaimError{Path: fmt.Sprintf("%sspec.servers[%d].port", prefix, i),
						Msg: fmt.Sprintf("port %d is %s in Gateway %s/%s (spec.servers[%d]) and %s here: a gateway port is one or the other; use another port", n, kind[!tls], k.Namespace, k.Name, oi, kind[tls])}
				}
				for j, h := range s.Hosts {
					sh, ok := ParseServerHost(h, o.Namespace)
					if !ok {
						continue // refused by validation
					}
					for _, oh := range os.Hosts {
						if osh, ok := ParseServerHost(oh, k.Namespace); ok && osh.Host == sh.Host {
							return &ClaimError{Path: fmt.Sprintf("%sspec.servers[%d].hosts[%d]", prefix, i, j),
								Msg: fmt.Sprintf("port %d host %q is already served by Gateway %s/%s (spec.servers[%d]): a port's host belongs to the Gateway that claimed it first; use another host or port, or have %s/%s give it up", n, sh.Host, k.Namespace, k.Name, oi, k.Namespace, k.Name)}
						}
					}
				}
			}
		}
	}
	return nil
}
