package consulapi

import (
	"strconv"

	"github.com/mitchellh/hashstructure"
)

// Consul's agent answers a service with a ContentHash (its blocking
// queries' ?hash=): hashstructure (v1) of its AgentService, the hash
// field empty. hashstructure hashes a struct's type name, field names
// and values, so the types below mirror consul/api's (v1.34.5) in names,
// field names and field types; the hash of a service is then the one
// Consul answers for the same service. A proxy's configuration is kept
// as JSON, not as Consul's struct: its hash differs from Consul's, and
// still changes when the configuration does.

// AgentService mirrors consul/api's AgentService.
type AgentService struct {
	Kind              string
	ID                string
	Service           string
	Tags              []string
	Meta              map[string]string
	Port              int
	Ports             []ServicePort
	Address           string
	SocketPath        string
	TaggedAddresses   map[string]ServiceAddress
	Weights           AgentWeights
	EnableTagOverride bool
	CreateIndex       uint64
	ModifyIndex       uint64
	ContentHash       string
	Proxy             *string
	Connect           *AgentServiceConnect
	PeerName          string
	AI                *struct{}
	Namespace         string    `hash:"ignore"`
	Partition         string    `hash:"ignore"`
	Datacenter        string    `hash:"ignore"`
	Locality          *struct{} `hash:"ignore"`
}

// AgentWeights mirrors consul/api's AgentWeights.
type AgentWeights struct {
	Passing int
	Warning int
}

// ServicePort mirrors consul/api's ServicePort.
type ServicePort struct {
	Name    string
	Port    int
	Default bool
}

// ServiceAddress mirrors consul/api's ServiceAddress.
type ServiceAddress struct {
	Address string
	Port    int
}

// AgentServiceConnect mirrors consul/api's AgentServiceConnect.
type AgentServiceConnect struct {
	Native         bool
	SidecarService *struct{}
}

// contentHash is Consul's ContentHash of s (its own ContentHash aside).
func contentHash(s *agentService) string {
	h := AgentService{
		Kind: s.Kind, ID: s.ID, Service: s.Service, Tags: s.Tags, Meta: s.Meta, Port: s.Port, Address: s.Address,
		SocketPath: s.SocketPath, Weights: AgentWeights(s.Weights), EnableTagOverride: s.EnableTagOverride,
		CreateIndex: uint64(s.CreateIndex), ModifyIndex: uint64(s.ModifyIndex),
	}
	for _, p := range s.Ports {
		h.Ports = append(h.Ports, ServicePort(p))
	}
	if s.TaggedAddresses != nil {
		h.TaggedAddresses = make(map[string]ServiceAddress, len(s.TaggedAddresses))
		for k, v := range s.TaggedAddresses {
			h.TaggedAddresses[k] = ServiceAddress(v)
		}
	}
	if len(s.Proxy) > 0 {
		p := string(s.Proxy)
		h.Proxy = &p
	}
	if s.Connect != nil {
		h.Connect = &AgentServiceConnect{Native: s.Connect.Native}
	}
	v, err := hashstructure.Hash(&h, nil)
	if err != nil {
		// Only unhashable types fail, and these have none.
		panic("consulapi: content hash: " + err.Error())
	}
	return strconv.FormatUint(v, 16)
}
