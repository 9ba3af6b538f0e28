package gateway_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// TestLoadTarget runs one process of a by-hand HTTP/2 and gRPC measurement
// (docs/perf/gateway.md, "HTTP/2 and gRPC, issue 48"): the test binary is
// the gateway, or one of its upstreams, in its own process, so that
// taskset can pin it and /proc can give its CPU alone. It is skipped
// unless SEXTANT_LOAD_ROLE is set:
//
//	grpc-upstream  a grpc-go TestService on SEXTANT_LOAD_ADDR
//	http-upstream  a net/http server of 1 KiB answers on SEXTANT_LOAD_ADDR
//	gateway        the gateway (h2c and TLS listeners), gRPC calls
//	               (/grpc.testing.) to SEXTANT_LOAD_GRPC, the rest to
//	               SEXTANT_LOAD_HTTP; it writes "plain=ADDR tls=ADDR" to
//	               SEXTANT_LOAD_OUT once both route
//	grpc-loader    SEXTANT_LOAD_CALLERS (64) grpc-go callers over
//	               SEXTANT_LOAD_CONNS (4) connections to SEXTANT_LOAD_ADDR,
//	               unary calls of 1 KiB answers (SEXTANT_LOAD_MODE=stream:
//	               one FullDuplexCall per caller, 1 KiB messages echoed one
//	               at a time, each counted as a call); it prints calls/s,
//	               p50, p99
//
// each for SEXTANT_LOAD_SECONDS (default 60).
func TestLoadTarget(t *testing.T) {
	role := os.Getenv("SEXTANT_LOAD_ROLE")
	if role == "" {
		t.Skip("SEXTANT_LOAD_ROLE not set: a by-hand measurement's process")
	}
	secs, _ := strconv.Atoi(os.Getenv("SEXTANT_LOAD_SECONDS"))
	if secs <= 0 {
		secs = 60
	}
	life := time.Duration(secs) * time.Second
	switch role {
	case "grpc-upstream":
		ln, err := net.Listen("tcp", os.Getenv("SEXTANT_LOAD_ADDR"))
		if err != nil {
			t.Fatal(err)
		}
		s := &grpcServer{name: "load", cancelled: make(chan struct{}, 16), srv: grpc.NewServer()}
		testgrpc.RegisterTestServiceServer(s.srv, s)
		time.AfterFunc(life, s.srv.Stop)
		_ = s.srv.Serve(ln)
	case "http-upstream":
		ln, err := net.Listen("tcp", os.Getenv("SEXTANT_LOAD_ADDR"))
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(strings.Repeat("x", 1024))
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		})}
		time.AfterFunc(life, func() { _ = srv.Close() })
		_ = srv.Serve(ln)
	case "gateway":
		loadGateway(t, life)
	case "grpc-loader":
		loadGRPC(t, life)
	default:
		t.Fatalf("SEXTANT_LOAD_ROLE %q", role)
	}
}

func loadGateway(t *testing.T, life time.Duration) {
	upOf := func(name, env string) *upstream {
		host, port, err := net.SplitHostPort(os.Getenv(env))
		if err != nil {
			t.Fatalf("%s: %v", env, err)
		}
		p, _ := strconv.Atoi(port)
		return &upstream{name: name, addr: os.Getenv(env), host: host, port: uint32(p)}
	}
	gu, hu := upOf("grpc", "SEXTANT_LOAD_GRPC"), upOf("http", "SEXTANT_LOAD_HTTP")
	ca := newPKI(t)
	cp := startControlPlane(t, "")
	g := startTLSGateway(t, cp.addr)
	sc, sk := ca.issue(t, false, "127.0.0.1", "localhost")
	routes := vhost("all", []string{"*"}, prefixRoute("/grpc.testing.", "grpc"), prefixRoute("/", "http"))
	cp.set(rdsListener("gw", "routes"), tlsListener("gw-tls", g.tlsPort(), tlsChain{cert: "any"}), certSecret("any", sc, sk),
		routeConfig("routes", routes), h2cCluster("grpc"), assignment("grpc", ep{u: gu}), edsCluster("http"), assignment("http", ep{u: hu}))
	c := g.tlsClient(ca.pool, true)
	waitFor(t, "both listeners to route", func() bool {
		resp, err := c.Get("https://127.0.0.1/")
		if err != nil {
			return false
		}
		resp.Body.Close()
		code, _, _ := g.get(t, "/")
		return resp.StatusCode == 200 && code == 200
	})
	c.CloseIdleConnections()
	out := fmt.Sprintf("plain=%s tls=%s\n", strings.TrimPrefix(g.url, "http://"), g.tls)
	if err := os.WriteFile(os.Getenv("SEXTANT_LOAD_OUT"), []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), life)
	defer cancel()
	<-ctx.Done()
}

// loadGRPC is a closed-loop grpc-go loader: each caller makes one unary
// call after another on its connection for life.
func loadGRPC(t *testing.T, life time.Duration) {
	callers, _ := strconv.Atoi(os.Getenv("SEXTANT_LOAD_CALLERS"))
	if callers <= 0 {
		callers = 64
	}
	conns, _ := strconv.Atoi(os.Getenv("SEXTANT_LOAD_CONNS"))
	if conns <= 0 {
		conns = 4
	}
	clients := make([]testgrpc.TestServiceClient, conns)
	for i := range clients {
		cc, err := grpc.NewClient("passthrough:///"+os.Getenv("SEXTANT_LOAD_ADDR"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		clients[i] = testgrpc.NewTestServiceClient(cc)
	}
	req := &testgrpc.SimpleRequest{ResponseSize: 1024}
	stream := os.Getenv("SEXTANT_LOAD_MODE") == "stream"
	msg := &testgrpc.StreamingOutputCallRequest{Payload: &testgrpc.Payload{Body: make([]byte, 1024)}}
	ctx, cancel := context.WithTimeout(context.Background(), life)
	defer cancel()
	lats := make([][]time.Duration, callers)
	errs := make([]int, callers)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := clients[i%conns]
			if stream {
				lats[i], errs[i] = echoLoop(ctx, c, msg)
				return
			}
			for ctx.Err() == nil {
				t0 := time.Now()
				_, err := c.UnaryCall(ctx, req)
				if err != nil {
					if ctx.Err() == nil {
						errs[i]++
					}
					continue
				}
				lats[i] = append(lats[i], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	var all []time.Duration
	nerr := 0
	for i := range lats {
		all = append(all, lats[i]...)
		nerr += errs[i]
	}
	if len(all) == 0 {
		t.Fatalf("no call succeeded (%d errors)", nerr)
	}
	slices.Sort(all)
	fmt.Printf("calls=%d errors=%d calls/s=%.0f p50=%v p99=%v\n", len(all), nerr, float64(len(all))/el.Seconds(),
		all[len(all)/2], all[len(all)*99/100])
}

// echoLoop sends msg on one FullDuplexCall and waits for its echo, again
// and again until ctx ends (reopening the stream after an error).
func echoLoop(ctx context.Context, c testgrpc.TestServiceClient, msg *testgrpc.StreamingOutputCallRequest) (lats []time.Duration, errs int) {
	for ctx.Err() == nil {
		st, err := c.FullDuplexCall(ctx)
		if err != nil {
			errs++
			continue
		}
		for ctx.Err() == nil {
			t0 := time.Now()
			if err = st.Send(msg); err == nil {
				_, err = st.Recv()
			}
			if err != nil {
				if ctx.Err() == nil {
					errs++
				}
				break
			}
			lats = append(lats, time.Since(t0))
		}
	}
	return lats, errs
}
