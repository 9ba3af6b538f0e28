package gateway

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacpb "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	rbachttp "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// TLSConfig configures the "tls" scenario: HTTP/2 over TLS with h2load,
// new TLS handshakes, and the gateway with mutual TLS and an RBAC filter
// against plain TLS. Zero values are defaults.
type TLSConfig struct {
	Binary   string        // the sextant executable
	Duration time.Duration // of each run (default 10s)
	Rounds   int           // interleaved rounds; medians reported (default 1)
	// H2Clients and H2Streams of h2load (default 4 connections, 100
	// concurrent streams each).
	H2Clients, H2Streams int
	// Connections of the handshake and mutual-TLS loaders (default 32).
	Connections int
	// ProfileDir, if set, receives a CPU profile of the gateway during each
	// of its runs (<figure>-round<n>.pprof), from its admin's /debug/pprof.
	ProfileDir string
	Progress   io.Writer
}

// TLSResult is the scenario's one JSON object.
type TLSResult struct {
	Scenario string  `json:"scenario"`
	Seconds  float64 `json:"seconds_per_run"`
	Rounds   int     `json:"rounds"`
	// HTTP/2 over TLS, h2load -c H2Clients -m H2Streams, 1 KiB answers.
	H2 []ProxyResult `json:"h2_over_tls"`
	// H2Ratio is sextant-tls / nginx-tls requests/s (median of rounds).
	H2Ratio float64 `json:"h2_sextant_vs_nginx_rps_ratio"`
	// New TLS 1.3 handshakes/s (ECDSA P-256 certificate, X25519, no
	// resumption), each connection closed after its handshake.
	Handshakes     []ProxyResult `json:"handshakes"`
	HandshakeRatio float64       `json:"handshakes_sextant_vs_nginx_ratio"`
	// The gateway over HTTPS/1.1 keep-alive (Go loader): plain TLS, then
	// mutual TLS with an RBAC filter of 10 policies (the last one allows).
	RBAC      []ProxyResult `json:"mtls_rbac"`
	RBACRatio float64       `json:"mtls_rbac_vs_tls_rps_ratio"`
	LoadAvg   [3]float64    `json:"load_avg"`
	Nproc     int           `json:"nproc"`
}

// RunTLS runs the "tls" scenario.
func RunTLS(ctx context.Context, cfg TLSConfig) (*TLSResult, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	cfg.Rounds = max(cfg.Rounds, 1)
	if cfg.H2Clients <= 0 {
		cfg.H2Clients = 4
	}
	if cfg.H2Streams <= 0 {
		cfg.H2Streams = 100
	}
	if cfg.Connections <= 0 {
		cfg.Connections = 32
	}
	if _, err := exec.LookPath("h2load"); err != nil {
		return nil, errors.New("bench: h2load not found (apt-get install -y nghttp2-client nginx)")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		return nil, errors.New("bench: nginx not found (apt-get install -y nginx)")
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	tmp, err := os.MkdirTemp("", "sextant-bench-tls-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	up, err := startProcess(ctx, "upstream", cfg.Binary, "bench", "gateway-serve", "--mode", "upstream", "--listen", "127.0.0.1:0", "--body", "1024")
	if err != nil {
		return nil, err
	}
	defer up.stop()
	cp, err := startControlPlane()
	if err != nil {
		return nil, err
	}
	defer cp.stop()
	pc := proxyConfig{policy: "round_robin", endpoints: []string{up.addr}, timeout: 15 * time.Second}
	if pc.cert, err = newBenchCert(tmp); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	pc.tlsPort = uint32(port)
	tlsAddr := "127.0.0.1:" + strconv.Itoa(port)
	if err := cp.set(pc); err != nil {
		return nil, err
	}
	procs := map[string]*process{}
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	for _, name := range TLSProxies {
		p, err := startProxy(ctx, name, cfg.Binary, up, cp, tmp, pc.cert, tlsAddr, false)
		if err != nil {
			return nil, fmt.Errorf("bench: start %s: %w", name, err)
		}
		procs[name] = p
	}
	res := &TLSResult{Scenario: "tls", Seconds: cfg.Duration.Seconds(), Rounds: cfg.Rounds, Nproc: nprocs()}
	h2, hs := map[string][]ProxyResult{}, map[string][]ProxyResult{}
	for r := range cfg.Rounds {
		for _, name := range TLSProxies {
			p := procs[name]
			stop := profile(ctx, cfg, p, fmt.Sprintf("h2-round%d", r+1))
			cpu0 := p.cpu()
			w, err := runH2load(ctx, "https://"+p.addr+"/", cfg)
			stop()
			if err != nil {
				return nil, fmt.Errorf("bench: h2load against %s: %w", name, err)
			}
			pr := ProxyResult{Name: name, RequestsPS: w.rps, Errors: w.errors}
			if w.requests > 0 {
				pr.CPUUsPerReq = (p.cpu() - cpu0).Seconds() * 1e6 / float64(w.requests)
			}
			progress("round %d h2 %-12s %8.0f req/s  %6.1f us CPU/req", r+1, name, pr.RequestsPS, pr.CPUUsPerReq)
			h2[name] = append(h2[name], pr)
		}
		for _, name := range TLSProxies {
			p := procs[name]
			stop := profile(ctx, cfg, p, fmt.Sprintf("handshakes-round%d", r+1))
			cpu0 := p.cpu()
			n, errs, err := handshakes(ctx, p.addr, min(cfg.Connections, handshakeLoaders), cfg.Duration)
			stop()
			if err != nil {
				return nil, fmt.Errorf("bench: handshakes with %s: %w", name, err)
			}
			pr := ProxyResult{Name: name, RequestsPS: float64(n) / cfg.Duration.Seconds(), Errors: errs}
			if n > 0 {
				pr.CPUUsPerReq = (p.cpu() - cpu0).Seconds() * 1e6 / float64(n)
			}
			progress("round %d handshakes %-12s %8.0f /s  %6.1f us CPU/handshake", r+1, name, pr.RequestsPS, pr.CPUUsPerReq)
			hs[name] = append(hs[name], pr)
		}
	}
	res.H2, res.H2Ratio = medians(h2, TLSProxies), pairedRatio(h2["sextant-tls"], h2["nginx-tls"])
	res.Handshakes, res.HandshakeRatio = medians(hs, TLSProxies), pairedRatio(hs["sextant-tls"], hs["nginx-tls"])

	// Mutual TLS with RBAC against plain TLS, on the same gateway: the
	// config alternates between rounds.
	gwp := procs["sextant-tls"]
	clientCert, caPEM, err := benchClientPKI()
	if err != nil {
		return nil, err
	}
	rb := map[string][]ProxyResult{}
	for r := range cfg.Rounds {
		for _, variant := range []string{"tls", "mtls-rbac"} {
			next := pc
			var certs []tls.Certificate
			if variant == "mtls-rbac" {
				next.mtls = &benchMTLS{caPEM: caPEM, policies: 10}
				certs = []tls.Certificate{clientCert}
			}
			if err := cp.set(next); err != nil {
				return nil, err
			}
			if err := waitServedWith(ctx, gwp.addr, certs, variant == "mtls-rbac"); err != nil {
				return nil, err
			}
			stop := profile(ctx, cfg, gwp, fmt.Sprintf("%s-round%d", variant, r+1))
			cpu0 := gwp.cpu()
			n, errs, err := keepAliveLoad(ctx, gwp.addr, certs, cfg.Connections, cfg.Duration)
			stop()
			if err != nil {
				return nil, err
			}
			pr := ProxyResult{Name: "sextant-" + variant, RequestsPS: float64(n) / cfg.Duration.Seconds(), Errors: errs}
			if n > 0 {
				pr.CPUUsPerReq = (gwp.cpu() - cpu0).Seconds() * 1e6 / float64(n)
			}
			progress("round %d %-18s %8.0f req/s  %6.1f us CPU/req", r+1, pr.Name, pr.RequestsPS, pr.CPUUsPerReq)
			rb[pr.Name] = append(rb[pr.Name], pr)
		}
	}
	names := []string{"sextant-tls", "sextant-mtls-rbac"}
	res.RBAC, res.RBACRatio = medians(rb, names), pairedRatio(rb["sextant-mtls-rbac"], rb["sextant-tls"])
	res.LoadAvg = report.LoadAvg()
	return res, nil
}

// profile fetches a CPU profile of p (a gateway with a known admin) for
// the run about to start, into cfg.ProfileDir; the returned func waits
// for it. A no-op without ProfileDir or for other proxies.
func profile(ctx context.Context, cfg TLSConfig, p *process, name string) (wait func()) {
	if cfg.ProfileDir == "" || p.admin == "" {
		return func() {}
	}
	secs := max(int(cfg.Duration.Seconds())-1, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.admin, secs), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: profile:", err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(cfg.ProfileDir, name+".pprof"))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: profile:", err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}()
	return func() { <-done }
}

func medians(m map[string][]ProxyResult, names []string) []ProxyResult {
	var out []ProxyResult
	for _, n := range names {
		rs := slices.Clone(m[n])
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b ProxyResult) int { return cmp.Compare(a.RequestsPS, b.RequestsPS) })
		out = append(out, rs[len(rs)/2])
	}
	return out
}

// pairedRatio is the median over rounds of a[i]/b[i] (runs seconds apart).
func pairedRatio(a, b []ProxyResult) float64 {
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i].RequestsPS > 0 {
			rs = append(rs, a[i].RequestsPS/b[i].RequestsPS)
		}
	}
	if len(rs) == 0 {
		return 0
	}
	slices.Sort(rs)
	return round3(rs[len(rs)/2])
}

// runH2load drives url with h2load over TLS (ALPN h2): H2Clients
// connections of H2Streams concurrent streams each, for Duration, on two
// threads (as wrk -t2 in the other figures).
func runH2load(ctx context.Context, u string, cfg TLSConfig) (wrkResult, error) {
	out, err := exec.CommandContext(ctx, "h2load", "-c", strconv.Itoa(cfg.H2Clients), "-m", strconv.Itoa(cfg.H2Streams),
		"-t", strconv.Itoa(min(2, cfg.H2Clients)), "-D", strconv.Itoa(int(cfg.Duration.Seconds())), u).CombinedOutput()
	if err != nil {
		return wrkResult{}, fmt.Errorf("%w: %s", err, out)
	}
	return parseH2load(string(out))
}

// parseH2load reads h2load's summary ("finished in 10.00s, 12345.60 req/s,
// ..." and "requests: N total, N started, N done, N succeeded, N failed,
// ...": failed counts non-2xx/3xx answers too).
func parseH2load(out string) (wrkResult, error) {
	var r wrkResult
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(strings.ReplaceAll(line, ",", ""))
		switch {
		case len(f) >= 5 && f[0] == "finished" && f[4] == "req/s":
			r.rps, _ = strconv.ParseFloat(f[3], 64)
		case len(f) >= 11 && f[0] == "requests:":
			r.requests, _ = strconv.ParseInt(f[7], 10, 64) // succeeded (2xx, 3xx)
			r.errors, _ = strconv.ParseInt(f[9], 10, 64)   // failed: the rest
		}
	}
	if r.rps == 0 || r.requests == 0 {
		return r, fmt.Errorf("bench: cannot read h2load output: %s", out)
	}
	return r, nil
}

// handshakeLoaders bounds the handshake loop's goroutines: more only fill
// the servers' accept queues (connects then time out) on 2 cores.
const handshakeLoaders = 16

// handshakes opens TLS 1.3 connections to addr from conns goroutines for
// d, each closed after its handshake: X25519, no session cache (so no
// resumption), the server's ECDSA P-256 certificate not verified (the
// client's share of the CPU stays the same for every server).
func handshakes(ctx context.Context, addr string, conns int, d time.Duration) (n, errs int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var ok, bad atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13, CurvePreferences: []tls.CurveID{tls.X25519}, //nolint:gosec // the bench's own certificate
		NextProtos: []string{"http/1.1"}}
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			dl := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: cfg}
			for ctx.Err() == nil {
				c, err := dl.DialContext(ctx, "tcp", addr)
				if err != nil {
					if ctx.Err() == nil {
						bad.Add(1)
						first.CompareAndSwap(nil, err.Error())
					}
					continue
				}
				ok.Add(1)
				// A reset, not a FIN: no TIME_WAIT, or thousands of
				// handshakes a second run out of ephemeral ports.
				if tc, isTCP := c.(*tls.Conn).NetConn().(*net.TCPConn); isTCP {
					_ = tc.SetLinger(0)
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 {
		return 0, bad.Load(), fmt.Errorf("bench: no handshake with %s succeeded", addr)
	}
	if e := first.Load(); e != nil {
		fmt.Fprintln(os.Stderr, "bench: handshakes with", addr, "failed:", bad.Load(), "first:", e)
	}
	return ok.Load(), bad.Load(), nil
}

// keepAliveLoad sends GET / over conns HTTP/1.1 keep-alive TLS connections
// (with certs as the client certificate) for d; it counts 200 answers.
func keepAliveLoad(ctx context.Context, addr string, certs []tls.Certificate, conns int, d time.Duration) (n, errs int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}, //nolint:gosec // the bench's own certificate
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	defer tr.CloseIdleConnections()
	var ok, bad atomic.Int64
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/svc9/orders", nil)
				req.Header.Set("X-Team", "blue")
				resp, err := tr.RoundTrip(req)
				if err != nil {
					if ctx.Err() == nil {
						bad.Add(1)
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				} else {
					bad.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 {
		return 0, bad.Load(), fmt.Errorf("bench: no request to %s succeeded (%d failed)", addr, bad.Load())
	}
	return ok.Load(), bad.Load(), nil
}

// waitServedWith waits until the gateway serves with (mtls) or without the
// client certificate, i.e. the config switch is applied.
func waitServedWith(ctx context.Context, addr string, certs []tls.Certificate, mtls bool) error {
	deadline := time.Now().Add(15 * time.Second)
	probe := func(certs []tls.Certificate) int {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: certs}} //nolint:gosec // the bench's own certificate
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/svc9/orders", nil)
		req.Header.Set("X-Team", "blue")
		resp, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for time.Now().Before(deadline) {
		with := probe(certs)
		without := probe(nil)
		if with == 200 && (!mtls || without != 200) || !mtls && without == 200 {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("bench: the gateway at %s did not switch to mtls=%v", addr, mtls)
}

// benchMTLS turns the bench's TLS listener into mutual TLS (client
// certificates of caPEM required) with an RBAC filter of policies ALLOW
// policies, the last of which the bench's calls match.
type benchMTLS struct {
	caPEM    []byte
	policies int
}

const benchSPIFFE = "spiffe://bench.local/ns/default/sa/web"

// benchClientPKI makes a CA and a client certificate with benchSPIFFE as
// its URI SAN.
func benchClientPKI() (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(benchSPIFFE)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "web"}, URIs: []*url.URL{u},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	kder, _ := x509.MarshalECPrivateKey(key)
	pair, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
	return pair, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), err
}

// benchMTLSListener is benchTLSListener with client certificates required
// and the RBAC filter: policy i allows GET /svc<i>/ with X-Team: blue from
// spiffe://bench.local/ns/default/sa/web<i> (the last one: benchSPIFFE).
func benchMTLSListener(port uint32, m *benchMTLS) *listener.Listener {
	l := benchTLSListener(port)
	ads := &core.ConfigSource{ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}}, ResourceApiVersion: core.ApiVersion_V3}
	d := new(tlsv3.DownstreamTlsContext)
	_ = l.FilterChains[0].TransportSocket.GetTypedConfig().UnmarshalTo(d)
	d.RequireClientCertificate = wrapperspb.Bool(true)
	d.CommonTlsContext.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig{
		ValidationContextSdsSecretConfig: &tlsv3.SdsSecretConfig{Name: "bench-clients", SdsConfig: ads}}
	da, _ := anypb.New(d)
	l.FilterChains[0].TransportSocket.ConfigType = &core.TransportSocket_TypedConfig{TypedConfig: da}
	exact := func(s string) *matcher.StringMatcher {
		return &matcher.StringMatcher{MatchPattern: &matcher.StringMatcher_Exact{Exact: s}}
	}
	policies := map[string]*rbacpb.Policy{}
	for i := range m.policies {
		id := benchSPIFFE + strconv.Itoa(i)
		if i == m.policies-1 {
			id = benchSPIFFE
		}
		policies[fmt.Sprintf("rule-%02d", i)] = &rbacpb.Policy{
			Permissions: []*rbacpb.Permission{{Rule: &rbacpb.Permission_AndRules{AndRules: &rbacpb.Permission_Set{Rules: []*rbacpb.Permission{
				{Rule: &rbacpb.Permission_Header{Header: &route.HeaderMatcher{Name: ":method", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: exact("GET")}}}},
				{Rule: &rbacpb.Permission_UrlPath{UrlPath: &matcher.PathMatcher{Rule: &matcher.PathMatcher_Path{Path: &matcher.StringMatcher{
					MatchPattern: &matcher.StringMatcher_Prefix{Prefix: "/svc" + strconv.Itoa(i) + "/"}}}}}},
				{Rule: &rbacpb.Permission_Header{Header: &route.HeaderMatcher{Name: "x-team", HeaderMatchSpecifier: &route.HeaderMatcher_StringMatch{StringMatch: exact("blue")}}}},
			}}}}},
			Principals: []*rbacpb.Principal{{Identifier: &rbacpb.Principal_Authenticated_{Authenticated: &rbacpb.Principal_Authenticated{PrincipalName: exact(id)}}}},
		}
	}
	ra, _ := anypb.New(&rbachttp.RBAC{Rules: &rbacpb.RBAC{Action: rbacpb.RBAC_ALLOW, Policies: policies}})
	m2 := new(hcm.HttpConnectionManager)
	_ = l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(m2)
	m2.HttpFilters = []*hcm.HttpFilter{{Name: "envoy.filters.http.rbac", ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: ra}}}
	ma, _ := anypb.New(m2)
	l.FilterChains[0].Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: ma}
	return l
}

func benchCASecret(caPEM []byte) *tlsv3.Secret {
	return &tlsv3.Secret{Name: "bench-clients", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
		TrustedCa: &core.DataSource{Specifier: &core.DataSource_InlineBytes{InlineBytes: caPEM}}}}}
}
