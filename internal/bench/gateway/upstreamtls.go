package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"text/template"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// UpstreamTLSResult is the upstream-tls scenario's one JSON object: the
// gateway and nginx (proxy_ssl) in front of the same HTTPS upstream, wrk
// keep-alive in plaintext to the proxy, TLS 1.3 from the proxy to the
// upstream, in alternating rounds of one run.
type UpstreamTLSResult struct {
	Scenario       string        `json:"scenario"`
	Connections    int           `json:"connections"`
	Threads        int           `json:"threads"`
	BodyBytes      int           `json:"body_bytes"`
	Seconds        float64       `json:"seconds_per_round"`
	Rounds         int           `json:"rounds"`
	Nproc          int           `json:"nproc"`
	LoadAvgStart   string        `json:"loadavg_start"`
	LoadAvgEnd     string        `json:"loadavg_end"`
	Proxies        []ProxyResult `json:"proxies"` // the median round of each
	SextantVsNginx float64       `json:"sextant_vs_nginx_rps_ratio"`
}

// RunUpstreamTLS runs the upstream-tls scenario: a Go HTTPS upstream (in
// this process, answering cfg.Body bytes) with the bench's certificate;
// nginx with proxy_ssl (verify on, sessions reused, keep-alive) and the
// gateway with an UpstreamTlsContext (the CA by SDS, SNI and a SAN
// matcher) in front of it.
func RunUpstreamTLS(ctx context.Context, cfg Config) (*UpstreamTLSResult, error) {
	cfg.Duration = cmp.Or(cfg.Duration, 10*time.Second)
	cfg.Rounds = cmp.Or(cfg.Rounds, 3)
	cfg.Connections = cmp.Or(cfg.Connections, 64)
	cfg.Threads = cmp.Or(cfg.Threads, 2)
	cfg.Body = cmp.Or(cfg.Body, 1024)
	if _, err := exec.LookPath("wrk"); err != nil {
		return nil, errors.New("bench: wrk not found (apt-get install -y wrk nginx)")
	}
	tmp, err := os.MkdirTemp("", "sextant-bench-upstls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cert, err := newBenchCert(tmp)
	if err != nil {
		return nil, err
	}
	pair, err := tls.X509KeyPair(cert.certPEM, cert.keyPEM)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	uctx, stopUp := context.WithCancel(ctx)
	defer stopUp()
	upDone := make(chan error, 1)
	go func() {
		upDone <- ServeUpstream(uctx, tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"http/1.1"}}), cfg.Body)
	}()
	defer func() { stopUp(); <-upDone }()
	upAddr := ln.Addr().String()

	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	if err := cp.setUpstreamTLS(upAddr, cert); err != nil {
		return nil, err
	}
	res := &UpstreamTLSResult{Scenario: "upstream_tls", Connections: cfg.Connections, Threads: cfg.Threads, BodyBytes: cfg.Body,
		Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Nproc: nprocs(), LoadAvgStart: report.LoadAvgText()}
	names := []string{"nginx-upstls", "sextant-upstls"}
	procs := map[string]*process{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, name := range names {
		p, err := startUpstreamTLSProxy(ctx, name, cfg.Binary, upAddr, cp, tmp, cert)
		if err != nil {
			return nil, fmt.Errorf("bench: start %s: %w", name, err)
		}
		procs[name] = p
	}
	rounds := map[string][]ProxyResult{}
	for r := range cfg.Rounds {
		for _, name := range names {
			p := procs[name]
			cpu0 := p.cpu()
			w, err := runWrk(ctx, "http://"+p.addr+"/", cfg)
			if err != nil {
				return nil, fmt.Errorf("bench: wrk against %s: %w", name, err)
			}
			pr := ProxyResult{Name: name, RequestsPS: w.rps, P50Ms: w.p50, P99Ms: w.p99, Errors: w.errors, RSSBytes: p.rss()}
			if cpu := p.cpu() - cpu0; w.requests > 0 {
				pr.CPUUsPerReq = cpu.Seconds() * 1e6 / float64(w.requests)
			}
			if cfg.Progress != nil {
				fmt.Fprintf(cfg.Progress, "round %d %-16s %8.0f req/s  %6.1f us CPU/req  p99 %.2f ms  errors %d\n", r+1, name, pr.RequestsPS, pr.CPUUsPerReq, pr.P99Ms, pr.Errors)
			}
			rounds[name] = append(rounds[name], pr)
		}
	}
	var ratios []float64
	for i := range cfg.Rounds {
		if n := rounds["nginx-upstls"][i].RequestsPS; n > 0 {
			ratios = append(ratios, rounds["sextant-upstls"][i].RequestsPS/n)
		}
	}
	slices.Sort(ratios)
	if len(ratios) > 0 {
		res.SextantVsNginx = round3(ratios[len(ratios)/2])
	}
	for _, name := range names {
		rs := slices.Clone(rounds[name])
		slices.SortFunc(rs, func(a, b ProxyResult) int { return cmp.Compare(a.RequestsPS, b.RequestsPS) })
		res.Proxies = append(res.Proxies, rs[len(rs)/2])
	}
	res.LoadAvgEnd = report.LoadAvgText()
	return res, nil
}

// startUpstreamTLSProxy starts nginx (proxy_ssl) or the gateway in front
// of the HTTPS upstream at up.
func startUpstreamTLSProxy(ctx context.Context, name, bin, up string, cp *controlPlane, tmp string, cert *benchCert) (*process, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if name == "sextant-upstls" {
		p, err := startKnown(ctx, name, addr, bin, "gateway", "--xds", cp.addr, "--listen", addr, "--admin", "127.0.0.1:0",
			"--data", filepath.Join(tmp, name), "--node-id", NodeID, "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		if err := waitRouted("http://" + addr + "/probe"); err != nil {
			p.stop()
			return nil, err
		}
		return p, nil
	}
	dir := filepath.Join(tmp, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	t, err := template.ParseFS(configs, "configs/nginx-upstls.conf.tmpl")
	if err != nil {
		return nil, err
	}
	file := filepath.Join(dir, "nginx.conf")
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	err = t.Execute(f, map[string]string{"Dir": dir, "Listen": addr, "Upstream": up, "Cert": cert.certFile})
	f.Close()
	if err != nil {
		return nil, err
	}
	p, err := startKnown(ctx, name, addr, "nginx", "-p", dir, "-c", file)
	if err != nil {
		return nil, err
	}
	if err := waitRouted("http://" + addr + "/probe"); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

// setUpstreamTLS serves the bench listener and routes with the cluster
// over TLS to up: SNI localhost, the bench certificate as CA by SDS, a DNS
// SAN matcher, ALPN http/1.1 (Istio's shape for a DestinationRule's tls
// SIMPLE with credentialName).
func (cp *controlPlane) setUpstreamTLS(up string, cert *benchCert) error {
	cp.ver++
	c, ca := upstreamTLSCluster(cert)
	snap, err := cache.NewSnapshot(strconv.Itoa(cp.ver), map[resource.Type][]types.Resource{
		resource.ListenerType: {benchListener()},
		resource.RouteType:    {benchRoutes(15*time.Second, "")},
		resource.ClusterType:  {c},
		resource.EndpointType: {benchEndpoints([]string{up})},
		resource.SecretType:   {ca},
	})
	if err != nil {
		return fmt.Errorf("bench: snapshot: %w", err)
	}
	return cp.cache.SetSnapshot(context.Background(), NodeID, snap)
}

// upstreamTLSCluster is the bench cluster with TLS to its endpoints and
// the CA secret it names.
func upstreamTLSCluster(cert *benchCert) (*cluster.Cluster, *tlsv3.Secret) {
	ads := &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
	u, _ := anypb.New(&tlsv3.UpstreamTlsContext{Sni: "localhost", CommonTlsContext: &tlsv3.CommonTlsContext{
		AlpnProtocols: []string{"http/1.1"},
		ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
			DefaultValidationContext: &tlsv3.CertificateValidationContext{MatchTypedSubjectAltNames: []*tlsv3.SubjectAltNameMatcher{{
				SanType: tlsv3.SubjectAltNameMatcher_DNS, Matcher: &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: "localhost"}}}}},
			ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "bench-ca", SdsConfig: ads}}}}})
	c := benchCluster("round_robin")
	c.TransportSocket = &core.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: u}}
	ca := &tlsv3.Secret{Name: "bench-ca", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: cert.certPEM}}}}}
	return c, ca
}
