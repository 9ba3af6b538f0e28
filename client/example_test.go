package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"time"

	"github.com/sextant-mesh/sextant/client"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// exampleServer runs a real Sextant server (the embedded store in a
// temporary directory) for the examples; in your code the server is
// "sextant server" and its URL is known.
func exampleServer() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "sextant-example-")
	if err != nil {
		log.Fatal(err)
	}
	s, err := apitest.NewStack(dir)
	if err != nil {
		log.Fatal(err)
	}
	return s.URL(), func() { s.Close(); os.RemoveAll(dir) }
}

// A service process registers itself and stays registered until it stops.
func ExampleClient_Keepalive() {
	url, stop := exampleServer()
	defer stop()
	c, err := client.New(url)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// Heartbeats every 5s (half the TTL), shared with every other
	// registration of c; re-registers if the server loses the instance.
	reg, err := c.Keepalive(ctx, client.Instance{
		ID: "orders-1", Service: "orders", Host: "10.0.0.1", Port: 8080,
		Metadata: map[string]string{"version": "v2"},
	}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	in, err := c.Get(ctx, reg.ID())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(in.ID, in.Healthy, in.TTLSeconds)

	// On shutdown (or when ctx ends): deregister.
	if err := reg.Close(); err != nil {
		log.Fatal(err)
	}
	_, err = c.Get(ctx, "orders-1")
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// orders-1 true 10
	// true
}

// A caller keeps a watched view of a service and picks instances by
// metadata, with a fallback when the subset it names is empty.
func ExampleView_Pick() {
	url, stop := exampleServer()
	defer stop()
	c, err := client.New(url)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for i, version := range []string{"v1", "v1", "v2"} {
		_, err := c.Register(ctx, client.Instance{ID: "orders-" + strconv.Itoa(i), Service: "orders",
			Host: "10.0.0." + strconv.Itoa(i+1), Port: 8080, Metadata: map[string]string{"version": version, "zone": "z1"}})
		if err != nil {
			log.Fatal(err)
		}
	}

	v, err := c.NewView(client.ViewOptions{
		Policy: client.PolicyAdaptive,
		Subsets: client.SubsetConfig{
			FallbackPolicy: client.FallbackDefaultSubset,
			DefaultSubset:  map[string]string{"version": "v1"},
			Selectors:      []client.SubsetSelector{{Keys: []string{"version"}}},
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	if err := v.Add(ctx, "orders"); err != nil { // waits for the first state
		log.Fatal(err)
	}

	p, err := v.Pick("orders", client.PickOptions{Match: map[string]string{"version": "v2"}})
	if err != nil {
		log.Fatal(err)
	}
	start := time.Now()
	var callErr error                  // ... call p.Addr() ...
	p.Done(time.Since(start), callErr) // the policy learns latency and errors
	fmt.Println("v2:", p.Instance.ID, p.Addr())

	// No v3 subset: the fallback picks from the default subset (v1).
	p, err = v.Pick("orders", client.PickOptions{Match: map[string]string{"version": "v3"}})
	if err != nil {
		log.Fatal(err)
	}
	p.Done(time.Millisecond, nil)
	fmt.Println("v3 falls back to", p.Instance.Metadata["version"])

	// A selector filters instead of naming a subset.
	p, err = v.Pick("orders", client.PickOptions{Selector: "version!=v1,zone=z1"})
	if err != nil {
		log.Fatal(err)
	}
	p.Done(time.Millisecond, nil)
	fmt.Println("selector:", p.Instance.ID)
	// Output:
	// v2: orders-2 10.0.0.3:8080
	// v3 falls back to v1
	// selector: orders-2
}

// A hot path prepares its pick once.
func ExampleView_Prepare() {
	url, stop := exampleServer()
	defer stop()
	c, err := client.New(url)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Register(ctx, client.Instance{ID: "pay-1", Service: "payments", Host: "10.0.1.1", Port: 9000,
		Metadata: map[string]string{"zone": "z1", "version": "v2"}}); err != nil {
		log.Fatal(err)
	}
	v, err := c.NewView(client.ViewOptions{Subsets: client.SubsetConfig{
		Selectors: []client.SubsetSelector{{Keys: []string{"zone", "version"}}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	if err := v.Add(ctx, "payments"); err != nil {
		log.Fatal(err)
	}
	pick, err := v.Prepare("payments", client.PickOptions{Match: map[string]string{"zone": "z1", "version": "v2"}})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		p, err := pick.Pick() // no allocation, no lock, no request
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(p.Addr())
		p.Report(time.Millisecond, client.OutcomeSuccess)
	}
	// Output:
	// 10.0.1.1:9000
	// 10.0.1.1:9000
	// 10.0.1.1:9000
}

// An HTTP client whose URLs name services: http://hello/ goes to an
// instance of "hello", retried on another one if it fails.
func ExampleNewRoundTripper() {
	url, stop := exampleServer()
	defer stop()
	c, err := client.New(url)
	if err != nil {
		log.Fatal(err)
	}
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from %s, Host %s", r.URL.Path, r.Host)
	}))
	defer backend.Close()
	port := backend.Listener.Addr().(*net.TCPAddr).Port
	if _, err := c.Register(context.Background(), client.Instance{Service: "hello", Host: "127.0.0.1", Port: port}); err != nil {
		log.Fatal(err)
	}

	v, err := c.NewView(client.ViewOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer v.Close()
	transport := client.NewTransport()
	defer transport.CloseIdleConnections()
	hc := &http.Client{Transport: client.NewRoundTripper(v, client.RoundTripperOptions{Base: transport, MaxRetries: 2})}

	resp, err := hc.Get("http://hello/greeting") // adds "hello" to the view on first use
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output:
	// 200 hello from /greeting, Host hello
}
