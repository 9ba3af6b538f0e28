package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/sextant-mesh/sextant/internal/bench/report"
)

// StreamConfig configures the stream scenario: one large upload and one
// large download through each proxy, its resident memory sampled.
type StreamConfig struct {
	// Binary is the sextant executable (os.Executable()).
	Binary string
	// Proxies: direct, nginx (proxy_request_buffering and proxy_buffering
	// off), sextant. Default: all three.
	Proxies []string
	// Size of each body (default 1 GiB); Rounds per proxy, interleaved,
	// the median reported (default 1).
	Size   int64
	Rounds int
	// Progress receives one line per run (nil: none).
	Progress io.Writer
}

// StreamProxyResult is one proxy's median round.
type StreamProxyResult struct {
	Name         string  `json:"name"`
	UploadMBps   float64 `json:"upload_mb_per_s"`
	DownloadMBps float64 `json:"download_mb_per_s"`
	RSSBytes     int64   `json:"rss_before_bytes,omitempty"`
	RSSGrowth    int64   `json:"rss_peak_growth_bytes"` // the proxy's (and its workers') peak RSS over its RSS before, sampled every 20 ms
}

// StreamResult is the stream scenario's one JSON object.
type StreamResult struct {
	Scenario        string              `json:"scenario"`
	BodyBytes       int64               `json:"body_bytes"`
	Rounds          int                 `json:"rounds"`
	Proxies         []StreamProxyResult `json:"proxies"`
	UploadVsNginx   float64             `json:"sextant_vs_nginx_upload_ratio,omitempty"`
	DownloadVsNginx float64             `json:"sextant_vs_nginx_download_ratio,omitempty"`
	LoadAvg         [3]float64          `json:"load_avg"`
	Nproc           int                 `json:"nproc"`
}

// RunStream measures a Size upload and a Size download through each proxy
// in front of one upstream process, all on loopback.
func RunStream(ctx context.Context, cfg StreamConfig) (*StreamResult, error) {
	if cfg.Size <= 0 {
		cfg.Size = 1 << 30
	}
	if cfg.Rounds <= 0 {
		cfg.Rounds = 1
	}
	if len(cfg.Proxies) == 0 {
		cfg.Proxies = []string{"direct", "nginx", "sextant"}
	}
	for _, name := range cfg.Proxies {
		switch name {
		case "direct", "nginx", "sextant":
		default:
			return nil, fmt.Errorf("bench: stream: unknown proxy %q (direct, nginx, sextant)", name)
		}
	}
	progress := progressf(cfg.Progress)
	// No route timeout: a slow run must not be cut (Envoy's rule for streams).
	env, err := startEnv(ctx, cfg.Binary, cfg.Size, 0, cfg.Proxies, true)
	if err != nil {
		return nil, err
	}
	defer env.stop()
	procs := env.procs
	client := &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 4}}
	rounds := map[string][]StreamProxyResult{}
	for r := range cfg.Rounds {
		for _, name := range cfg.Proxies {
			p := procs[name]
			res, err := streamRound(ctx, client, p, cfg.Size)
			if err != nil {
				return nil, fmt.Errorf("bench: stream through %s: %w", name, err)
			}
			res.Name = name
			progress("round %d %-8s upload %7.0f MB/s  download %7.0f MB/s  RSS +%d MiB", r+1, name, res.UploadMBps, res.DownloadMBps, res.RSSGrowth>>20)
			rounds[name] = append(rounds[name], res)
		}
	}
	out := &StreamResult{Scenario: "stream", BodyBytes: cfg.Size, Rounds: cfg.Rounds, Nproc: nprocs()}
	for _, name := range cfg.Proxies {
		rs := slices.Clone(rounds[name])
		slices.SortFunc(rs, func(a, b StreamProxyResult) int {
			return cmp.Compare(a.UploadMBps+a.DownloadMBps, b.UploadMBps+b.DownloadMBps)
		})
		med := rs[len(rs)/2]
		// The growth reported is the largest of any round: a bound, not a median.
		for _, x := range rounds[name] {
			med.RSSGrowth = max(med.RSSGrowth, x.RSSGrowth)
		}
		out.Proxies = append(out.Proxies, med)
	}
	ratio := func(a, b string, f func(StreamProxyResult) float64) float64 {
		ra, rb := rounds[a], rounds[b]
		var xs []float64
		for i := range min(len(ra), len(rb)) {
			if f(rb[i]) > 0 {
				xs = append(xs, f(ra[i])/f(rb[i]))
			}
		}
		if len(xs) == 0 {
			return 0
		}
		slices.Sort(xs)
		return round3(xs[len(xs)/2])
	}
	out.UploadVsNginx = ratio("sextant", "nginx", func(r StreamProxyResult) float64 { return r.UploadMBps })
	out.DownloadVsNginx = ratio("sextant", "nginx", func(r StreamProxyResult) float64 { return r.DownloadMBps })
	out.LoadAvg = report.LoadAvg()
	return out, nil
}

// streamRound uploads and downloads size bytes through p, sampling the
// RSS of its process (for "direct", the upstream's).
func streamRound(ctx context.Context, client *http.Client, p *process, size int64) (StreamProxyResult, error) {
	var res StreamProxyResult
	base := p.rss()
	res.RSSBytes = base
	var peak atomic.Int64
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(20 * time.Millisecond)
		defer tk.Stop()
		for {
			if r := p.rss(); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-done
	}()
	zero, err := os.Open("/dev/zero") // a body of size bytes, never held
	if err != nil {
		return res, err
	}
	defer zero.Close()
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+p.addr+"/upload", io.LimitReader(zero, size))
	if err != nil {
		return res, err
	}
	req.ContentLength = size
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return res, err
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "n="+strconv.FormatInt(size, 10) {
		return res, fmt.Errorf("upload answered %d %q", resp.StatusCode, b)
	}
	res.UploadMBps = round3(float64(size) / time.Since(t0).Seconds() / 1e6)
	req, err = http.NewRequestWithContext(ctx, "GET", "http://"+p.addr+"/download", nil)
	if err != nil {
		return res, err
	}
	t0 = time.Now()
	resp, err = client.Do(req)
	if err != nil {
		return res, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && n != size {
		err = errors.New("download of " + strconv.FormatInt(n, 10) + " bytes")
	}
	if err != nil {
		return res, err
	}
	res.DownloadMBps = round3(float64(size) / time.Since(t0).Seconds() / 1e6)
	close(stop)
	<-done
	res.RSSGrowth = max(peak.Load()-base, 0)
	return res, nil
}

// progressf prints one line per call to w (nil: nowhere).
func progressf(w io.Writer) func(format string, args ...any) {
	return func(format string, args ...any) {
		if w != nil {
			fmt.Fprintf(w, format+"\n", args...)
		}
	}
}

// env is what the stream scenario's proxies run in: a temporary
// directory, the upstream process answering body bytes, the control plane
// routing every path to it (with timeout; 0: none), and the proxies.
type env struct {
	tmp   string
	up    *process
	cp    *controlPlane
	procs map[string]*process
}

// startEnv starts an env and the named proxies (stream: nginx configured
// not to buffer bodies).
func startEnv(ctx context.Context, bin string, body int64, timeout time.Duration, proxies []string, stream bool) (*env, error) {
	e := &env{procs: map[string]*process{}}
	var err error
	if e.tmp, err = os.MkdirTemp("", "sextant-bench-gateway-"); err != nil {
		return nil, err
	}
	if e.up, err = startProcess(ctx, "upstream", bin, "bench", "gateway-serve", "--mode", "upstream",
		"--listen", "127.0.0.1:0", "--body", strconv.FormatInt(body, 10)); err != nil {
		e.stop()
		return nil, err
	}
	if e.cp, err = startControlPlane(); err != nil {
		e.stop()
		return nil, err
	}
	if err := e.cp.set(proxyConfig{policy: "round_robin", endpoints: []string{e.up.addr}, timeout: timeout}); err != nil {
		e.stop()
		return nil, err
	}
	for _, name := range proxies {
		p, err := startProxy(ctx, name, bin, e.up, e.cp, e.tmp, nil, "", stream)
		if err != nil {
			e.stop()
			return nil, fmt.Errorf("bench: start %s: %w", name, err)
		}
		e.procs[name] = p
	}
	return e, nil
}

// stop stops what startEnv started.
func (e *env) stop() {
	for _, p := range e.procs {
		p.stop()
	}
	e.procs = nil
	if e.cp != nil {
		e.cp.stop()
		e.cp = nil
	}
	if e.up != nil {
		e.up.stop()
		e.up = nil
	}
	os.RemoveAll(e.tmp)
}
