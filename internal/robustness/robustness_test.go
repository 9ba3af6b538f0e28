package robustness

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// The scenarios run real `sextant server` processes built from
// ./cmd/sextant, over the embedded store or the machine's real MariaDB (a
// fresh database per test, reached through a proxy per server that the
// faults cut and stall). Nothing is mocked.

var soak = flag.Duration("soak", 0, "run each random scenario this long instead of a few seconds (docs/robustness.md)")

// duration is how long a random scenario runs: a few seconds in `make
// test`, the -soak flag's duration otherwise.
func duration() time.Duration {
	if *soak > 0 {
		return *soak
	}
	return 3 * time.Second
}

// binDir holds the binary the tests built, removed when they end.
var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var buildBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "sextant-robustness")
	if err != nil {
		return "", err
	}
	binDir = dir
	bin := filepath.Join(dir, "sextant")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/sextant-mesh/sextant/cmd/sextant").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startAll starts the servers, stopped when the test ends.
func startAll(t *testing.T, servers []*Server) {
	t.Helper()
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := s.Start(ctx)
		cancel()
		t.Cleanup(s.Stop)
		if err != nil {
			t.Fatal(err)
		}
	}
}

// embeddedServer is one server on its own embedded store.
func embeddedServer(t *testing.T) []*Server {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Index: 0, Addr: freeAddr(t), Bin: bin, Args: []string{"--data", t.TempDir(), "--xds", "", "--log-level", "warn"}}
	startAll(t, []*Server{s})
	return []*Server{s}
}

// mysqlServers is n servers of one cluster on a fresh MariaDB database,
// each through its own proxy.
func mysqlServers(t *testing.T, n int) ([]*Server, []Link) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	// A robustness scenario never skips: with CI=true mysqltest fails the
	// test when MariaDB cannot be reached (after starting it if it is down).
	t.Setenv("CI", "true")
	name := mysqltest.Database(t)
	var servers []*Server
	var links []Link
	for i := range n {
		p := mysqltest.NewProxy(t, mysqltest.Addr())
		servers = append(servers, &Server{Index: i, Addr: freeAddr(t), Bin: bin, Args: []string{
			"--store", fmt.Sprintf("mysql://root@tcp(%s)/%s", p.Addr(), name), "--xds", "",
			"--cluster-id", fmt.Sprintf("s%d", i), "--cluster-lease", "2s", "--log-level", "warn"}})
		links = append(links, p)
	}
	startAll(t, servers)
	return servers, links
}

// check fails t with every violation the history holds (each names the
// drawing of its history, if any), and returns how many there are.
func check(t *testing.T, h *History, opt CheckOptions) int {
	t.Helper()
	dir, err := os.MkdirTemp("", "sextant-robustness-history")
	if err != nil {
		t.Fatal(err)
	}
	opt.Dir = dir
	bad := Check(h, opt)
	for _, v := range bad {
		t.Error(v)
	}
	if len(bad) > 0 {
		b, err := json.Marshal(struct {
			Ops   []Op
			Pages []FeedPage
		}{h.Ops(), h.Pages()})
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, "history.json"), b, 0o644)
		}
		t.Logf("the recorded history: %s/history.json (%v)", dir, err)
	}
	if len(bad) == 0 {
		os.RemoveAll(dir)
	}
	return len(bad)
}

// runScenario runs a random scenario for a few seconds, or, with -soak,
// runs after runs of 5 s on the same servers (each with ids of its own, so
// that each history is checked alone) until the soak's time is up or one
// fails.
func runScenario(t *testing.T, sc Scenario, lag bool) {
	t.Helper()
	end := time.Now().Add(duration())
	for k := 0; ; k++ {
		sc.Prefix = fmt.Sprintf("r%d-", k)
		sc.Duration = duration()
		if *soak > 0 {
			sc.Duration = min(5*time.Second, max(time.Until(end), time.Second))
		}
		sc.Seed = uint64(time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), sc.Duration+5*time.Minute)
		res, err := Run(ctx, sc)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		unknown := 0
		for _, o := range res.History.Ops() {
			if o.Status == Unknown {
				unknown++
			}
		}
		t.Logf("run %d, seed %d: %d operations (%d of unknown outcome, %d reads behind a write answered before them), %d feed pages, faults: %v",
			k, sc.Seed, res.Ops, unknown, behind(res.History.Ops()), len(res.History.Pages()), res.Faults)
		start := time.Now()
		check(t, res.History, CheckOptions{Lag: lag, Final: res.Final, Timeout: 10 * time.Second})
		t.Logf("checked in %v", time.Since(start).Round(time.Millisecond))
		if t.Failed() || time.Now().After(end) {
			return
		}
	}
}

// behind counts the reads that saw an id at a revision below that of a
// write of it answered before the read was called: how much the lag the
// cluster model allows was exercised (none on one server, or the check
// fails).
func behind(ops []Op) int {
	acked := map[string][]Op{} // id -> its answered writes, by call time
	for _, o := range ops {
		if (o.Kind == Register || o.Kind == Deregister) && o.Status == OK {
			acked[o.ID] = append(acked[o.ID], o)
		}
	}
	n := 0
	for _, o := range ops {
		if o.Kind != Get && o.Kind != List || o.Status != OK {
			continue
		}
		for _, s := range o.Seen {
			for _, w := range acked[s.ID] {
				if w.Return < o.Call && w.Rev > s.Rev {
					n++
					break
				}
			}
		}
	}
	return n
}

// TestEmbeddedKill: one server on the embedded store, killed with -9 and
// restarted on its data while clients write and read.
func TestEmbeddedKill(t *testing.T) {
	servers := embeddedServer(t)
	runScenario(t, Scenario{Servers: servers, Faults: []Fault{KillRestart}, Clients: 6, Services: 2, IDs: 6, Embedded: true}, false)
}

// TestMySQLOneServer: one server on MariaDB, its database cut and stalled.
// (Killed, its feed would restart at the revision it loads: the writes
// lost in between could not be settled, and every one of them is a fork
// in the check's search; TestCluster kills servers on MariaDB, where the
// others' feeds cover the gap.)
func TestMySQLOneServer(t *testing.T) {
	servers, links := mysqlServers(t, 1)
	runScenario(t, Scenario{Servers: servers, Links: links, Faults: []Fault{DBCut, DBStall}, Clients: 6, Services: 2, IDs: 6}, false)
}

// TestCluster: three servers on MariaDB, each killed and restarted, the
// database cut and stalled, one server's link stalled alone (a slow
// follower).
func TestCluster(t *testing.T) {
	servers, links := mysqlServers(t, 3)
	runScenario(t, Scenario{Servers: servers, Links: links, Faults: []Fault{KillRestart, DBCut, DBStall, SlowFollower}, Clients: 6, Services: 2, IDs: 6}, true)
}
