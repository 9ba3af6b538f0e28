package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"

	"github.com/sextant-mesh/sextant/internal/cluster"
	"github.com/sextant-mesh/sextant/internal/store/mysql/mysqltest"
)

// The cluster tests run real server processes over one database of the
// machine's real MariaDB (a fresh database per test, dropped after it).
// Database loss is a TCP proxy the test cuts and restores: restarting the
// shared MariaDB would disturb everyone else using it.

type clusterServer struct {
	t       *testing.T
	bin     string
	id      string
	addr    string
	xdsAddr string // "": no xDS
	url     string
	args    []string
	cmd     *exec.Cmd
	logw    *lockedWriter // the server's stderr
	started bool          // once: a restart keeps its addresses
}

func (s *clusterServer) base() string { return "http://" + s.addr }

// start runs the server and waits until /readyz answers 200. A port
// freeAddr found free may be taken before the server binds it (another
// test's listener, an outgoing connection's local port, on a busy
// machine): the first start then takes new addresses, up to three times.
func (s *clusterServer) start() {
	t := s.t
	t.Helper()
	for attempt := 1; ; attempt++ {
		inUse, err := s.tryStart()
		if err == nil {
			s.started = true
			return
		}
		if !inUse || s.started || attempt == 3 {
			t.Fatal(err)
		}
		s.addr = freeAddr(t)
		if s.xdsAddr != "" {
			s.xdsAddr = freeAddr(t)
		}
	}
}

// readyProbe bounds each readiness probe: a port another process took may
// accept and never answer.
var readyProbe = &http.Client{Timeout: 2 * time.Second}

// tryStart starts the server once; inUse: it could not bind its address.
func (s *clusterServer) tryStart() (inUse bool, err error) {
	args := []string{"server", "--store", s.url, "--http", s.addr, "--xds", s.xdsAddr, "--cluster-id", s.id,
		"--log-level", "warn", "--cluster-lease", "2s"}
	s.cmd = exec.Command(s.bin, append(args, s.args...)...)
	s.logw = &lockedWriter{w: &bytes.Buffer{}}
	s.cmd.Stderr = s.logw
	if err := s.cmd.Start(); err != nil {
		return false, err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		resp, err := readyProbe.Get(s.base() + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return false, nil
			}
		}
		if s.logw.contains("address already in use") {
			s.kill()
			return true, fmt.Errorf("server %s:\n%s", s.id, s.logw.String())
		}
	}
	s.kill()
	return false, fmt.Errorf("server %s not ready in 30s:\n%s", s.id, s.logw.String())
}

func (s *clusterServer) kill() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGKILL)
		s.cmd.Wait()
	}
}

func (s *clusterServer) stop() {
	if s.cmd != nil && s.cmd.ProcessState == nil {
		s.cmd.Process.Signal(syscall.SIGTERM)
		s.cmd.Wait()
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) contains(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.w.(*bytes.Buffer)
	return ok && bytes.Contains(b.Bytes(), []byte(sub))
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.w)
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if os.Getenv("SEXTANT_TEST_SERVER_LOGS") != "" {
		os.Stderr.Write(p)
	}
	return l.w.Write(p)
}

// startCluster starts n servers on a fresh database, reached at dbAddr ("":
// directly).
func startCluster(t *testing.T, n int, dbAddr string, args ...string) ([]*clusterServer, *sql.DB) {
	t.Helper()
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	name := mysqltest.Database(t)
	if dbAddr == "" {
		dbAddr = mysqltest.Addr()
	}
	url := fmt.Sprintf("mysql://root@tcp(%s)/%s", dbAddr, name)
	var servers []*clusterServer
	for i := range n {
		s := &clusterServer{t: t, bin: bin, id: fmt.Sprintf("s%d", i+1), addr: freeAddr(t), url: url, args: args}
		s.start()
		t.Cleanup(s.stop)
		servers = append(servers, s)
	}
	c := mysqldrv.NewConfig()
	c.User, c.Net, c.Addr, c.DBName = "root", "tcp", mysqltest.Addr(), name
	conn, err := mysqldrv.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { db.Close() })
	return servers, db
}

var clusterClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}

type httpAnswer struct {
	status int
	header http.Header
	body   []byte
}

func call(method, url string, body any) (httpAnswer, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, r)
	if err != nil {
		return httpAnswer{}, err
	}
	resp, err := clusterClient.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpAnswer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

type listedInstance struct {
	ID       string            `json:"id"`
	Service  string            `json:"service"`
	Port     int               `json:"port"`
	Revision int64             `json:"revision"`
	Healthy  bool              `json:"healthy"`
	Metadata map[string]string `json:"metadata"`
}

// listAll pages through every instance a server holds: id -> revision.
func listAll(t *testing.T, s *clusterServer) (map[string]listedInstance, int64) {
	t.Helper()
	out := map[string]listedInstance{}
	token := ""
	var rev int64
	for range 1000 {
		a, err := call("GET", s.base()+"/v1/instances?limit=10000&page_token="+token, nil)
		if err != nil || a.status != 200 {
			t.Fatalf("list on %s: %v %d %s", s.id, err, a.status, a.body)
		}
		var page struct {
			Revision      int64            `json:"revision"`
			Instances     []listedInstance `json:"instances"`
			NextPageToken string           `json:"next_page_token"`
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			t.Fatal(err)
		}
		if token == "" {
			rev = page.Revision
		}
		for _, in := range page.Instances {
			out[in.ID] = in
		}
		if token = page.NextPageToken; token == "" {
			break
		}
	}
	return out, rev
}

// dbRows reads sx_instance: id -> revision, and the sequence's revision.
func dbRows(t *testing.T, db *sql.DB) (map[string]int64, int64) {
	t.Helper()
	rows, err := db.Query("SELECT id, revision FROM sx_instance")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var id string
		var rev int64
		if err := rows.Scan(&id, &rev); err != nil {
			t.Fatal(err)
		}
		out[id] = rev
	}
	var head int64
	if err := db.QueryRow("SELECT revision FROM sx_sequence WHERE id = 1").Scan(&head); err != nil {
		t.Fatal(err)
	}
	return out, head
}

// waitCaughtUp waits until every server reports the database's revision.
func waitCaughtUp(t *testing.T, servers []*clusterServer, head int64) {
	t.Helper()
	for _, s := range servers {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			a, err := call("GET", s.base()+"/v1/namespaces", nil)
			rev, _ := strconv.ParseInt(a.header.Get("X-Sextant-Revision"), 10, 64)
			if err == nil && a.status == 200 && rev >= head {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not reach revision %d: %v %s", s.id, head, err, a.header.Get("X-Sextant-Revision"))
			}
		}
	}
}

// checkEqualsDB: every server's full listing is the database's rows,
// revision for revision.
func checkEqualsDB(t *testing.T, servers []*clusterServer, db *sql.DB) map[string]int64 {
	t.Helper()
	want, head := dbRows(t, db)
	waitCaughtUp(t, servers, head)
	for _, s := range servers {
		got, _ := listAll(t, s)
		if len(got) != len(want) {
			t.Fatalf("%s lists %d instances, the database holds %d", s.id, len(got), len(want))
		}
		for id, rev := range want {
			if got[id].Revision != rev {
				t.Fatalf("%s has %s at revision %d, the database at %d", s.id, id, got[id].Revision, rev)
			}
		}
	}
	return want
}

// ack is one acknowledged write.
type ack struct {
	rev    int64
	ids    []string
	delete bool
	// unknown: a deregistration that was not answered 200 or 404 (cut
	// connection, 503): the database may or may not have committed it.
	unknown bool
}

// writer drives one server with a mix of single registers, long batch
// registers and deregisters until ctx ends, recording what was
// acknowledged. Answers other than 200 are counted by status.
func writer(ctx context.Context, s *clusterServer, w int, acks chan<- ack, statuses *sync.Map) {
	rnd := rand.New(rand.NewPCG(uint64(w), 7))
	var mine []string
	for i := 0; ctx.Err() == nil && i < 100000; i++ {
		switch k := rnd.IntN(20); {
		case k < 2 && len(mine) > 0: // deregister
			id := mine[rnd.IntN(len(mine))]
			a, err := call("DELETE", s.base()+"/v1/instances/"+id, nil)
			if err != nil || a.status != 200 && a.status != 404 {
				acks <- ack{ids: []string{id}, delete: true, unknown: true}
			}
			if err != nil {
				continue
			}
			countStatus(statuses, a.status)
			if a.status == 200 {
				var r struct{ Revision int64 }
				json.Unmarshal(a.body, &r)
				acks <- ack{rev: r.Revision, ids: []string{id}, delete: true}
				mine = slices.DeleteFunc(mine, func(x string) bool { return x == id })
			}
		default:
			n := 1
			if k == 19 {
				n = 200 + rnd.IntN(800) // a long transaction among the short ones
			}
			var batch []map[string]any
			var ids []string
			for j := range n {
				id := fmt.Sprintf("%s-w%d-%d-%d", s.id, w, i, j)
				ids = append(ids, id)
				batch = append(batch, map[string]any{"id": id, "service": fmt.Sprintf("svc%d", rnd.IntN(5)), "host": "10.0.0.1",
					"port": 1 + rnd.IntN(60000), "metadata": map[string]string{"w": fmt.Sprint(w), "zone": fmt.Sprintf("z%d", j%3)}})
			}
			a, err := call("POST", s.base()+"/v1/instances", map[string]any{"instances": batch})
			if err != nil {
				continue
			}
			countStatus(statuses, a.status)
			if a.status == 200 {
				var r struct{ Revision int64 }
				json.Unmarshal(a.body, &r)
				acks <- ack{rev: r.Revision, ids: ids}
				mine = append(mine, ids...)
			}
		}
	}
}

// checkAcked reads the writers' acks and fails unless the database holds
// every acknowledged write: an acknowledged register at its revision or
// later, an acknowledged deregister as absent. An id with a deregistration
// of unknown outcome may be either (ids are never registered twice).
// It returns how many writes were acknowledged.
func checkAcked(t *testing.T, acks <-chan ack, db *sql.DB) int {
	t.Helper()
	final := map[string]ack{} // id -> its last acknowledged write
	unknown := map[string]bool{}
	n := 0
	for ak := range acks {
		if ak.unknown {
			for _, id := range ak.ids {
				unknown[id] = true
			}
			continue
		}
		n++
		for _, id := range ak.ids {
			if prev, ok := final[id]; !ok || prev.rev < ak.rev {
				final[id] = ak
			}
		}
	}
	rows, _ := dbRows(t, db)
	for id, ak := range final {
		rev, ok := rows[id]
		if !ak.delete && unknown[id] {
			if ok && rev < ak.rev {
				t.Fatalf("acknowledged %+v of %s: the database has revision %d", ak, id, rev)
			}
			continue
		}
		if ak.delete && ok || !ak.delete && (!ok || rev < ak.rev) {
			t.Fatalf("acknowledged %+v of %s: the database has revision %d (present %v)", ak, id, rev, ok)
		}
	}
	return n
}

func countStatus(m *sync.Map, status int) {
	v, _ := m.LoadOrStore(status, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// feedFollower follows /v1/changes on s from since until stop is closed
// and it has caught up to until, and returns the changes in order.
type feedChange struct {
	Revision int64           `json:"revision"`
	Op       string          `json:"op"`
	ID       string          `json:"id"`
	Instance *listedInstance `json:"instance"`
}

func followChanges(ctx context.Context, s *clusterServer, since int64, until func() int64) ([]feedChange, error) {
	var out []feedChange
	for {
		a, err := call("GET", fmt.Sprintf("%s/v1/changes?since=%d&limit=10000", s.base(), since), nil)
		if err != nil {
			return out, err
		}
		if a.status != 200 {
			return out, fmt.Errorf("changes since %d: %d %s", since, a.status, a.body)
		}
		var page struct {
			Revision int64        `json:"revision"`
			Changes  []feedChange `json:"changes"`
			More     bool         `json:"more"`
		}
		if err := json.Unmarshal(a.body, &page); err != nil {
			return out, err
		}
		out = append(out, page.Changes...)
		since = page.Revision
		if page.More {
			continue
		}
		if u := until(); u > 0 && since >= u {
			return out, nil
		}
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestClusterServersAgree: three servers on one database, concurrent
// writers on all three (short and long transactions interleaved); a
// /v1/changes follower on B reproduces every write made through A and C,
// none missed, none twice, in revision order; afterwards every server's
// listing equals the database's rows, revision for revision.
func TestClusterServersAgree(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	servers, db := startCluster(t, 3, "")
	a, b, c := servers[0], servers[1], servers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	acks := make(chan ack, 1<<16)
	var statuses sync.Map
	var until struct {
		sync.Mutex
		rev int64
	}
	feedDone := make(chan []feedChange, 1)
	go func() {
		out, err := followChanges(context.Background(), b, 0, func() int64 { until.Lock(); defer until.Unlock(); return until.rev })
		if err != nil {
			t.Errorf("changes follower: %v", err)
		}
		feedDone <- out
	}()
	var wg sync.WaitGroup
	for w := range 6 {
		s := []*clusterServer{a, c, b}[w%3]
		wg.Add(1)
		go func() { defer wg.Done(); writer(ctx, s, w, acks, &statuses) }()
	}
	wg.Wait()
	close(acks)
	var all []ack // acknowledged writes
	for ak := range acks {
		if !ak.unknown {
			all = append(all, ak)
		}
	}
	if len(all) < 50 {
		t.Fatalf("only %d writes acknowledged", len(all))
	}
	want := checkEqualsDB(t, servers, db)
	_, head := dbRows(t, db)
	until.Lock()
	until.rev = head
	until.Unlock()
	feed := <-feedDone

	// In revision order, each (revision, id) once.
	seen := map[string]bool{}
	state := map[string]int64{}
	for i, ch := range feed {
		if i > 0 && ch.Revision < feed[i-1].Revision {
			t.Fatalf("change %d at revision %d after %d", i, ch.Revision, feed[i-1].Revision)
		}
		id := ch.ID
		if ch.Instance != nil {
			id = ch.Instance.ID
		}
		k := fmt.Sprintf("%d/%s", ch.Revision, id)
		if seen[k] {
			t.Fatalf("change %s twice", k)
		}
		seen[k] = true
		if ch.Op == "delete" {
			delete(state, id)
		} else {
			state[id] = ch.Revision
		}
	}
	// Every acknowledged write, through whichever server, is there.
	for _, ak := range all {
		for _, id := range ak.ids {
			if !seen[fmt.Sprintf("%d/%s", ak.rev, id)] {
				t.Fatalf("acknowledged write of %s at revision %d missing from B's change feed", id, ak.rev)
			}
		}
	}
	if len(state) != len(want) {
		t.Fatalf("the feed reproduces %d instances, the database holds %d", len(state), len(want))
	}
	for id, rev := range want {
		if state[id] != rev {
			t.Fatalf("the feed has %s at %d, the database at %d", id, state[id], rev)
		}
	}
	t.Logf("%d writes acknowledged, %d changes followed on B, %d instances, revision %d", len(all), len(feed), len(want), head)

	// Deregistered through one server and at once registered again,
	// unchanged, through another: the second must not take the instance
	// for unchanged on a catalog that has not seen the first yet.
	inst := map[string]any{"id": "bounce", "service": "bounce", "host": "10.0.0.9", "port": 9}
	for i := range 20 {
		from, to := servers[i%3], servers[(i+1)%3]
		if r, err := call("POST", from.base()+"/v1/instances", inst); err != nil || r.status != 200 {
			t.Fatalf("register: %v %d", err, r.status)
		}
		if r, err := call("DELETE", from.base()+"/v1/instances/bounce", nil); err != nil || r.status != 200 {
			t.Fatalf("deregister: %v %d %s", err, r.status, r.body)
		}
		if r, err := call("POST", to.base()+"/v1/instances", inst); err != nil || r.status != 200 {
			t.Fatalf("register again: %v %d", err, r.status)
		}
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM sx_instance WHERE id = 'bounce'").Scan(&n); err != nil || n != 1 {
			t.Fatalf("round %d: registered again through %s after a deregister through %s, acknowledged, but the database holds %d (%v)", i, to.id, from.id, n, err)
		}
	}
}

// TestClusterKillOneServer: kill -9 of one server under load; every
// acknowledged write is in the database and on the survivors; the killed
// server restarts, catches up and serves the same state.
func TestClusterKillOneServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	servers, db := startCluster(t, 3, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acks := make(chan ack, 1<<16)
	var statuses sync.Map
	var wg sync.WaitGroup
	wctx, stopWriters := context.WithCancel(ctx)
	for w := range 6 {
		s := servers[w%3]
		wg.Add(1)
		go func() { defer wg.Done(); writer(wctx, s, w, acks, &statuses) }()
	}
	time.Sleep(1500 * time.Millisecond)
	servers[1].kill()
	time.Sleep(1500 * time.Millisecond)
	stopWriters()
	wg.Wait()
	close(acks)
	n := checkAcked(t, acks, db)
	checkEqualsDB(t, []*clusterServer{servers[0], servers[2]}, db)
	servers[1].start()
	checkEqualsDB(t, servers, db)
	t.Logf("%d writes acknowledged around the kill", n)
}

// TestClusterTTLOwnerDies: heartbeating instances whose judge is killed
// stay healthy (their new judge gives them a grace period); once they stop
// heartbeating they turn unhealthy on every survivor within 3 x ttl plus
// the documented bound.
func TestClusterTTLOwnerDies(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three servers over MariaDB")
	}
	servers, _ := startCluster(t, 3, "")
	const ttl = 2
	var ids []string
	var batch []map[string]any
	for i := range 60 {
		id := fmt.Sprintf("ttl-%02d", i)
		ids = append(ids, id)
		batch = append(batch, map[string]any{"id": id, "service": "beating", "host": "10.0.0.2", "port": 1000 + i, "ttl_seconds": ttl})
	}
	if a, err := call("POST", servers[0].base()+"/v1/instances", map[string]any{"instances": batch}); err != nil || a.status != 200 {
		t.Fatalf("register: %v %d %s", err, a.status, a.body)
	}
	owners := map[string]int{}
	for _, id := range ids {
		owners[cluster.OwnerOf([]string{"s1", "s2", "s3"}, id)]++
	}
	victim := servers[1] // s2
	if owners["s2"] == 0 {
		t.Fatalf("s2 judges none of the instances: %v", owners)
	}
	// Heartbeat every instance every 300ms, each beat to a different
	// server, and watch their health on the survivors.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var live sync.Map
	for _, s := range servers {
		live.Store(s, true)
	}
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		for i := 0; ctx.Err() == nil; i++ {
			s := servers[i%3]
			if v, _ := live.Load(s); v == true {
				call("POST", s.base()+"/v1/heartbeats", map[string]any{"ids": ids})
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	unhealthy := func(s *clusterServer) int {
		a, err := call("GET", s.base()+"/v1/namespaces/default/services/beating/instances", nil)
		if err != nil || a.status != 200 {
			t.Fatalf("query %s: %v %d", s.id, err, a.status)
		}
		var r struct{ Instances []listedInstance }
		json.Unmarshal(a.body, &r)
		n := 0
		for _, in := range r.Instances {
			if !in.Healthy {
				n++
			}
		}
		return n
	}
	time.Sleep(1500 * time.Millisecond)
	live.Store(victim, false)
	victim.kill()
	// The lease is 2s: s2's instances move within about 3s. Watch for 6s.
	survivors := []*clusterServer{servers[0], servers[2]}
	for end := time.Now().Add(6 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for _, s := range survivors {
			if n := unhealthy(s); n > 0 {
				t.Fatalf("%d heartbeating instances unhealthy on %s after their judge died", n, s.id)
			}
		}
	}
	cancel()
	<-beating
	stopped := time.Now()
	// Documented bound (docs/cluster.md): 3 x ttl after the last beat, plus
	// the relay and poll intervals, plus the flip's commit and apply: 2s.
	limit := 3*ttl*time.Second + 2*time.Second
	for _, s := range survivors {
		for unhealthy(s) < len(ids) {
			if time.Since(stopped) > limit+5*time.Second {
				t.Fatalf("%s: %d of %d unhealthy %v after the heartbeats stopped", s.id, unhealthy(s), len(ids), time.Since(stopped))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	took := time.Since(stopped)
	t.Logf("all %d unhealthy on both survivors %v after the last heartbeat (judges before: %v)", len(ids), took, owners)
	if took > limit {
		// The machine is shared: past the documented bound is reported,
		// past it by 5 s more fails (above).
		t.Logf("turning unhealthy took %v, more than the documented 3 x ttl + 2s = %v", took, limit)
	}
}

// TestClusterDatabaseLoss: the database goes away under load (a proxy cut
// between the servers and MariaDB) and comes back. Writes meanwhile answer
// 503 unavailable; reads are served, marked stale; no acknowledged write is
// lost; the servers recover by themselves and agree with the database.
func TestClusterDatabaseLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers over MariaDB")
	}
	proxy := mysqltest.NewProxy(t, mysqltest.Addr())
	servers, db := startCluster(t, 2, proxy.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acks := make(chan ack, 1<<16)
	var statuses sync.Map
	var wg sync.WaitGroup
	wctx, stopWriters := context.WithCancel(ctx)
	for w := range 4 {
		s := servers[w%2]
		wg.Add(1)
		go func() { defer wg.Done(); writer(wctx, s, w, acks, &statuses) }()
	}
	time.Sleep(time.Second)
	proxy.Cut()
	var staleRead, unavailable, staleReady bool
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if a, err := call("GET", servers[0].base()+"/readyz", nil); err == nil && a.status == 200 && strings.Contains(string(a.body), `"stale"`) {
			staleReady = true
		}
		a, err := call("GET", servers[0].base()+"/v1/namespaces/default/services/svc1/instances", nil)
		if err == nil && a.status == 200 && a.header.Get("X-Sextant-Stale") != "" {
			staleRead = true
		}
		a, err = call("POST", servers[1].base()+"/v1/instances", map[string]any{"service": "probe", "host": "10.9.9.9", "port": 9})
		if err == nil && a.status == 503 && strings.Contains(string(a.body), `"unavailable"`) {
			unavailable = true
		}
	}
	proxy.Restore()
	time.Sleep(2 * time.Second)
	stopWriters()
	wg.Wait()
	close(acks)
	if !staleRead || !unavailable || !staleReady {
		t.Fatalf("without the database: a stale-marked read %v, a 503 unavailable write %v, /readyz 200 stale %v", staleRead, unavailable, staleReady)
	}
	n := checkAcked(t, acks, db)
	checkEqualsDB(t, servers, db)
	var codes []string
	statuses.Range(func(k, v any) bool {
		codes = append(codes, fmt.Sprintf("%v:%d", k, v.(*atomic.Int64).Load()))
		return true
	})
	sort.Strings(codes)
	// After recovery both servers take writes again.
	for _, s := range servers {
		if a, err := call("POST", s.base()+"/v1/instances", map[string]any{"service": "after", "host": "10.8.8.8", "port": 8}); err != nil || a.status != 200 {
			t.Fatalf("%s after the database came back: %v %d %s", s.id, err, a.status, a.body)
		}
	}
	t.Logf("%d writes acknowledged; answers by status %v", n, codes)
}

// callAuth is call with a bearer token and a content type.
func callAuth(method, url, token, ctype, body string) (httpAnswer, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return httpAnswer{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := clusterClient.Do(req)
	if err != nil {
		return httpAnswer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return httpAnswer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// TestClusterACLAndConfig: the other kinds go through the same stream. A
// token bootstrapped on A works on B; a second bootstrap on B is refused
// (the condition is checked in the database, not in B's catalog); routing
// config applied on B is served by A.
func TestClusterACLAndConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("runs servers over MariaDB")
	}
	servers, _ := startCluster(t, 2, "", "--acl", "--audit-log", "off")
	a, b := servers[0], servers[1]
	boot, err := callAuth("POST", a.base()+"/v1/acl/bootstrap", "", "application/json", `{"description":"cluster test"}`)
	if err != nil || boot.status != 200 {
		t.Fatalf("bootstrap on A: %v %d %s", err, boot.status, boot.body)
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := json.Unmarshal(boot.body, &tok); err != nil || tok.Secret == "" {
		t.Fatalf("bootstrap answer %s: %v", boot.body, err)
	}
	again, err := callAuth("POST", b.base()+"/v1/acl/bootstrap", "", "application/json", `{}`)
	if err != nil || again.status == 200 {
		t.Fatalf("a second bootstrap on B: %v %d %s", err, again.status, again.body)
	}
	const cfg = `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: orders}
spec:
  host: orders
  subsets: [{name: v1, labels: {version: v1}}]
`
	var applied httpAnswer
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if applied, err = callAuth("POST", b.base()+"/v1/config:apply", tok.Secret, "application/yaml", cfg); err == nil && applied.status == 200 || time.Now().After(end) {
			break
		}
	}
	if err != nil || applied.status != 200 {
		t.Fatalf("config apply on B with A's token: %v %d %s", err, applied.status, applied.body)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got, err := callAuth("GET", a.base()+"/v1/config/DestinationRule/default/orders", tok.Secret, "", "")
		if err == nil && got.status == 200 && strings.Contains(string(got.body), "orders") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("config written on B not served by A: %v %d %s", err, got.status, got.body)
		}
	}
	if reg, err := callAuth("POST", a.base()+"/v1/instances", "", "application/json", `{"service":"s","host":"10.0.0.1","port":1}`); err != nil || reg.status != 401 {
		t.Fatalf("an anonymous write with ACLs on: %v %d", err, reg.status)
	}
}

// TestClusterXDSAddressInUse: a cluster server whose --xds address is
// taken fails before it opens the store, so before it joins the cluster:
// it leaves no member row behind for the others to wait out. (It used to
// open the store and join, fail, close the store, and then fail to leave,
// when its first renewal had landed.)
func TestClusterXDSAddressInUse(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	name := mysqltest.Database(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cmd := exec.Command(bin, "server", "--store", fmt.Sprintf("mysql://root@tcp(%s)/%s", mysqltest.Addr(), name),
		"--http", freeAddr(t), "--xds", taken.Addr().String(), "--cluster-id", "s1", "--cluster-lease", "2s", "--log-level", "warn")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "listen on "+taken.Addr().String()) {
		t.Fatalf("server with its --xds address taken: %v\n%s", err, out)
	}
	c := mysqldrv.NewConfig()
	c.User, c.Net, c.Addr = "root", "tcp", mysqltest.Addr()
	conn, err := mysqldrv.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	// The store's schema is created when it opens: no table, no member row.
	var tables int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = ?", name).Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if tables != 0 {
		t.Fatalf("the failed start opened the store (%d tables) before it found its --xds address taken\n%s", tables, out)
	}
}

// TestClusterServerTakesAnotherPort: a first start whose port was taken
// meanwhile (as freeAddr's can be on a busy machine) starts on new
// addresses instead of failing.
func TestClusterServerTakesAnotherPort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a server over MariaDB")
	}
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	s := &clusterServer{t: t, bin: bin, id: "s1", addr: taken.Addr().String(), url: mysqltest.URL(t, "")}
	s.start()
	defer s.stop()
	if s.addr == taken.Addr().String() {
		t.Fatal("started on the taken address")
	}
	if resp, err := readyProbe.Get(s.base() + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz: %v", err)
	}
}
