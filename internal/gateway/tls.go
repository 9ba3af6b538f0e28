package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sextant-mesh/sextant/internal/gateway/xdsclient"
	"github.com/sextant-mesh/sextant/internal/tlspolicy"
)

// tlsHandshakeTimeout bounds a client's TLS handshake.
const tlsHandshakeTimeout = 10 * time.Second

// tlsListenerRT is the run-time form of the TLS listener served on one
// port: its filter chains by the server names they match. Immutable; a
// config update or a rotated secret builds a new one and swaps it in, so
// handshakes after the swap see the new certificates and connections
// already open keep theirs.
type tlsListenerRT struct {
	name        string
	passthrough bool // a chain forwards TLS unopened: read the ClientHello first
	exact       map[string]*tlsChainRT
	wild        map[string]*tlsChainRT // "*.example.com" under "example.com"
	any         *tlsChainRT            // a chain with no server_names
	def         *tlsChainRT            // default_filter_chain
	plain       *tlsChainRT            // an inbound listener's plaintext chain (inbound.go)
}

// tlsChainRT is one filter chain: its handshake config and routing table.
type tlsChainRT struct {
	conf       *tls.Config // nil while a secret it names has not arrived
	notReady   string      // why conf is nil
	requireSNI bool
	table      *table
	tcp        *tcpProxyRT // TLS passthrough (no conf, no table)
	spec       *chainSpec  // what the admin API's /v1/config shows under "tls"
}

// match picks the chain for a server name as Envoy does: the exact name,
// then the longest wildcard suffix, then a chain without server names,
// then the default chain.
func (l *tlsListenerRT) match(sni string) *tlsChainRT {
	if l == nil {
		return nil
	}
	if len(sni) > 0 {
		sni = strings.ToLower(strings.TrimSuffix(sni, "."))
		if c := l.exact[sni]; c != nil {
			return c
		}
		for rest := sni; ; {
			i := strings.IndexByte(rest, '.')
			if i < 0 {
				break
			}
			rest = rest[i+1:]
			if c := l.wild[rest]; c != nil {
				return c
			}
		}
	}
	if l.any != nil {
		return l.any
	}
	return l.def
}

// tlsState maps each TLS port to its listener (nil: no listener yet).
type tlsState map[uint32]*tlsListenerRT

// chains returns every distinct chain of l.
func (l *tlsListenerRT) chains() []*tlsChainRT {
	if l == nil {
		return nil
	}
	var out []*tlsChainRT
	add := func(c *tlsChainRT) {
		if c != nil && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	for _, c := range l.exact {
		add(c)
	}
	for _, c := range l.wild {
		add(c)
	}
	add(l.any)
	add(l.def)
	add(l.plain)
	return out
}

// buildTLS builds the TLS listeners of the ports the gateway serves TLS on
// from an xDS state and the clusters of the update, and adds the route
// configs and secrets they name to want.
func (g *Gateway) buildTLS(s xdsclient.State, clusters map[string]*clusterRT, want map[string][]string) (tlsState, error) {
	if len(g.opts.TLSListenPorts) == 0 && g.opts.Inbound == nil {
		return nil, nil
	}
	out := tlsState{}
	waits := map[string]string{}
	if g.opts.Inbound != nil {
		out[g.inboundPort] = g.buildInbound(s, clusters, want, waits)
	}
	for _, port := range g.opts.TLSListenPorts {
		var ls *listenerSpec
		for _, v := range s[ListenerType] {
			l := v.(*listenerSpec)
			if !l.tls || l.port != port || isInboundListener(l.name) {
				continue
			}
			if ls != nil {
				return nil, fmt.Errorf("gateway: TLS listeners %q and %q both on port %d", ls.name, l.name, port)
			}
			ls = l
		}
		if ls == nil {
			out[port] = nil
			continue
		}
		rt := &tlsListenerRT{name: ls.name, exact: map[string]*tlsChainRT{}, wild: map[string]*tlsChainRT{}}
		for _, cs := range ls.chains {
			if cs.tcp != nil {
				c := &tlsChainRT{tcp: newTCPProxyRT(cs.tcp, clusters), notReady: "a TLS passthrough chain", spec: cs}
				rt.passthrough = true
				rt.add(cs, c)
				continue
			}
			c := g.buildChain(ls, cs, s, clusters, want, waits)
			rt.add(cs, c)
		}
		out[port] = rt
	}
	g.chainWaits = waits
	return out, nil
}

// buildChain builds the run-time form of an HTTP filter chain cs of
// listener ls: its routing table and, for a TLS chain, its handshake
// config from the secrets received (or why it waits); it adds the route
// config and secrets it names to want, and a wait to waits.
func (g *Gateway) buildChain(ls *listenerSpec, cs *chainSpec, s xdsclient.State, clusters map[string]*clusterRT,
	want map[string][]string, waits map[string]string) *tlsChainRT {
	rc := cs.inline
	if cs.rds != "" {
		want[RouteType] = append(want[RouteType], cs.rds)
		rc, _ = s[RouteType][cs.rds].(*routeConfigSpec)
	}
	tb := newTable(rc, clusters)
	tb.upgrades, tb.streamIdle, tb.rbac, tb.port = cs.upgrades, cs.streamIdle, cs.rbac, ls.port
	tb.setTelemetry(g, cs.telemetry)
	c := &tlsChainRT{table: tb, spec: cs}
	if cs.tls == nil {
		return c // an inbound listener's plaintext chain
	}
	c.requireSNI = cs.tls.requireSNI
	c.conf, c.notReady = chainConfig(cs.tls, g.tlsSecrets(s[SecretType]))
	for _, n := range cs.tls.certSecrets {
		if !strings.HasPrefix(n, providerPrefix) { // the identity is not SDS's
			want[SecretType] = append(want[SecretType], n)
		}
	}
	if n := cs.tls.caSecret; n != "" && !strings.HasPrefix(n, providerPrefix) {
		want[SecretType] = append(want[SecretType], n)
	}
	if c.notReady != "" {
		key := ls.name + " " + strings.Join(cs.serverNames, ",")
		if g.chainWaits[key] != c.notReady {
			g.log.Info("gateway: TLS filter chain waits for its secrets", "listener", ls.name, "server_names", cs.serverNames, "reason", c.notReady)
		}
		waits[key] = c.notReady
	}
	return c
}

// add makes c the chain of the server names cs matches.
func (l *tlsListenerRT) add(cs *chainSpec, c *tlsChainRT) {
	switch {
	case cs.isDefault:
		l.def = c
	case len(cs.serverNames) == 0:
		l.any = c
	}
	for _, n := range cs.serverNames {
		if suffix, ok := strings.CutPrefix(n, "*."); ok {
			l.wild[suffix] = c
		} else {
			l.exact[n] = c
		}
	}
}

// chainConfig builds a chain's handshake config from its context and the
// secrets received; a secret not (yet) received leaves it not ready.
func chainConfig(t *tlsContextSpec, secrets map[string]any) (*tls.Config, string) {
	// Mozilla's intermediate suites whatever the context asks (tls_params'
	// cipher_suites are refused, tlsconfig.go), TLS 1.2 at least.
	conf := tlspolicy.Server(&tls.Config{MinVersion: t.minVer, MaxVersion: t.maxVer, NextProtos: slices.Clone(t.alpn)})
	var why string
	var ca *x509.CertPool
	if conf.Certificates, ca, why = resolveSecrets(t.certs, t.certSecrets, t.ca, t.caSecret, secrets); why != "" {
		return nil, why
	}
	if ca != nil {
		conf.ClientCAs = ca
		conf.ClientAuth = tls.VerifyClientCertIfGiven
		if t.requireCert {
			conf.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return conf, ""
}

// resolveSecrets completes a TLS context's certificates (inline certs, then
// one per secret named in certSecrets) and its CA (inline ca, else the
// secret caSecret) from the secrets received, or says which is missing.
func resolveSecrets(certs []tls.Certificate, certSecrets []string, ca *x509.CertPool, caSecret string,
	secrets map[string]any) ([]tls.Certificate, *x509.CertPool, string) {
	out := slices.Clone(certs)
	for _, n := range certSecrets {
		sec, ok := secrets[n].(*secretSpec)
		switch {
		case !ok:
			return nil, nil, secretLabel(n)
		case sec.cert == nil:
			return nil, nil, fmt.Sprintf("secret %q holds no tls_certificate", n)
		}
		out = append(out, *sec.cert)
	}
	if caSecret != "" {
		sec, ok := secrets[caSecret].(*secretSpec)
		switch {
		case !ok:
			return nil, nil, secretLabel(caSecret)
		case sec.ca == nil:
			return nil, nil, fmt.Sprintf("secret %q holds no validation_context", caSecret)
		}
		ca = sec.ca
	}
	return out, ca, ""
}

// configForClient is the handshake's GetConfigForClient on port: the
// config of the filter chain the client's server name selects.
func (g *Gateway) configForClient(port uint32, h *tls.ClientHelloInfo) (*tls.Config, error) {
	st := g.tls.Load()
	var l *tlsListenerRT
	if st != nil {
		l = (*st)[port]
	}
	c := l.match(h.ServerName)
	switch {
	case l == nil:
		return nil, fmt.Errorf("gateway: no TLS listener on port %d", port)
	case c == nil:
		return nil, fmt.Errorf("gateway: listener %q: no filter chain for server name %q", l.name, h.ServerName)
	case c.requireSNI && h.ServerName == "":
		return nil, fmt.Errorf("gateway: listener %q: the filter chain requires SNI", l.name)
	case c.conf == nil:
		return nil, fmt.Errorf("gateway: listener %q: filter chain for %q: %s", l.name, h.ServerName, c.notReady)
	}
	return c.conf, nil
}

// tlsTable returns the routing table of the chain a connection's server
// name selects now (nil: none; the call is answered 503).
func (g *Gateway) tlsTable(port uint32, sni string) *table {
	st := g.tls.Load()
	if st == nil {
		return nil
	}
	if c := (*st)[port].match(sni); c != nil {
		return c.table
	}
	return nil
}

// tlsServerConn is a handshaken client connection handed to fasthttp, with
// what selects its routing table.
type tlsServerConn struct {
	*tls.Conn
	port uint32
	sni  string
	// state is the handshake's result, kept for RBAC (rbac.go): a call
	// reads it without copying the connection state.
	state *tls.ConnectionState
	peer  peerNames // of state's peer certificate, for RBAC
	lf    lfGuard   // edges.go
	addrs connAddrs // rbac.go
}

// ServeTLS serves TLS on ln until Shutdown, with the filter chains of the
// TLS listener whose port is ln's (Options.TLSListenPorts must name it):
// the certificate by the client's server name (SNI), client certificates
// for mutual TLS, then HTTP/2 when ALPN chose h2 (net/http's server) and
// HTTP/1.1 otherwise (fasthttp). A handshake that fails closes its
// connection only. It returns nil after Shutdown.
func (g *Gateway) ServeTLS(ln net.Listener) error {
	ta, ok := ln.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("gateway: TLS listener address %v is not TCP", ln.Addr())
	}
	port := uint32(ta.Port)
	if !slices.Contains(g.opts.TLSListenPorts, port) {
		return fmt.Errorf("gateway: port %d is not in Options.TLSListenPorts", port)
	}
	base := &tls.Config{GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		return g.configForClient(port, h)
	}}
	fastLn := newConnListener(ln.Addr())
	h2Ln := newConnListener(ln.Addr())
	srv := g.newFastServer(func(ctx *fasthttp.RequestCtx, ph *passHead) {
		var sni string
		if c, ok := ctx.Conn().(*tlsServerConn); ok {
			sni = c.sni
		}
		g.serveOn(ctx, g.tlsTable(port, sni), ph)
	})
	var p http.Protocols
	p.SetHTTP2(true)
	h2 := g.newH2Server(func(w http.ResponseWriter, r *http.Request, ctx *fasthttp.RequestCtx) {
		g.serveH2On(w, r, ctx, g.tlsTable(port, r.TLS.ServerName))
	}, &p)
	g.srvMu.Lock()
	g.tlsServers = append(g.tlsServers, servers{fast: srv, h2: h2, ln: ln})
	g.srvMu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = srv.Serve(fastLn) }()
	go func() { defer wg.Done(); _ = h2.Serve(h2Ln) }()
	var handshakes sync.WaitGroup
	err := acceptLoop(ln, func(c net.Conn) {
		handshakes.Add(1)
		go func() {
			defer handshakes.Done()
			g.handshake(c, base, port, fastLn, h2Ln)
		}()
	})
	handshakes.Wait()
	fastLn.Close()
	h2Ln.Close()
	wg.Wait()
	return err
}

// handshake runs the TLS handshake of c and hands the connection to the
// server of the protocol ALPN chose.
func (g *Gateway) handshake(c net.Conn, base *tls.Config, port uint32, fastLn, h2Ln *connListener) {
	_ = c.SetDeadline(time.Now().Add(tlsHandshakeTimeout))
	if st := g.tls.Load(); st != nil && (*st)[port] != nil && (*st)[port].passthrough {
		// The server name picks between terminating here and passing
		// the TLS through: read it first, then replay what was read.
		hello, sni, err := peekHello(c)
		if err != nil {
			g.metrics.tlsHandshakeErrors.Inc()
			plainOnTLS(c, err)
			g.log.Debug("gateway: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
			c.Close()
			return
		}
		if ch := (*st)[port].match(sni); ch != nil && ch.tcp != nil {
			g.passThrough(c, hello, ch.tcp, sni)
			return
		}
		c = &prefixConn{Conn: c, prefix: hello}
	}
	bc := newBatchConn(newNBConn(c)) // batching once ALPN chose h2; raw reads and writes (nbconn.go)
	tc := tls.Server(bc, base)
	if err := tc.Handshake(); err != nil {
		g.metrics.tlsHandshakeErrors.Inc()
		plainOnTLS(c, err)
		g.log.Debug("gateway: TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	_ = c.SetDeadline(time.Time{})
	st := tc.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		bc.start()
		h2Ln.push(tc) // net/http serves h2 on a *tls.Conn itself
		return
	}
	fastLn.push(&tlsServerConn{Conn: tc, port: port, sni: st.ServerName, state: &st, peer: peerNamesOf(&st)})
}

// acceptLoop accepts from ln, handing each connection to handle, until ln
// is closed (nil) or fails (the error).
func acceptLoop(ln net.Listener, handle func(net.Conn)) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		handle(c)
	}
}

// h2StandIn is what stands for an HTTP/2 connection in its streams'
// fasthttp contexts: its addresses, and its TLS state when it has one.
func h2StandIn(remote, local net.Addr, state *tls.ConnectionState) net.Conn {
	if state != nil {
		return &h2TLSConn{remote: remote, local: local, state: state}
	}
	return &h2Conn{remote: remote, local: local}
}

// h2TLSConn stands for an HTTP/2 stream's TLS connection in the fasthttp
// context the data path gets, so that it sees the call as TLS
// (RequestCtx.IsTLS, X-Forwarded-Proto: https).
type h2TLSConn struct {
	net.Conn      // nil: only the methods below are called
	remote, local net.Addr
	state         *tls.ConnectionState
}

func (c *h2TLSConn) RemoteAddr() net.Addr                 { return c.remote }
func (c *h2TLSConn) LocalAddr() net.Addr                  { return c.local }
func (c *h2TLSConn) Handshake() error                     { return nil }
func (c *h2TLSConn) ConnectionState() tls.ConnectionState { return *c.state }

// h2Conn stands for an h2c stream's connection in the fasthttp context:
// its two addresses.
type h2Conn struct {
	net.Conn      // nil: only the methods below are called
	remote, local net.Addr
}

func (c *h2Conn) RemoteAddr() net.Addr { return c.remote }
func (c *h2Conn) LocalAddr() net.Addr  { return c.local }

var zeroAddr = &net.TCPAddr{IP: net.IPv4zero}
