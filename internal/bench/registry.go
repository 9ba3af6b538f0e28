package bench

// The registry load generator: it drives a running "sextant server" over
// loopback HTTP with the scenarios of the registry issue and reports
// throughput and latency percentiles. The loader shares the machine with the
// server, so the hot paths send pre-encoded bodies patched in place (only the
// id digits change), reuse read buffers, and do no formatting per request.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/sextant-mesh/sextant/client"
)

// RegistryScenarios lists the scenarios in the order they run.
var RegistryScenarios = []string{"register", "batch", "heartbeat", "query", "changes", "watch"}

// RegistryConfig configures RunRegistry. Zero values take the defaults in
// brackets.
type RegistryConfig struct {
	Server    string   // server URL [http://127.0.0.1:7400]
	Scenarios []string // subset of RegistryScenarios [all]
	Namespace string   // namespace of everything created [bench-<unix time>]

	Duration     time.Duration // length of each throughput scenario [10s]
	MaxInstances int           // cap on instances one throughput scenario registers [1,000,000]

	Conns          int // register: concurrent single-instance registers [256]
	BatchConns     int // batch: concurrent requests [4]
	BatchSize      int // batch: instances per request [500]
	HeartbeatConns int // heartbeat: concurrent requests [4]
	HeartbeatIDs   int // heartbeat: ids per request [1000]
	HeartbeatPool  int // heartbeat: instances heartbeated [100,000]
	QueryConns     int // query: concurrent queries [64]
	QuerySize      int // query: instances in the queried service [100]
	ChangesTotal   int // changes: instances the registry holds before [200,000]
	ChangesCount   int // changes: changes fetched in one call [5,000]
	ChangesRounds  int // changes: timed calls [50]
	WatchRounds    int // watch: rounds [300]

	Keep     bool      // leave what was registered in place
	Progress io.Writer // progress bars (nil: none)
}

func (c *RegistryConfig) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if c.Server == "" {
		c.Server = "http://127.0.0.1:7400"
	}
	if len(c.Scenarios) == 0 {
		c.Scenarios = RegistryScenarios
	}
	if c.Namespace == "" {
		c.Namespace = "bench-" + strconv.FormatInt(time.Now().Unix(), 10)
	}
	if c.Duration <= 0 {
		c.Duration = 10 * time.Second
	}
	def(&c.MaxInstances, 1_000_000)
	def(&c.Conns, 256)
	def(&c.BatchConns, 4)
	def(&c.BatchSize, 500)
	def(&c.HeartbeatConns, 4)
	def(&c.HeartbeatIDs, 1000)
	def(&c.HeartbeatPool, 100_000)
	def(&c.QueryConns, 64)
	def(&c.QuerySize, 100)
	def(&c.ChangesTotal, 200_000)
	def(&c.ChangesCount, 5_000)
	def(&c.ChangesRounds, 50)
	def(&c.WatchRounds, 300)
}

// RegistryResult is the JSON object RunRegistry prints.
type RegistryResult struct {
	Server    string `json:"server"`
	Namespace string `json:"namespace"`
	Machine   struct {
		NumCPU     int    `json:"num_cpu"`
		GOMAXPROCS int    `json:"gomaxprocs"`
		Note       string `json:"note"`
	} `json:"machine"`
	Register  *RegThroughput `json:"register,omitempty"`
	Batch     *RegThroughput `json:"batch,omitempty"`
	Heartbeat *RegThroughput `json:"heartbeat,omitempty"`
	Query     *RegThroughput `json:"query,omitempty"`
	Changes   *RegLatency    `json:"changes,omitempty"`
	Watch     *RegLatency    `json:"watch,omitempty"`
	Cleanup   *RegCleanup    `json:"cleanup,omitempty"`
}

// RegThroughput is the figure of a throughput scenario. Items are
// instances (register, batch), ids (heartbeat) or queries (query).
type RegThroughput struct {
	Unit        string  `json:"unit"`
	Conns       int     `json:"conns"`
	PerRequest  int     `json:"per_request"`
	Requests    int64   `json:"requests"`
	Items       int64   `json:"items"`
	Seconds     float64 `json:"seconds"`
	PerSecond   float64 `json:"per_second"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error,omitempty"`
	Target      float64 `json:"target_per_second"`
	TargetP99Ms float64 `json:"target_p99_ms,omitempty"`
	RegCPU
	Note string `json:"note,omitempty"`
}

// RegCPU is the CPU time loader and server spent in the timed part of a
// scenario: they share the machine, so this says who used the cores. The
// server's figure comes from its /metrics (process_cpu_seconds_total) and is
// left out when that is missing.
type RegCPU struct {
	LoaderCPUSeconds float64  `json:"loader_cpu_seconds"`
	ServerCPUSeconds *float64 `json:"server_cpu_seconds,omitempty"`
}

// RegLatency is the figure of a latency scenario.
type RegLatency struct {
	Rounds      int     `json:"rounds"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
	MaxMs       float64 `json:"max_ms"`
	TargetP99Ms float64 `json:"target_p99_ms"`
	RegCPU
	Note string `json:"note,omitempty"`
	// watch only: from sending the register instead of from its answer
	FromSendP50Ms float64 `json:"from_send_p50_ms,omitempty"`
	FromSendP99Ms float64 `json:"from_send_p99_ms,omitempty"`
	// changes only
	Preloaded       int   `json:"preloaded,omitempty"`
	RegistryHolds   int   `json:"registry_holds,omitempty"`
	ChangesReturned int   `json:"changes_returned,omitempty"`
	BodyBytes       int64 `json:"body_bytes,omitempty"`
}

// RegCleanup says what was removed at the end.
type RegCleanup struct {
	Deregistered int     `json:"deregistered"`
	Seconds      float64 `json:"seconds"`
	Kept         bool    `json:"kept,omitempty"`
}

// RunRegistry runs the selected scenarios against cfg.Server, writes one JSON
// object of figures to out, and deregisters what it created unless cfg.Keep.
func RunRegistry(ctx context.Context, cfg RegistryConfig, out io.Writer) (RegistryResult, error) {
	cfg.defaults()
	for _, s := range cfg.Scenarios {
		if !slices.Contains(RegistryScenarios, s) {
			return RegistryResult{}, fmt.Errorf("bench: unknown registry scenario %q (have %v)", s, RegistryScenarios)
		}
	}
	c, err := client.New(cfg.Server, client.WithUserAgent("sextant-bench/1"))
	if err != nil {
		return RegistryResult{}, fmt.Errorf("bench: %w", err)
	}
	defer c.HTTPClient().CloseIdleConnections()
	if _, err := c.Namespaces(ctx); err != nil {
		return RegistryResult{}, fmt.Errorf("bench: server %s not answering: %w", cfg.Server, err)
	}
	u, err := url.Parse(c.BaseURL())
	if err != nil || u.Scheme != "http" {
		return RegistryResult{}, fmt.Errorf("bench: server %q: the load generator speaks plain http on loopback only", cfg.Server)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	r := &regRun{cfg: cfg, c: c, addr: addr, host: u.Host, base: u.Path}
	res := RegistryResult{Server: c.BaseURL(), Namespace: cfg.Namespace}
	res.Machine.NumCPU = runtime.NumCPU()
	res.Machine.GOMAXPROCS = runtime.GOMAXPROCS(0)
	res.Machine.Note = "load generator and server share this machine's cores; loopback HTTP/1.1"

	var runErr error
	for _, s := range cfg.Scenarios {
		var err error
		switch s {
		case "register":
			res.Register, err = r.register(ctx)
		case "batch":
			res.Batch, err = r.batch(ctx)
		case "heartbeat":
			res.Heartbeat, err = r.heartbeat(ctx)
		case "query":
			res.Query, err = r.query(ctx)
		case "changes":
			res.Changes, err = r.changes(ctx)
		case "watch":
			res.Watch, err = r.watch(ctx)
		}
		if err == nil {
			err = ctx.Err() // interrupted: the figures of s are partial
		}
		if err != nil {
			runErr = fmt.Errorf("bench: registry %s: %w", s, err)
			break
		}
	}
	// Clean up even after a failed or interrupted run, on a fresh context.
	if cfg.Keep {
		res.Cleanup = &RegCleanup{Kept: true}
	} else {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		res.Cleanup, err = r.cleanup(cctx)
		cancel()
		if err != nil && runErr == nil {
			runErr = fmt.Errorf("bench: registry cleanup: %w", err)
		}
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil && runErr == nil {
		runErr = fmt.Errorf("bench: %w", err)
	}
	return res, runErr
}

// regRun is one run's state; only the scenario running touches it.
type regRun struct {
	cfg  RegistryConfig
	c    *client.Client
	addr string // host:port of the server
	host string // its Host header
	base string // path prefix of the server URL, usually empty
	// created lists id families: ids prefix+10 digits of 0..n-1, so that
	// cleanup need not keep a million id strings.
	mu      sync.Mutex
	created []*regFamily
}

type regFamily struct {
	prefix string
	n      atomic.Int64
}

func (r *regRun) family(prefix string) *regFamily {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := &regFamily{prefix: prefix}
	r.created = append(r.created, f)
	return f
}

const regDigits = 10

// regID is the id of instance i of a family (not used on hot paths).
func regID(prefix string, i int64) string {
	b := make([]byte, 0, len(prefix)+regDigits)
	b = append(b, prefix...)
	b = append(b, make([]byte, regDigits)...)
	regPutDigits(b[len(prefix):], uint64(i))
	return string(b)
}

// regPutDigits writes n as fixed-width decimal into b, in place.
func regPutDigits(b []byte, n uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + n%10)
		n /= 10
	}
}

// regMetadata is the benchmark's metadata: 16 entries of 10-byte keys and
// values. Key j has 2^j distinct values across instances, so selectors hit
// both dense and sparse postings.
func regMetadata(i int) map[string]string {
	md := make(map[string]string, 16)
	for j := 1; j <= 16; j++ {
		k := []byte("meta-key00")
		regPutDigits(k[8:], uint64(j))
		v := []byte("v00-000000")
		regPutDigits(v[1:3], uint64(j))
		regPutDigits(v[4:], uint64(i%(1<<j)))
		md[string(k)] = string(v)
	}
	return md
}

// regTemplate is a pre-encoded register body whose id digits are patched
// in place before each send.
type regTemplate struct {
	body    []byte
	offsets []int // where each instance's id digits start
}

// newRegTemplate encodes n instances of service svc whose ids are
// prefix+digits; set(k) patches instance k's digits to base+k.
func newRegTemplate(ns, svc, prefix string, n, ttl int) regTemplate {
	insts := make([]client.Instance, n)
	placeholder := prefix + "##########"
	for k := range insts {
		insts[k] = client.Instance{
			ID: placeholder, Namespace: ns, Service: svc,
			Host: "10.0." + strconv.Itoa(k/250) + "." + strconv.Itoa(k%250+1), Port: 8080 + k%1000,
			Protocol: "http", Version: "v1", Weight: client.Weight(100),
			Metadata: regMetadata(k), TTLSeconds: ttl,
		}
	}
	t := regTemplate{body: client.AppendRegisterBody(nil, insts...)}
	quoted := []byte(`"` + placeholder + `"`)
	for off := 0; ; {
		i := bytes.Index(t.body[off:], quoted)
		if i < 0 {
			break
		}
		t.offsets = append(t.offsets, off+i+1+len(prefix))
		off += i + len(quoted)
	}
	if len(t.offsets) != n {
		panic("bench: register template lost an id placeholder")
	}
	return t
}

func (t *regTemplate) set(base uint64) {
	for k, off := range t.offsets {
		regPutDigits(t.body[off:off+regDigits], base+uint64(k))
	}
}

// regCaller is a minimal HTTP/1.1 client on one keep-alive connection, for
// one loader goroutine. The loader shares the cores with the server, and
// net/http's client spends three goroutines and several channel handoffs per
// request; this writes each request with one syscall and reads the answer
// on the caller's goroutine, into a buffer it reuses. It speaks only what
// the loopback benchmark needs: Content-Length or chunked answers, no TLS,
// no redirects, no compression.
type regCaller struct {
	addr string // host:port to dial
	host string // Host header
	conn net.Conn
	br   *bufio.Reader
	wbuf []byte
	buf  []byte // body of the last answer
}

func (r *regRun) caller() *regCaller {
	return &regCaller{addr: r.addr, host: r.host}
}

// close drops the connection; the caller may be used again (it redials).
func (c *regCaller) close() {
	if c.conn != nil {
		c.conn.Close()
		c.conn, c.br = nil, nil
	}
}

// regTimeout bounds one request; ctx is checked between requests, so an
// interrupted run ends within this (blocking queries use wait=10s).
const regTimeout = 60 * time.Second

// send does one request to path (which includes the query) and reads the
// whole answer into c.buf. A non-200 answer is an error carrying the body.
func (c *regCaller) send(ctx context.Context, method, path string, body []byte) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if c.conn == nil {
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", c.addr)
		if err != nil {
			return 0, err
		}
		c.conn, c.br = conn, bufio.NewReaderSize(conn, 64<<10)
	}
	w := append(c.wbuf[:0], method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, c.host...)
	w = append(w, "\r\nUser-Agent: sextant-bench/1\r\n"...)
	if body != nil {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	c.wbuf = w
	_ = c.conn.SetDeadline(time.Now().Add(regTimeout))
	if _, err := c.conn.Write(w); err != nil {
		c.close()
		return 0, err
	}
	status, err := c.readAnswer()
	if err != nil {
		c.close()
		return status, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if status != http.StatusOK {
		return status, fmt.Errorf("%s %s: status %d: %.200s", method, path, status, c.buf)
	}
	return status, nil
}

var errRegProtocol = errors.New("malformed HTTP answer")

// readAnswer reads a status line, headers and body into c.buf. It closes
// the connection when the server asks to.
func (c *regCaller) readAnswer() (int, error) {
	line, err := c.br.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, errRegProtocol
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, errRegProtocol
	}
	length, chunked, closing := -1, false, false
	for {
		line, err = c.br.ReadSlice('\n')
		if err != nil {
			return status, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return status, errRegProtocol
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(v)); err != nil || length < 0 {
				return status, errRegProtocol
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(v, []byte("chunked"))
		case bytes.EqualFold(k, []byte("Connection")):
			closing = bytes.EqualFold(v, []byte("close"))
		}
	}
	c.buf = c.buf[:0]
	switch {
	case chunked:
		err = c.readChunked()
	case length >= 0:
		c.buf = slices.Grow(c.buf, length)[:length]
		_, err = io.ReadFull(c.br, c.buf)
	default: // no length: the body runs to the end of the connection
		closing = true
		var b bytes.Buffer
		_, err = b.ReadFrom(c.br)
		c.buf = append(c.buf, b.Bytes()...)
	}
	if err == nil && closing {
		c.close()
	}
	return status, err
}

func (c *regCaller) readChunked() error {
	for {
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		line = bytes.TrimRight(line, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions
		}
		n, err := strconv.ParseUint(string(line), 16, 31)
		if err != nil {
			return errRegProtocol
		}
		if n == 0 {
			for { // trailers, up to the empty line
				line, err := c.br.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return nil
				}
			}
		}
		old := len(c.buf)
		c.buf = slices.Grow(c.buf, int(n))[:old+int(n)]
		if _, err := io.ReadFull(c.br, c.buf[old:]); err != nil {
			return err
		}
		if _, err := c.br.Discard(2); err != nil { // CRLF after the chunk
			return err
		}
	}
}

// regStats collects one loader goroutine's figures.
type regStats struct {
	lat      []time.Duration
	requests int64
	items    int64
	errors   int64
	firstErr error
}

// regLoop runs conns goroutines calling step until the duration passes, ctx
// ends, or step reports done; it returns the merged figures. step sends one
// request and returns how many items it carried. Requests in flight when the
// duration passes are finished and counted, not cut short: a cut request may
// still have been committed, and its latency is real.
func (r *regRun) regLoop(ctx context.Context, name string, conns int, step func(ctx context.Context, g int, c *regCaller) (items int, done bool, err error)) (*RegThroughput, error) {
	stats := make([]regStats, conns)
	var wg sync.WaitGroup
	stopBar := r.timeBar(ctx, name, r.cfg.Duration)
	cpu := r.startCPU(ctx)
	start := time.Now()
	end := start.Add(r.cfg.Duration)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[g]
			st.lat = make([]time.Duration, 0, 4096)
			c := r.caller()
			defer c.close()
			consecutive := 0
			for t0 := time.Now(); ctx.Err() == nil && t0.Before(end); t0 = time.Now() {
				n, done, err := step(ctx, g, c)
				if done {
					return
				}
				if err != nil {
					if ctx.Err() != nil {
						return // interrupted
					}
					st.errors++
					if st.firstErr == nil {
						st.firstErr = err
					}
					if consecutive++; consecutive >= 100 {
						return // the server is failing; stop hammering it
					}
					continue
				}
				consecutive = 0
				st.lat = append(st.lat, time.Since(t0))
				st.requests++
				st.items += int64(n)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	stopBar()
	res := &RegThroughput{Conns: conns, Seconds: round3(elapsed.Seconds()), RegCPU: cpu.stop(ctx)}
	var all []time.Duration
	for i := range stats {
		st := &stats[i]
		all = append(all, st.lat...)
		res.Requests += st.requests
		res.Items += st.items
		res.Errors += st.errors
		if st.firstErr != nil && res.FirstError == "" {
			res.FirstError = st.firstErr.Error()
		}
	}
	res.PerSecond = round3(float64(res.Items) / elapsed.Seconds())
	res.P50Ms, res.P99Ms, res.MaxMs = regPercentiles(all)
	if res.Requests == 0 {
		return res, fmt.Errorf("no request succeeded: %s", res.FirstError)
	}
	return res, nil
}

func regPercentiles(d []time.Duration) (p50, p99, maxMs float64) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	slices.Sort(d)
	at := func(q float64) float64 {
		i := int(q * float64(len(d)-1))
		return round3(float64(d[i]) / 1e6)
	}
	return at(0.50), at(0.99), round3(float64(d[len(d)-1]) / 1e6)
}

func round3(x float64) float64 {
	return float64(int64(x*1000+0.5)) / 1000
}

// reserve takes n slots of the scenario's instance budget; false when spent.
func regReserve(budget *atomic.Int64, n int) bool {
	return budget.Add(-int64(n)) >= 0
}

func (r *regRun) register(ctx context.Context) (*RegThroughput, error) {
	conns := r.cfg.Conns
	fams := make([]*regFamily, conns)
	tmpls := make([]regTemplate, conns)
	for g := range conns {
		prefix := "reg-g" + strconv.Itoa(g) + "-"
		fams[g] = r.family(prefix)
		tmpls[g] = newRegTemplate(r.cfg.Namespace, "reg-"+strconv.Itoa(g%64), prefix, 1, 0)
	}
	var budget atomic.Int64
	budget.Store(int64(r.cfg.MaxInstances))
	target := r.base + "/v1/instances"
	res, err := r.regLoop(ctx, "register", conns, func(ctx context.Context, g int, c *regCaller) (int, bool, error) {
		if !regReserve(&budget, 1) {
			return 0, true, nil
		}
		// Count the id before sending: a request the deadline cuts short
		// may still have been committed, and cleanup must remove it.
		tmpls[g].set(uint64(fams[g].n.Add(1) - 1))
		_, err := c.send(ctx, http.MethodPost, target, tmpls[g].body)
		return 1, false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target, res.TargetP99Ms = "instances", 1, 20_000, 50
	}
	return res, err
}

func (r *regRun) batch(ctx context.Context) (*RegThroughput, error) {
	conns, size := r.cfg.BatchConns, r.cfg.BatchSize
	fams := make([]*regFamily, conns)
	tmpls := make([]regTemplate, conns)
	for g := range conns {
		prefix := "bat-g" + strconv.Itoa(g) + "-"
		fams[g] = r.family(prefix)
		tmpls[g] = newRegTemplate(r.cfg.Namespace, "batch-"+strconv.Itoa(g), prefix, size, 0)
	}
	var budget atomic.Int64
	budget.Store(int64(r.cfg.MaxInstances))
	target := r.base + "/v1/instances"
	res, err := r.regLoop(ctx, "batch", conns, func(ctx context.Context, g int, c *regCaller) (int, bool, error) {
		if !regReserve(&budget, size) {
			return 0, true, nil
		}
		tmpls[g].set(uint64(fams[g].n.Add(int64(size)) - int64(size)))
		_, err := c.send(ctx, http.MethodPost, target, tmpls[g].body)
		return size, false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "instances", size, 200_000
	}
	return res, err
}

// preload registers n instances with ids prefix+digits into services
// svcPrefix0, svcPrefix1, ... of 1000 instances each, in batches of 500 from
// a few goroutines, untimed.
func (r *regRun) preload(ctx context.Context, name, svcPrefix, prefix string, n, ttl int) error {
	const size, perService = 500, 1000
	f := r.family(prefix)
	conns := max(1, r.cfg.BatchConns)
	bar := r.countBar(name, int64(n))
	defer bar.finish()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, conns)
	for g := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := r.caller()
			defer c.close()
			for ctx.Err() == nil {
				base := next.Add(size) - size
				if base >= int64(n) {
					return
				}
				k := min(size, n-int(base))
				// One service per perService instances; size divides perService.
				t := newRegTemplate(r.cfg.Namespace, svcPrefix+strconv.FormatInt(base/perService, 10), prefix, k, ttl)
				t.set(uint64(base))
				if _, err := c.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body); err != nil {
					errs[g] = err
					return
				}
				bar.add(int64(k))
			}
		}()
	}
	wg.Wait()
	// The family is contiguous only if every batch landed; cleanup tolerates
	// ids that were never registered (they come back as not_found).
	f.n.Store(min(next.Load(), int64(n)))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

func (r *regRun) heartbeat(ctx context.Context) (*RegThroughput, error) {
	pool, per := r.cfg.HeartbeatPool, r.cfg.HeartbeatIDs
	prefix := "hb-"
	// A TTL long enough that no instance turns unhealthy during the run.
	if err := r.preload(ctx, "heartbeat preload", "hb-", prefix, pool, 3600); err != nil {
		return nil, fmt.Errorf("preload: %w", err)
	}
	var (
		bodies [][]byte
		counts []int // ids in each body; the last may be short
	)
	for base := 0; base < pool; base += per {
		ids := make([]string, 0, per)
		for i := base; i < min(base+per, pool); i++ {
			ids = append(ids, regID(prefix, int64(i)))
		}
		bodies = append(bodies, client.AppendIDsBody(nil, ids...))
		counts = append(counts, len(ids))
	}
	// Check once that the ids exist, so the figure is about real heartbeats.
	var nf struct {
		NotFound []string `json:"not_found"`
	}
	chk := r.caller()
	defer chk.close()
	if _, err := chk.send(ctx, http.MethodPost, r.base+"/v1/heartbeats", bodies[0]); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(chk.buf, &nf); err != nil || len(nf.NotFound) > 0 {
		return nil, fmt.Errorf("heartbeat check: %d ids not found (%v)", len(nf.NotFound), err)
	}
	target := r.base + "/v1/heartbeats"
	var next atomic.Int64
	res, err := r.regLoop(ctx, "heartbeat", r.cfg.HeartbeatConns, func(ctx context.Context, g int, c *regCaller) (int, bool, error) {
		i := int(next.Add(1)) % len(bodies)
		_, err := c.send(ctx, http.MethodPost, target, bodies[i])
		return counts[i], false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "ids", per, 1_000_000
	}
	return res, err
}

// regQuerySelector matches half the query service (meta-key01 has two values).
const regQuerySelector = "meta-key01=v01-000001,meta-key02!=x"

func (r *regRun) query(ctx context.Context) (*RegThroughput, error) {
	n := r.cfg.QuerySize
	t := newRegTemplate(r.cfg.Namespace, "query", "query-", n, 0)
	t.set(0)
	f := r.family("query-")
	loadc := r.caller()
	_, err := loadc.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body)
	loadc.close()
	if err != nil {
		return nil, err
	}
	f.n.Store(int64(n))
	check, err := r.c.Query(ctx, r.cfg.Namespace, "query", client.QueryOptions{Selector: regQuerySelector})
	if err != nil {
		return nil, err
	}
	if want := n / 2; len(check.Instances) != want {
		return nil, fmt.Errorf("selector %q matched %d instances, want %d", regQuerySelector, len(check.Instances), want)
	}
	target := r.base + "/v1/namespaces/" + r.cfg.Namespace + "/services/query/instances?selector=" +
		"meta-key01%3Dv01-000001%2Cmeta-key02%21%3Dx"
	res, err := r.regLoop(ctx, "query", r.cfg.QueryConns, func(ctx context.Context, g int, c *regCaller) (int, bool, error) {
		_, err := c.send(ctx, http.MethodGet, target, nil)
		return 1, false, err
	})
	if res != nil {
		res.Unit, res.PerRequest, res.Target = "queries", 1, 30_000
		res.Note = fmt.Sprintf("service of %d instances, selector %q matching %d", n, regQuerySelector, n/2)
	}
	return res, err
}

// registryHolds sums the instances of every service in every namespace.
func (r *regRun) registryHolds(ctx context.Context) (int, error) {
	ns, err := r.c.Namespaces(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for _, n := range ns.Namespaces {
		s, err := r.c.Services(ctx, n)
		if err != nil {
			return 0, err
		}
		for _, svc := range s.Services {
			total += svc.Instances
		}
	}
	return total, nil
}

func (r *regRun) changes(ctx context.Context) (*RegLatency, error) {
	holds, err := r.registryHolds(ctx)
	if err != nil {
		return nil, err
	}
	res := &RegLatency{Rounds: r.cfg.ChangesRounds, TargetP99Ms: 20}
	if missing := r.cfg.ChangesTotal - holds; missing > 0 {
		if err := r.preload(ctx, "changes preload", "pre-", "pre-", missing, 0); err != nil {
			return nil, fmt.Errorf("preload: %w", err)
		}
		res.Preloaded = missing
		holds += missing
	}
	res.RegistryHolds = holds
	ns, err := r.c.Namespaces(ctx)
	if err != nil {
		return nil, err
	}
	since := ns.Revision
	if err := r.preload(ctx, "changes", "chg-", "chg-", r.cfg.ChangesCount, 0); err != nil {
		return nil, fmt.Errorf("registering changes: %w", err)
	}
	target := r.base + "/v1/changes?since=" + strconv.FormatUint(since, 10) + "&limit=10000"
	c := r.caller()
	defer c.close()
	if _, err := c.send(ctx, http.MethodGet, target, nil); err != nil {
		return nil, err
	}
	var feed client.ChangesResult
	if err := json.Unmarshal(c.buf, &feed); err != nil {
		return nil, fmt.Errorf("decoding changes: %w", err)
	}
	res.ChangesReturned, res.BodyBytes = len(feed.Changes), int64(len(c.buf))
	if len(feed.Changes) < r.cfg.ChangesCount {
		return nil, fmt.Errorf("changes since %d: got %d, want at least %d", since, len(feed.Changes), r.cfg.ChangesCount)
	}
	bar := r.countBar("changes reads", int64(r.cfg.ChangesRounds))
	defer bar.finish()
	lat := make([]time.Duration, 0, r.cfg.ChangesRounds)
	cpu := r.startCPU(ctx)
	for range r.cfg.ChangesRounds {
		t0 := time.Now()
		if _, err := c.send(ctx, http.MethodGet, target, nil); err != nil {
			return nil, err
		}
		lat = append(lat, time.Since(t0))
		bar.add(1)
	}
	res.RegCPU = cpu.stop(ctx)
	res.P50Ms, res.P99Ms, res.MaxMs = regPercentiles(lat)
	res.Note = "time to read the whole answer of GET /v1/changes?since=R&limit=10000, not decoded"
	return res, nil
}

func (r *regRun) watch(ctx context.Context) (*RegLatency, error) {
	const prefix = "watch-"
	t := newRegTemplate(r.cfg.Namespace, "watch", prefix, 1, 0)
	f := r.family(prefix)
	f.n.Store(1)
	// Every round re-registers the one instance with a new metadata value, so
	// each register is a real change that must wake the watcher.
	round := bytes.Index(t.body, []byte(`"meta-key16":"v16-`))
	if round < 0 {
		return nil, errors.New("watch template lacks meta-key16")
	}
	round += len(`"meta-key16":"v16-`)
	t.set(0)
	w, reg := r.caller(), r.caller()
	defer w.close()
	defer reg.close()
	if _, err := reg.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body); err != nil {
		return nil, err
	}
	first, err := r.c.Query(ctx, r.cfg.Namespace, "watch", client.QueryOptions{})
	if err != nil {
		return nil, err
	}
	index := first.Revision
	qbase := r.base + "/v1/namespaces/" + r.cfg.Namespace + "/services/watch/instances?wait=10s&index="
	bar := r.countBar("watch", int64(r.cfg.WatchRounds))
	defer bar.finish()
	lat := make([]time.Duration, 0, r.cfg.WatchRounds)
	fromSend := make([]time.Duration, 0, r.cfg.WatchRounds)
	type answer struct {
		at  time.Time
		rev uint64
		err error
	}
	got := make(chan answer, 1)
	cpu := r.startCPU(ctx)
	for i := range r.cfg.WatchRounds {
		target := qbase + strconv.FormatUint(index, 10)
		// The watcher goroutine lives for one round; the round waits for it.
		go func() {
			_, err := w.send(ctx, http.MethodGet, target, nil)
			at := time.Now()
			var a struct {
				Revision uint64 `json:"revision"`
			}
			if err == nil {
				err = json.Unmarshal(w.buf, &a)
			}
			got <- answer{at, a.Revision, err}
		}()
		// Give the blocking query time to park on the server; registering
		// first would answer it at once and flatter the figure.
		time.Sleep(3 * time.Millisecond)
		regPutDigits(t.body[round:round+6], uint64(i+1)%1_000_000)
		sent := time.Now()
		_, err := reg.send(ctx, http.MethodPost, r.base+"/v1/instances", t.body)
		done := time.Now()
		a := <-got
		if err != nil {
			return nil, err
		}
		if a.err != nil {
			return nil, a.err
		}
		if a.rev <= index {
			return nil, fmt.Errorf("round %d: blocking query answered revision %d, not newer than %d", i, a.rev, index)
		}
		lat = append(lat, max(0, a.at.Sub(done)))
		fromSend = append(fromSend, a.at.Sub(sent))
		index = a.rev
		bar.add(1)
	}
	res := &RegLatency{Rounds: len(lat), TargetP99Ms: 5, RegCPU: cpu.stop(ctx)}
	res.P50Ms, res.P99Ms, res.MaxMs = regPercentiles(lat)
	res.FromSendP50Ms, res.FromSendP99Ms, _ = regPercentiles(fromSend)
	res.Note = "p50/p99: from the register's 200 answer to the blocking query's answer (0 when the watcher was answered first); from_send: from sending the register (includes its durable commit)"
	return res, nil
}

// cleanup deregisters every id family, 10000 ids per request.
func (r *regRun) cleanup(ctx context.Context) (*RegCleanup, error) {
	start := time.Now()
	res := &RegCleanup{}
	var total int64
	for _, f := range r.created {
		total += f.n.Load()
	}
	bar := r.countBar("cleanup", total)
	defer bar.finish()
	ids := make([]string, 0, 10000)
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		_, nf, err := r.c.Deregister(ctx, ids...)
		if err != nil {
			return err
		}
		res.Deregistered += len(ids) - len(nf)
		bar.add(int64(len(ids)))
		ids = ids[:0]
		return nil
	}
	for _, f := range r.created {
		for k := range f.n.Load() {
			ids = append(ids, regID(f.prefix, k))
			if len(ids) == cap(ids) {
				if err := flush(); err != nil {
					return res, err
				}
			}
		}
	}
	err := flush()
	res.Seconds = round3(time.Since(start).Seconds())
	return res, err
}

// regCPUMeter measures CPU time between startCPU and stop.
type regCPUMeter struct {
	r              *regRun
	loader, server float64
	serverOK       bool
}

func (r *regRun) startCPU(ctx context.Context) regCPUMeter {
	m := regCPUMeter{r: r, loader: regLoaderCPU()}
	m.server, m.serverOK = r.serverCPU(ctx)
	return m
}

func (m regCPUMeter) stop(ctx context.Context) RegCPU {
	c := RegCPU{LoaderCPUSeconds: round3(regLoaderCPU() - m.loader)}
	if s, ok := m.r.serverCPU(ctx); ok && m.serverOK {
		d := round3(s - m.server)
		c.ServerCPUSeconds = &d
	}
	return c
}

// regLoaderCPU is this process's user+system CPU time in seconds.
func regLoaderCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// serverCPU reads process_cpu_seconds_total from the server's /metrics.
func (r *regRun) serverCPU(ctx context.Context) (float64, bool) {
	c := r.caller()
	defer c.close()
	if _, err := c.send(ctx, http.MethodGet, r.base+"/metrics", nil); err != nil {
		return 0, false
	}
	const name = "process_cpu_seconds_total "
	for line := range bytes.Lines(c.buf) {
		if v, ok := bytes.CutPrefix(line, []byte(name)); ok {
			f, err := strconv.ParseFloat(string(bytes.TrimSpace(v)), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// regBar is a progress bar that is a no-op without a progress writer.
type regBar struct{ b *progressbar.ProgressBar }

func (r *regRun) countBar(desc string, n int64) regBar {
	if r.cfg.Progress == nil || n <= 0 {
		return regBar{}
	}
	return regBar{progressbar.NewOptions64(n, progressbar.OptionSetWriter(r.cfg.Progress),
		progressbar.OptionSetDescription(desc), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())}
}

func (b regBar) add(n int64) {
	if b.b != nil {
		_ = b.b.Add64(n)
	}
}

func (b regBar) finish() {
	if b.b != nil {
		_ = b.b.Finish()
	}
}

// timeBar shows elapsed time of a timed scenario; the returned func stops
// its goroutine and waits for it.
func (r *regRun) timeBar(ctx context.Context, desc string, d time.Duration) (stop func()) {
	if r.cfg.Progress == nil {
		return func() {}
	}
	bar := progressbar.NewOptions64(d.Milliseconds(), progressbar.OptionSetWriter(r.cfg.Progress),
		progressbar.OptionSetDescription(desc), progressbar.OptionThrottle(200*time.Millisecond),
		progressbar.OptionClearOnFinish())
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	start := time.Now()
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-tick.C:
				_ = bar.Set64(min(now.Sub(start), d).Milliseconds())
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		_ = bar.Finish()
	}
}
