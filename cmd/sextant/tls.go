package main

// TLS for the server's listeners and for every client command: building
// tls.Configs from PEM files. Shared by "sextant server" and the client
// commands (and by any later listener: the xDS server, the gateway).

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/sextant-mesh/sextant/internal/tlspolicy"
)

// serverTLS builds the server's TLS config from a certificate and key, and
// with clientCA requires and verifies client certificates (mutual TLS).
// All empty: nil (plain text).
func serverTLS(certFile, keyFile, clientCA string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCA != "" {
			return nil, fmt.Errorf("--tls-client-ca needs --tls-cert and --tls-key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load --tls-cert/--tls-key: %w", err)
	}
	// Mozilla's intermediate suites, for the HTTP API, xDS and the Consul API.
	cfg := tlspolicy.Server(&tls.Config{Certificates: []tls.Certificate{cert}})
	if clientCA != "" {
		pool, err := loadPool(clientCA, "--tls-client-ca")
		if err != nil {
			return nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// clientTLS builds a client's TLS config: caFile is trusted besides the
// system roots; certFile and keyFile present a client certificate. All
// empty: nil (the defaults).
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if certFile != "" || keyFile != "" {
		if certFile == "" || keyFile == "" {
			return nil, fmt.Errorf("--cert-file and --key-file go together")
		}
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("load --cert-file/--key-file: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

func loadPool(file, flag string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s holds no PEM certificate", flag, file)
	}
	return pool, nil
}
