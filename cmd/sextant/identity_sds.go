package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/xds"
)

// sdsAgent serves one workload's certificate over SDS on a unix socket,
// as istio-agent does for its Envoy: the secrets "default" and "ROOTCA"
// from a cache of its own, published at every renewal.
type sdsAgent struct {
	cache *xds.Cache
	stop  func()
}

// parseSDSAddr returns the socket path of unix://PATH, naming what is wrong.
func parseSDSAddr(addr string) (string, error) {
	path, ok := strings.CutPrefix(addr, "unix://")
	if !ok || path == "" {
		return "", fmt.Errorf("--sds %q: want unix://PATH (a unix socket)", addr)
	}
	return path, nil
}

// startSDSAgent listens on addr (unix://PATH; a stale socket file there is
// replaced, 0600) and serves SDS until ctx ends or stop is called.
func startSDSAgent(ctx context.Context, addr string) (*sdsAgent, error) {
	path, err := parseSDSAddr(addr)
	if err != nil {
		return nil, err
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--sds %q: %s exists and is not a socket", addr, path)
		}
		_ = os.Remove(path) // a previous agent's
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--sds %q: %w", addr, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		lis.Close()
		return nil, fmt.Errorf("--sds %q: %w", addr, err)
	}
	cache := xds.NewCache()
	srv := xds.NewServer(cache, xds.ServerOptions{SecretService: true, MaxConnectionAge: -1})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	return &sdsAgent{cache: cache, stop: func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, net.ErrClosed) {
			fmt.Fprintf(os.Stderr, "sextant identity agent: sds: %v\n", err)
		}
		_ = os.Remove(path)
	}}, nil
}

// publish puts cert's chain and key as "default" and its bundle as
// "ROOTCA".
func (a *sdsAgent) publish(cert client.Certificate) {
	inline := func(b string) *corev3.DataSource {
		return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(b)}}
	}
	set := []xds.Resource{
		{Name: xds.CertificateName, Version: cert.Serial, Message: &tlsv3.Secret{Name: xds.CertificateName, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
			CertificateChain: inline(cert.CertificateChain), PrivateKey: inline(cert.KeyPEM)}}}},
		{Name: xds.RootCertName, Version: cert.Serial, Message: &tlsv3.Secret{Name: xds.RootCertName, Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
			TrustedCa: inline(cert.Bundle)}}}},
	}
	if _, err := a.cache.Apply(xds.TypeSecret, set, nil, cert.Serial, time.Now()); err != nil {
		fmt.Fprintf(os.Stderr, "sextant identity agent: sds: %v\n", err)
	}
}
