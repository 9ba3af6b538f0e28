package main

import (
	"time"

	"github.com/sextant-mesh/sextant/client"
)

// apiInstance is an instance in the HTTP API's shape (docs/api.md,
// "instance object"): every field the server always answers is present
// even when empty ("metadata": {}, "version": "", "ttl_seconds": 0), so a
// script reads -o json and the API alike. client.Instance leaves empty
// fields out, as a register request wants.
type apiInstance struct {
	ID                     string            `json:"id"`
	Namespace              string            `json:"namespace"`
	Service                string            `json:"service"`
	Host                   string            `json:"host"`
	Port                   int               `json:"port"`
	Protocol               string            `json:"protocol"`
	Version                string            `json:"version"`
	Weight                 int               `json:"weight"`
	Isolated               bool              `json:"isolated"`
	Metadata               map[string]string `json:"metadata"`
	TTLSeconds             int               `json:"ttl_seconds"`
	DeregisterAfterSeconds int               `json:"deregister_after_seconds,omitempty"` // only when set, as the server
	Checks                 []apiCheck        `json:"checks,omitempty"`                   // only when set, as the server
	Healthy                bool              `json:"healthy"`
	Revision               uint64            `json:"revision"`
	CreatedAt              time.Time         `json:"created_at"`
	UpdatedAt              time.Time         `json:"updated_at"`
}

// apiCheck is a check as the server answers it: its id, status, output
// and time of change always there.
type apiCheck struct {
	client.Check
	ID        string    `json:"id"`
	Status    string    `json:"status"`
	Output    string    `json:"output"`
	ChangedAt time.Time `json:"changed_at"`
}

func toAPIInstance(in *client.Instance) apiInstance {
	var checks []apiCheck
	for _, c := range in.Checks {
		checks = append(checks, apiCheck{Check: c, ID: c.ID, Status: c.Status, Output: c.Output, ChangedAt: c.ChangedAt.UTC()})
	}
	md := in.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return apiInstance{
		ID: in.ID, Namespace: in.Namespace, Service: in.Service, Host: in.Host, Port: in.Port,
		Protocol: in.Protocol, Version: in.Version, Weight: in.EffectiveWeight(), Isolated: in.Isolated,
		Metadata: md, TTLSeconds: in.TTLSeconds, DeregisterAfterSeconds: in.DeregisterAfterSeconds,
		Checks: checks, Healthy: in.Healthy, Revision: in.Revision,
		CreatedAt: in.CreatedAt.UTC(), UpdatedAt: in.UpdatedAt.UTC(),
	}
}

func toAPIInstances(ins []client.Instance) []apiInstance {
	out := make([]apiInstance, len(ins))
	for i := range ins {
		out[i] = toAPIInstance(&ins[i])
	}
	return out
}
