package consulapi

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sextant-mesh/sextant/internal/instance"
)

// Connect's sidecar registration (Connect.SidecarService): Consul's agent
// registers a second service, the sidecar proxy of the first, with
// Consul's defaults, and deregisters it with the first. Sextant keeps it
// as it keeps any connect-proxy service: a record (it configures no proxy
// from it; its mesh is xDS). The defaults are Consul's: ID and name the
// parent's plus "-sidecar-proxy", Kind connect-proxy, the parent's tags
// and Meta when it has none of its own, Proxy's DestinationServiceName,
// DestinationServiceID and LocalServicePort the parent's, and a port from
// 21000..21255 (Consul's sidecar_min_port..sidecar_max_port) no other
// sidecar of the agent's node has. Consul's two default checks of a
// sidecar (a TCP probe of its port and an alias of the parent) are not
// added: nothing listens on a port Sextant gave a record.

const (
	// labelSidecar, on a parent, is the instance id of its sidecar.
	labelSidecar     = "consul-sidecar"
	sidecarMinPort   = 21000
	sidecarMaxPort   = 21255
	sidecarIDPostfix = "-sidecar-proxy"
)

// sidecarOf is the registration of reg's sidecar (reg's ID defaulted).
func (a *API) sidecarOf(reg *Registration) (*Registration, error) {
	side, err := DecodeRegister(reg.Sidecar)
	if err != nil {
		var he *httpError
		if errors.As(err, &he) {
			he.msg = "Connect.SidecarService." + he.msg
		}
		return nil, err
	}
	if len(side.Sidecar) > 0 {
		return nil, badRequest("Connect.SidecarService.Connect.SidecarService: a sidecar has no sidecar")
	}
	id := reg.ID
	if id == "" {
		id = reg.Name
	}
	if side.ID == "" {
		side.ID = id + sidecarIDPostfix
	}
	if side.Name == "" {
		side.Name = reg.Name + sidecarIDPostfix
	}
	if side.Kind == "" {
		side.Kind = "connect-proxy"
	}
	if len(side.Tags) == 0 {
		side.Tags = reg.Tags
	}
	if len(side.Meta) == 0 {
		side.Meta = reg.Meta
	}
	if side.Address == "" {
		side.Address = reg.Address
	}
	proxy := map[string]any{}
	if len(side.Proxy) > 0 {
		if err := json.Unmarshal(side.Proxy, &proxy); err != nil {
			return nil, badRequest("Connect.SidecarService.Proxy: " + err.Error())
		}
	}
	proxy["DestinationServiceName"] = reg.Name
	proxy["DestinationServiceID"] = id
	if _, ok := proxy["LocalServicePort"]; !ok && reg.Port > 0 {
		proxy["LocalServicePort"] = reg.Port
	}
	b, err := json.Marshal(proxy)
	if err != nil {
		return nil, err
	}
	side.Proxy = b
	side.Node = reg.Node
	if side.Port == 0 {
		if side.Port, err = a.sidecarPort(side.ID); err != nil {
			return nil, err
		}
	}
	return side, nil
}

// sidecarPort is the lowest port of Consul's sidecar range that no other
// sidecar of the agent's node has (the sidecar id's own, if it has one).
func (a *API) sidecarPort(sideID string) (int, error) {
	if cur := a.reg.Instances().Get(sideID); cur != nil && cur.Namespace == a.opts.Namespace && cur.Port >= sidecarMinPort && cur.Port <= sidecarMaxPort {
		return cur.Port, nil
	}
	used := map[int]bool{}
	for _, svc := range a.reg.Instances().Snapshot().Groups(a.opts.Namespace) {
		for _, in := range svc.Items() {
			if k, _ := in.Metadata.Get(labelKind); k == "connect-proxy" && a.nodeOf(in) == a.opts.Node {
				used[in.Port] = true
			}
		}
	}
	for p := sidecarMinPort; p <= sidecarMaxPort; p++ {
		if !used[p] {
			return p, nil
		}
	}
	return 0, badRequest(fmt.Sprintf("Connect.SidecarService.Port: every port of %d..%d is a sidecar's: give it a Port", sidecarMinPort, sidecarMaxPort))
}

// sidecarIDOf is the instance id of in's sidecar ("" for none).
func sidecarIDOf(in *instance.Instance) string {
	id, _ := in.Metadata.Get(labelSidecar)
	return id
}
