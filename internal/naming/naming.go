// Package naming owns the names records share: ServiceKey, the namespace
// and name that group records (a service and its instances, a config
// object's service, any namespaced record in the catalog), the rule every
// namespace, service and policy name follows, and the DNS label rule.
package naming

import "strings"

// MaxNameLen is the longest name.
const MaxNameLen = 128

// DefaultNamespace is the namespace of a record that names none.
const DefaultNamespace = "default"

// ServiceKey names a service (its namespace and name), or the group of
// any namespaced record.
type ServiceKey struct {
	Namespace string
	Name      string
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// Compare orders keys by namespace, then name.
func (k ServiceKey) Compare(o ServiceKey) int {
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// ValidName reports whether s is a namespace, service or policy name:
// 1..128 chars of [a-z0-9-._], starting and ending with a letter or digit.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || !Alnum(s[0]) || !Alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !Alnum(c) && c != '-' && c != '.' && c != '_' {
			return false
		}
	}
	return true
}

// ValidLabel reports whether s is a DNS label as Kubernetes names them
// (RFC 1123): 1..63 chars of [a-z0-9-], starting and ending with a letter
// or digit (a subset name, a datacenter).
func ValidLabel(s string) bool {
	if len(s) == 0 || len(s) > 63 || !Alnum(s[0]) || !Alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !Alnum(c) && c != '-' {
			return false
		}
	}
	return true
}

// Alnum reports whether c may start or end a name: [a-z0-9].
func Alnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
