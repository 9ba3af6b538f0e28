package ca

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/sextant-mesh/sextant/internal/naming"
)

// ID is a workload identity: spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME.
type ID struct {
	TrustDomain string
	Namespace   string
	Account     string // the service account
}

func (id ID) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.Account
}

// URL is the identity as a certificate's URI SAN.
func (id ID) URL() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/ns/" + id.Namespace + "/sa/" + id.Account}
}

// ParseID parses a SPIFFE ID of Sextant's form, naming what is wrong.
func ParseID(s string) (ID, error) {
	rest, ok := strings.CutPrefix(s, "spiffe://")
	if !ok {
		return ID{}, fmt.Errorf("ca: identity %q: want spiffe://TRUST_DOMAIN/ns/NAMESPACE/sa/NAME", s)
	}
	td, path, _ := strings.Cut(rest, "/")
	parts := strings.Split(path, "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" {
		return ID{}, fmt.Errorf("ca: identity %q: the path must be /ns/NAMESPACE/sa/NAME", s)
	}
	id := ID{TrustDomain: td, Namespace: parts[1], Account: parts[3]}
	return id, id.Validate()
}

// Validate names the first part of id that is not valid.
func (id ID) Validate() error {
	if err := ValidTrustDomain(id.TrustDomain); err != nil {
		return err
	}
	if !naming.ValidName(id.Namespace) {
		return fmt.Errorf("ca: namespace %q is not a valid name ([a-z0-9-._], starting and ending with a letter or digit)", id.Namespace)
	}
	if !naming.ValidName(id.Account) {
		return fmt.Errorf("ca: service account %q is not a valid name ([a-z0-9-._], starting and ending with a letter or digit)", id.Account)
	}
	return nil
}

// ValidTrustDomain checks a trust domain as the SPIFFE standard defines
// it: lowercase letters, digits, '.', '-' and '_', at most 255 bytes.
func ValidTrustDomain(td string) error {
	if td == "" || len(td) > 255 {
		return fmt.Errorf("ca: trust domain %q must be 1..255 characters", td)
	}
	for i := 0; i < len(td); i++ {
		if c := td[i]; !naming.Alnum(c) && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("ca: trust domain %q: character %q is not allowed (lowercase letters, digits, '.', '-', '_')", td, c)
		}
	}
	return nil
}

// trustDomainURL is a CA certificate's URI SAN: the SPIFFE ID of the
// trust domain itself.
func trustDomainURL(td string) *url.URL { return &url.URL{Scheme: "spiffe", Host: td} }
