package console_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sextant-mesh/sextant/internal/console/browsertest"
	"github.com/sextant-mesh/sextant/internal/httpapi/apitest"
	"github.com/sextant-mesh/sextant/internal/kv"
)

// kvPut writes key of namespace default through the API and returns the
// revision it was written at.
func kvPut(t *testing.T, api, key string, value []byte, query string) int64 {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"value": value, "flags": 0})
	req, _ := http.NewRequest("PUT", api+"/v1/namespaces/default/kv/"+strings.ReplaceAll(key, "/", "%2F")+query, strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("PUT %s: %d %s", key, resp.StatusCode, b)
	}
	var out struct{ Revision int64 }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Revision
}

// The KV page over the real API: keys put through the API show as a tree
// by "/" (folders open on a click), a JSON value pretty-printed, a binary
// one as base64 with its size, a key locked by a session as locked; a
// key written twice shows both revisions in its history with the diff
// between them, and a third write through the API shows without reload
// (the page's blocking query). An edit begun before someone else's write
// fails with the conflict message and changes nothing; an edit of the
// latest revision is saved.
func TestKVPage(t *testing.T) {
	api := apitest.StartWith(t, apitest.Options{})
	first := kvPut(t, api.URL, "app/config.json", []byte(`{"db":{"host":"db-1","port":5432},"replicas":2}`), "")
	kvPut(t, api.URL, "app/config.json", []byte(`{"db":{"host":"db-2","port":5432},"replicas":3}`), fmt.Sprintf("?revision=%d", first))
	kvPut(t, api.URL, "app/feature/dark-mode", []byte("on"), "")
	kvPut(t, api.URL, "app/feature/beta", []byte("off"), "")
	kvPut(t, api.URL, "certs/blob", []byte{0x00, 0xff, 0x10, 0x80, 0x01}, "")
	kvPut(t, api.URL, "service/leader", []byte("node-a"), "")
	kvPut(t, api.URL, "readme", []byte("plain text\nsecond line"), "")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sess, err := api.KV.CreateSession(ctx, kv.Session{Namespace: "default", Name: "leader-election", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := api.KV.Put(ctx, kv.Put{Namespace: "default", Key: "service/leader", Value: []byte("node-a"), Acquire: sess.ID}); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}

	srv := consoleOn(t, api.URL)
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/#/kv/default?key=app/config.json")
	b.WaitTrue(t, 10*time.Second, "the tree", `!!document.querySelector('#kv-tree a[data-key="app/config.json"]')`)
	tree := browsertest.Eval[[]string](t, b, `[...document.querySelectorAll('#kv-tree a')].map(a => a.dataset.folder ? 'folder ' + a.dataset.folder : 'key ' + a.dataset.key)`)
	// The selected key's folder is open; the others closed.
	if got, want := strings.Join(tree, ", "), "folder app/, key app/config.json, folder app/feature/, folder certs/, key readme, folder service/"; got != want {
		t.Errorf("the tree:\n got %s\nwant %s", got, want)
	}
	b.Click(t, `#kv-tree a[data-folder="app/feature/"]`)
	b.WaitTrue(t, 5*time.Second, "app/feature/ opened", `!!document.querySelector('#kv-tree a[data-key="app/feature/dark-mode"]')`)

	// The JSON value, pretty-printed; its history of two revisions and their diff.
	b.WaitTrue(t, 10*time.Second, "the value and its history", `(document.querySelector('#kv-value') || {}).dataset?.kind === 'json' &&
		document.querySelectorAll('#kv-history tbody tr').length === 2 && !!document.querySelector('#kv-diff')`)
	if v := browsertest.Eval[string](t, b, `document.querySelector('#kv-value pre').textContent`); !strings.Contains(v, "\"host\": \"db-2\"") || !strings.Contains(v, "\n  \"replicas\": 3") {
		t.Errorf("the JSON value is not pretty-printed:\n%s", v)
	}
	diff := browsertest.Eval[string](t, b, `document.querySelector('#kv-diff').textContent`)
	for _, want := range []string{`-     "host": "db-1",`, `+     "host": "db-2",`, `-   "replicas": 2`, `+   "replicas": 3`} {
		if !strings.Contains(diff, want) {
			t.Errorf("the diff lacks %q:\n%s", want, diff)
		}
	}
	b.Layout(t, "kv.png")

	// Begin an edit at the current revision; someone else writes; the
	// live list shows it and saving fails, naming the revisions.
	b.Click(t, "#kv-edit")
	b.WaitTrue(t, 5*time.Second, "the editor", `!!document.querySelector('#kv-editor')`)
	b.SetInput(t, "#kv-editor", `{"db":{"host":"mine"}}`)
	theirs := kvPut(t, api.URL, "app/config.json", []byte(`{"db":{"host":"db-3","port":5432},"replicas":3}`), "")
	b.WaitTrue(t, 10*time.Second, "the other write, live", fmt.Sprintf(`document.querySelectorAll('#kv-history tbody tr').length === 3 &&
		(document.querySelector('#kv-modify') || {}).textContent === '%d' && !!document.querySelector('#kv-changed')`, theirs))
	b.Click(t, "#kv-save")
	b.WaitTrue(t, 10*time.Second, "the conflict", `!!document.querySelector('#kv-conflict')`)
	msg := browsertest.Eval[string](t, b, `document.querySelector('#kv-conflict').textContent`)
	if !strings.Contains(msg, "someone else changed this key since you loaded it") || !strings.Contains(msg, fmt.Sprintf("now at revision %d", theirs)) {
		t.Errorf("the conflict message: %q", msg)
	}
	if got := api.KV.Table().Get("default", "app/config.json"); !strings.Contains(string(got.Value), "db-3") {
		t.Errorf("the stale edit overwrote the key: %s", got.Value)
	}
	b.Screenshot(t, "kv-conflict.png")

	// Discard, edit the latest, save: it is written.
	b.Click(t, "#kv-conflict button")
	b.Click(t, "#kv-edit")
	b.SetInput(t, "#kv-editor", `{"db":{"host":"db-4"}}`)
	b.Click(t, "#kv-save")
	b.WaitTrue(t, 10*time.Second, "saved", `!!document.querySelector('#kv-saved') && document.querySelectorAll('#kv-history tbody tr').length === 4`)
	if got := api.KV.Table().Get("default", "app/config.json"); string(got.Value) != `{"db":{"host":"db-4"}}` {
		t.Errorf("after the save: %s", got.Value)
	}

	// Delete it from the page: the key goes from the tree, its history
	// stays with the delete on top.
	b.Click(t, "#kv-delete")
	b.Click(t, "#confirm-ok")
	b.WaitTrue(t, 10*time.Second, "deleted", `!document.querySelector('#kv-tree a[data-key="app/config.json"]') && !!document.querySelector('#kv-gone') &&
		document.querySelectorAll('#kv-history tbody tr').length === 5 && document.querySelector('#kv-history tbody tr').textContent.includes('deleted')`)

	// A new key; creating it again is refused, saying it exists.
	for i, want := range []string{"", "already exists"} {
		b.Navigate(t, srv.URL+"/ui/#/kv/default?new")
		b.WaitTrue(t, 10*time.Second, "the new key form", `!!document.querySelector('#kv-new-key')`)
		b.SetInput(t, "#kv-new-key", "app/feature/new-flag")
		b.SetInput(t, "#kv-new-value", fmt.Sprintf("v%d", i))
		b.Click(t, "#kv-create")
		if want == "" {
			b.WaitTrue(t, 10*time.Second, "the new key shown", `(document.querySelector('#kv-value') || {}).textContent?.includes('v0') && !!document.querySelector('#kv-tree a.active[data-key="app/feature/new-flag"]')`)
			continue
		}
		b.WaitTrue(t, 10*time.Second, "the create refused", `!!document.querySelector('#kv-conflict')`)
		if msg := browsertest.Eval[string](t, b, `document.querySelector('#kv-conflict').textContent`); !strings.Contains(msg, want) {
			t.Errorf("creating an existing key: %q", msg)
		}
	}
	if got := api.KV.Table().Get("default", "app/feature/new-flag"); got == nil || string(got.Value) != "v0" {
		t.Errorf("the new key: %+v", got)
	}

	// A binary value, and a locked key.
	b.Navigate(t, srv.URL+"/ui/#/kv/default?key=certs/blob")
	b.WaitTrue(t, 10*time.Second, "the binary value, its folder opened", `(document.querySelector('#kv-value') || {}).dataset?.kind === 'binary' &&
		!!document.querySelector('#kv-tree a.active[data-key="certs/blob"]')`)
	if v := browsertest.Eval[string](t, b, `document.querySelector('#kv-value').textContent`); !strings.Contains(v, base64.StdEncoding.EncodeToString([]byte{0x00, 0xff, 0x10, 0x80, 0x01})) || !strings.Contains(v, "5 bytes") {
		t.Errorf("the binary value: %q", v)
	}
	// A key with an empty path segment is read and written as itself
	// (a path would be cleaned to another key).
	kvPut(t, api.URL, "odd//key", []byte("two slashes"), "")
	b.Navigate(t, srv.URL+"/ui/#/kv/default?key=odd%2F%2Fkey")
	b.WaitTrue(t, 10*time.Second, "odd//key", `(document.querySelector('#kv-value') || {}).textContent?.includes('two slashes')`)
	b.Click(t, "#kv-edit")
	b.SetInput(t, "#kv-editor", "still two")
	b.Click(t, "#kv-save")
	b.WaitTrue(t, 10*time.Second, "odd//key saved", `!!document.querySelector('#kv-saved')`)
	if got := api.KV.Table().Get("default", "odd//key"); got == nil || string(got.Value) != "still two" || api.KV.Table().Get("default", "odd/key") != nil {
		t.Errorf("odd//key after the save: %+v; odd/key %+v", got, api.KV.Table().Get("default", "odd/key"))
	}

	b.Navigate(t, srv.URL+"/ui/#/kv/default?key=service/leader")
	b.WaitTrue(t, 10*time.Second, "the lock", `(document.querySelector('#kv-lock') || {}).textContent?.includes('locked')`)
	if v := browsertest.Eval[string](t, b, `document.querySelector('#kv-lock').textContent`); !strings.Contains(v, sess.ID) || strings.Contains(v, "not locked") {
		t.Errorf("the lock of a key held by session %s: %q", sess.ID, v)
	}
	b.NoProblems(t, "kv page", "/v1/namespaces/default/kv/app%2Fconfig.json?revision=", "/v1/namespaces/default/kv/app%2Ffeature%2Fnew-flag?revision=0")
}

// The KV page's own logic in Chromium: how a value reads (JSON, text,
// binary, empty) and the tree's rows.
func TestKVScripts(t *testing.T) {
	srv := httptest.NewServer(consoleOnly())
	defer srv.Close()
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/vendor/LICENSES.txt") // same origin, no app
	got := browsertest.Eval[[]string](t, b, `(async () => {
		const kv = await import('/ui/js/kv.js');
		const b64 = s => kv.toBase64(new TextEncoder().encode(s));
		const out = [];
		for (const [name, v] of [['json', b64('[1,{"a":2}]')], ['brace text', b64('{not json')], ['text', b64('tab\there\n')],
			['control byte', b64('a\u0001b')], ['not utf-8', btoa('\xff\xfe')], ['empty', '']]) {
			const s = kv.shown(v);
			out.push(name + ': ' + s.kind + ' ' + JSON.stringify(s.text) + ' ' + s.size);
		}
		const keys = ['a/b/c', 'a/b/d', 'a/e', 'a/', 'z'].sort().map(key => ({ key }));
		for (const open of [[], ['a/'], ['a/', 'a/b/']]) {
			out.push('open ' + open.join(',') + ': ' + kv.treeRows(keys, new Set(open)).map(r => (r.folder ? r.name + r.n : r.name)).join(' '));
		}
		out.push(kv.fmtSize(1) + ', ' + kv.fmtSize(2048) + ', ' + kv.fmtSize(3 << 20));
		return out;
	})()`)
	want := []string{
		`json: json "[\n  1,\n  {\n    \"a\": 2\n  }\n]" 11`,
		`brace text: text "{not json" 9`,
		`text: text "tab\there\n" 9`,
		`control byte: binary "YQFi" 3`,
		`not utf-8: binary "//4=" 2`,
		`empty: empty "" 0`,
		`open : a/4 z`,
		`open a/: a/4 (the folder's own key) b/2 e z`,
		`open a/,a/b/: a/4 (the folder's own key) b/2 c d e z`,
		`1 byte, 2.0 KiB, 3.0 MiB`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	b.NoProblems(t, "kv scripts", "favicon.ico")
}

// TestKVPageManyKeys: a folder of 5,000 keys opens as a virtualised list
// (a few dozen rows in the DOM), scrolled to its end shows its last key,
// and the live list follows a write among them.
func TestKVPageManyKeys(t *testing.T) {
	api := apitest.StartWith(t, apitest.Options{})
	const n = 5000
	ops := make([]kv.TxnOp, 0, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range n {
		ops = append(ops, kv.TxnOp{Verb: kv.VerbSet, Key: fmt.Sprintf("many/key-%05d", i), Value: []byte("v")})
		if len(ops) == cap(ops) || i == n-1 {
			if _, errs, _, err := api.KV.Txn(ctx, "default", ops); err != nil || len(errs) > 0 {
				t.Fatalf("txn: %v %v", err, errs)
			}
			ops = ops[:0]
		}
	}
	srv := consoleOn(t, api.URL)
	b := browsertest.Start(t)
	b.Navigate(t, srv.URL+"/ui/#/kv/default")
	b.WaitTrue(t, 10*time.Second, "the folder", `!!document.querySelector('#kv-tree a[data-folder="many/"]')`)
	b.Click(t, `#kv-tree a[data-folder="many/"]`)
	b.WaitTrue(t, 10*time.Second, "the folder opened", fmt.Sprintf(`document.querySelector('#kv-tree .vlist').dataset.rows === '%d'`, n+1))
	if rows := browsertest.Eval[int](t, b, `document.querySelectorAll('#kv-tree .vrow').length`); rows > 60 {
		t.Errorf("%d rows in the DOM for %d keys: the tree is not virtualised", rows, n)
	}
	b.Eval0(t, `(() => { const l = document.querySelector('#kv-tree .vlist'); l.scrollTop = l.scrollHeight; })()`)
	b.WaitTrue(t, 5*time.Second, "the last key", fmt.Sprintf(`!!document.querySelector('#kv-tree a[data-key="many/key-%05d"]')`, n-1))
	if _, _, err := api.KV.Put(ctx, kv.Put{Namespace: "default", Key: "many/zz-new", Value: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	b.WaitTrue(t, 10*time.Second, "the new key, live", `!!document.querySelector('#kv-tree a[data-key="many/zz-new"]')`)
	b.NoProblems(t, "kv page, many keys")
}
