package acl

import (
	"fmt"
	"strconv"
)

// Resource is what a permission guards.
type Resource uint8

// The resources. ACL (tokens and policies) is granted only by admin.
const (
	Instances  Resource = iota + 1 // registry instances
	Config                         // routing config (VirtualService, DestinationRule)
	Placements                     // scheduler nodes and placements
	Push                           // push status and xDS subscriptions
	ACL                            // tokens and policies: admin only
	Identity                       // workload certificates: write signs them for the namespace's identities
	Secrets                        // TLS secrets (metadata; keys go only to xDS)
	KV                             // Consul KV entries (the Consul API's key:read, key:write)
)

// numResources bounds the per-namespace grant arrays (index by Resource).
const numResources = int(KV) + 1

// ruleResources are the resources a policy rule may grant, in the order
// they are written.
var ruleResources = []Resource{Instances, Config, Placements, Push, Identity, Secrets, KV}

var resourceNames = [...]string{Instances: "instances", Config: "config", Placements: "placements", Push: "push", ACL: "acl", Identity: "identity", Secrets: "secret", KV: "kv"}

func (r Resource) String() string {
	if int(r) < len(resourceNames) && resourceNames[r] != "" {
		return resourceNames[r]
	}
	return "resource(" + strconv.Itoa(int(r)) + ")"
}

func parseResource(s string) (Resource, bool) {
	for _, r := range ruleResources {
		if resourceNames[r] == s {
			return r, true
		}
	}
	return 0, false
}

// Access is a level of access; Write implies Read.
type Access uint8

// The access levels, ordered.
const (
	None Access = iota
	Read
	Write
)

func (a Access) String() string {
	switch a {
	case None:
		return "none"
	case Read:
		return "read"
	case Write:
		return "write"
	}
	return "access(" + strconv.Itoa(int(a)) + ")"
}

func parseAccess(s string) (Access, bool) {
	switch s {
	case "read":
		return Read, true
	case "write":
		return Write, true
	}
	return None, false
}

// Permission is what a request needs: an access level on a resource in a
// namespace. Namespace "" asks for every namespace (cluster-wide objects
// such as scheduler nodes): only a rule for namespace "*" grants it.
type Permission struct {
	Resource  Resource
	Access    Access
	Namespace string
}

// String is the permission as messages name it, e.g. `instances:write on
// namespace "orders"`.
func (p Permission) String() string {
	if p.Resource == ACL {
		return "admin"
	}
	if p.Namespace == "" {
		return fmt.Sprintf("%s:%s on every namespace", p.Resource, p.Access)
	}
	return fmt.Sprintf("%s:%s on namespace %q", p.Resource, p.Access, p.Namespace)
}

// Admin is the permission of the /v1/acl routes and other operator actions.
var Admin = Permission{Resource: ACL, Access: Write}
