package httpapi_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/acl"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
)

// TestKVRoutes: the KV store through Sextant's API, as the console uses
// it: put, list without values, get with its value in base64, a write
// conditional on ?revision that fails with 409 saying the key moved on,
// the key's history newest first (deletes included), and a blocking list
// woken by a put under its prefix. Guarded as the Consul API's KV:
// kv:read and kv:write of the namespace, nothing else grants them.
func TestKVRoutes(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.must("POST", "/v1/acl/policies", `{"name":"a-kv","rules":[{"namespace":"a","kv":"write"}]}`, w.admin.Secret, nil)
	w.must("POST", "/v1/acl/policies", `{"name":"a-kv-read","rules":[{"namespace":"a","kv":"read"}]}`, w.admin.Secret, nil)
	kvA, kvRead := w.token("a-kv"), w.token("a-kv-read")

	type put struct{ Revision int64 }
	var p1, p2 put
	w.must("PUT", "/v1/namespaces/a/kv/app/db/url", `{"value":"`+b64("postgres://one")+`","flags":7}`, kvA.Secret, &p1)
	w.must("PUT", "/v1/namespaces/a/kv/app/db/url?revision="+strconv.FormatInt(p1.Revision, 10), `{"value":"`+b64("postgres://two")+`"}`, kvA.Secret, &p2)
	w.must("PUT", "/v1/namespaces/a/kv/app/name", `{"value":"`+b64("shop")+`"}`, kvA.Secret, nil)
	w.must("PUT", "/v1/namespaces/a/kv/other", `{}`, kvA.Secret, nil)

	// A write at the revision first loaded fails: someone wrote since.
	a := w.do("PUT", "/v1/namespaces/a/kv/app/db/url?revision="+strconv.FormatInt(p1.Revision, 10), `{"value":"`+b64("mine")+`"}`, kvA.Secret)
	if a.status != 409 || !strings.Contains(a.body, "was written since revision "+strconv.FormatInt(p1.Revision, 10)) || !strings.Contains(a.body, "now at revision "+strconv.FormatInt(p2.Revision, 10)) {
		t.Errorf("a stale write: %d %s; want 409 naming both revisions", a.status, a.body)
	}
	if a := w.do("PUT", "/v1/namespaces/a/kv/app/name?revision=0", `{}`, kvA.Secret); a.status != 409 || !strings.Contains(a.body, "already exists") {
		t.Errorf("a create of an existing key: %d %s", a.status, a.body)
	}

	var list struct {
		Revision int64
		Entries  []struct {
			Key            string
			Value          *string
			Size           int
			ModifyRevision int64 `json:"modify_revision"`
		}
	}
	w.must("GET", "/v1/namespaces/a/kv?prefix=app/", "", kvRead.Secret, &list)
	if len(list.Entries) != 2 || list.Entries[0].Key != "app/db/url" || list.Entries[0].Size != len("postgres://two") ||
		list.Entries[0].Value != nil || list.Entries[0].ModifyRevision != p2.Revision || list.Entries[1].Key != "app/name" {
		t.Errorf("the list under app/: %+v", list)
	}
	var page struct {
		Entries []struct{ Key string }
		Next    string `json:"next_page_token"`
	}
	w.must("GET", "/v1/namespaces/a/kv?limit=2", "", kvRead.Secret, &page)
	if len(page.Entries) != 2 || page.Next != "app/name" {
		t.Errorf("the first page of 2: %+v", page)
	}
	next := page.Next
	page.Next = ""
	w.must("GET", "/v1/namespaces/a/kv?limit=2&page_token="+next, "", kvRead.Secret, &page)
	if len(page.Entries) != 1 || page.Entries[0].Key != "other" || page.Next != "" {
		t.Errorf("the second page: %+v", page)
	}

	var got struct {
		Key   string
		Value []byte
		Flags uint64
	}
	w.must("GET", "/v1/namespaces/a/kv/app/db/url", "", kvRead.Secret, &got)
	if string(got.Value) != "postgres://two" || got.Flags != 0 {
		t.Errorf("get: %+v", got)
	}

	w.must("DELETE", "/v1/namespaces/a/kv/app/db/url?revision="+strconv.FormatInt(p2.Revision, 10), "", kvA.Secret, nil)
	w.must("PUT", "/v1/namespaces/a/kv/app/db/url?revision=0", `{"value":"`+b64("postgres://three")+`"}`, kvA.Secret, nil)
	var hist struct {
		Versions []struct {
			Revision  int64
			Committed *time.Time
			Deleted   bool
			Value     []byte
			Flags     uint64
		}
		Kept int
	}
	w.must("GET", "/v1/namespaces/a/kv-history/app/db/url", "", kvRead.Secret, &hist)
	var seq []string
	for _, v := range hist.Versions {
		if v.Committed == nil || time.Since(*v.Committed) > time.Minute {
			t.Errorf("version %d committed at %v", v.Revision, v.Committed)
		}
		if v.Deleted {
			seq = append(seq, "deleted")
		} else {
			seq = append(seq, string(v.Value))
		}
	}
	if strings.Join(seq, ",") != "postgres://three,deleted,postgres://two,postgres://one" || hist.Versions[3].Flags != 7 || hist.Kept != 16 {
		t.Errorf("history: %q (flags of the first %d, kept %d)", seq, hist.Versions[len(hist.Versions)-1].Flags, hist.Kept)
	}

	// A blocking list wakes on a put under its prefix.
	w.must("GET", "/v1/namespaces/a/kv?prefix=app/", "", kvRead.Secret, &list)
	done := make(chan answer, 1)
	req, _ := http.NewRequest("GET", w.base+"/v1/namespaces/a/kv?prefix=app/&wait=20s&index="+strconv.FormatInt(list.Revision, 10), nil)
	req.Header.Set("Authorization", "Bearer "+kvRead.Secret)
	go func() {
		resp, err := w.hc.Do(req)
		if err != nil {
			done <- answer{body: err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		done <- answer{status: resp.StatusCode, body: string(b)}
	}()
	time.Sleep(100 * time.Millisecond)
	w.must("PUT", "/v1/namespaces/a/kv/app/new", `{}`, kvA.Secret, nil)
	select {
	case a := <-done:
		if a.status != 200 || !strings.Contains(a.body, `"app/new"`) {
			t.Errorf("the blocking list: %d %s", a.status, a.body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the blocking list did not wake on a put under its prefix")
	}

	// A key with an empty segment, its slashes escaped: itself, not a
	// cleaned path's key.
	w.must("PUT", "/v1/namespaces/a/kv/odd%2F%2Fkey", `{"value":"`+b64("x")+`"}`, kvA.Secret, nil)
	var odd struct{ Key string }
	w.must("GET", "/v1/namespaces/a/kv/odd%2F%2Fkey", "", kvRead.Secret, &odd)
	if odd.Key != "odd//key" {
		t.Errorf("odd%%2F%%2Fkey read as %q", odd.Key)
	}

	for _, c := range []struct {
		who, token, method, path, body string
		want                           int
	}{
		{"instances and config writer", w.writeA.Secret, "GET", "/v1/namespaces/a/kv", "", 403},
		{"reader writes", kvRead.Secret, "PUT", "/v1/namespaces/a/kv/x", `{}`, 403},
		{"reader, history", kvRead.Secret, "GET", "/v1/namespaces/a/kv-history/app/name", "", 200},
		{"other namespace", kvA.Secret, "GET", "/v1/namespaces/b/kv/x", "", 403},
		{"anonymous", "", "GET", "/v1/namespaces/a/kv", "", 401},
		{"missing key", kvRead.Secret, "GET", "/v1/namespaces/a/kv/none", "", 404},
		{"no history", kvRead.Secret, "GET", "/v1/namespaces/a/kv-history/none", "", 404},
		{"bad revision", kvA.Secret, "PUT", "/v1/namespaces/a/kv/x?revision=-1", `{}`, 400},
		{"unknown field", kvA.Secret, "PUT", "/v1/namespaces/a/kv/x", `{"val":"eA=="}`, 400},
		{"not base64", kvA.Secret, "PUT", "/v1/namespaces/a/kv/x", `{"value":"%%%"}`, 400},
		{"bad namespace", kvA.Secret, "GET", "/v1/namespaces/A_B/kv", "", 400},
		{"bad limit", kvA.Secret, "GET", "/v1/namespaces/a/kv?limit=0", "", 400},
		{"too large", kvA.Secret, "PUT", "/v1/namespaces/a/kv/big", `{"value":"` + b64(strings.Repeat("v", 512*1024+1)) + `"}`, 413},
	} {
		if a := w.do(c.method, c.path, c.body, c.token); a.status != c.want {
			t.Errorf("%s: %s %s: %d %s, want %d", c.who, c.method, c.path, a.status, a.body, c.want)
		}
	}
}

func b64(s string) string { b, _ := json.Marshal([]byte(s)); return strings.Trim(string(b), `"`) }

// TestKVListWaitPastCompaction: a blocking list whose index is the KV
// table's revision still waits when other kinds' changes have since
// pushed that revision out of the catalog's change log (a registry
// busier than its KV store): it answered at once, with the same index,
// so a client following it spun.
func TestKVListWaitPastCompaction(t *testing.T) {
	s := apitest.StartWith(t, apitest.Options{LogSize: 16})
	c := caller{t: t, base: s.URL, hc: s.Client()}
	var p struct{ Revision int64 }
	c.must("PUT", "/v1/namespaces/a/kv/k", `{}`, "", &p)
	for i := range 40 {
		c.must("POST", "/v1/instances", fmt.Sprintf(`{"id":"i%d","namespace":"a","service":"s","host":"10.0.0.9","port":80}`, i), "", nil)
	}
	start := time.Now()
	var list struct{ Revision int64 }
	c.must("GET", "/v1/namespaces/a/kv?wait=3s&index="+strconv.FormatInt(p.Revision, 10), "", "", &list)
	if took := time.Since(start); took < 2900*time.Millisecond || list.Revision != p.Revision {
		t.Errorf("a wait at the KV revision %d: answered %d after %v; want %d after 3s", p.Revision, list.Revision, took, p.Revision)
	}
}
