package ca

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"time"
)

// State is what the server stores to restart (or replicate) the
// authority: the signer with its key, and the retired roots still trusted.
type State struct {
	TrustDomain string         `json:"trustDomain"`
	Chain       string         `json:"chain"`           // PEM: the signer, then its issuers up to the root
	Key         string         `json:"key"`             // PEM PKCS #8
	Cross       string         `json:"cross,omitempty"` // PEM: the signer cross-signed by the previous root
	Retired     []RetiredState `json:"retired,omitempty"`
}

// RetiredState is a root trusted after a rotation.
type RetiredState struct {
	Root      string    `json:"root"` // PEM
	RetiredAt time.Time `json:"retiredAt"`
}

// State returns the authority's state to store.
func (a *Authority) State() (State, error) {
	a.mu.RLock()
	s, ret := a.signer, a.retired
	a.mu.RUnlock()
	der, err := x509.MarshalPKCS8PrivateKey(s.key)
	if err != nil {
		return State{}, fmt.Errorf("ca: marshal key: %w", err)
	}
	var chain bytes.Buffer
	for _, c := range s.chain {
		_ = pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	st := State{TrustDomain: a.opts.TrustDomain, Chain: chain.String(),
		Key: string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))}
	if s.cross != nil {
		st.Cross = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.cross.Raw}))
	}
	for _, r := range ret {
		st.Retired = append(st.Retired, RetiredState{
			Root:      string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.root.Raw})),
			RetiredAt: r.retiredAt})
	}
	return st, nil
}

// Restore starts an authority from a stored State. The trust domain of
// opts must be the state's: identities issued under another would no
// longer verify.
func Restore(opts Options, st State) (*Authority, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if st.TrustDomain != opts.TrustDomain {
		return nil, fmt.Errorf("ca: %w: the stored authority's trust domain is %q, not %q (a trust domain cannot change: its identities would no longer verify)", ErrInvalid, st.TrustDomain, opts.TrustDomain)
	}
	s, err := parseSigner([]byte(st.Chain), []byte(st.Key), opts.Now())
	if err != nil {
		return nil, fmt.Errorf("ca: stored signer: %w", err)
	}
	if st.Cross != "" {
		b, _ := pem.Decode([]byte(st.Cross))
		if b == nil {
			return nil, fmt.Errorf("ca: %w: the stored cross certificate is not PEM", ErrInvalid)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ca: %w: the stored cross certificate: %w", ErrInvalid, err)
		}
		s = s.withCross(c)
	}
	a := &Authority{opts: opts, signer: s}
	for i, r := range st.Retired {
		b, _ := pem.Decode([]byte(r.Root))
		if b == nil {
			return nil, fmt.Errorf("ca: %w: stored retired root %d is not PEM", ErrInvalid, i)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ca: %w: stored retired root %d: %w", ErrInvalid, i, err)
		}
		a.retired = append(a.retired, retired{root: c, retiredAt: r.RetiredAt})
	}
	a.rebundle()
	return a, nil
}
