package httpapi_test

import (
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/acl"
)

// TestChangesNamespaceIsChecked: /v1/changes?namespace=N asks for one
// namespace's changes and is checked like any read of N: a writer of team
// a asking for b's gets 403 naming the permission (not 200 with a feed
// filtered to nothing), and for a's gets only a's changes.
func TestChangesNamespaceIsChecked(t *testing.T) {
	w := newWorld(t, acl.Options{})
	w.fixtures()
	for _, tok := range []tokenAnswer{w.writeA, w.readA} {
		a := w.do("GET", "/v1/changes?namespace=b", "", tok.Secret)
		if a.status != 403 || !strings.Contains(a.body, `instances:read on namespace \"b\"`) {
			t.Fatalf("changes of b for a token of a: %d %s", a.status, a.body)
		}
	}
	a := w.do("GET", "/v1/changes?namespace=B!", "", w.admin.Secret)
	if a.status != 400 || !strings.Contains(a.body, `"namespace"`) {
		t.Fatalf("a malformed namespace: %d %s", a.status, a.body)
	}
	var feed struct {
		Changes []struct {
			Instance *struct{ Namespace string }
		}
	}
	for _, tok := range []string{w.writeA.Secret, w.admin.Secret} {
		w.must("GET", "/v1/changes?namespace=a&limit=10000", "", tok, &feed)
		if len(feed.Changes) == 0 {
			t.Fatal("no change of a")
		}
		for _, ch := range feed.Changes {
			if ch.Instance != nil && ch.Instance.Namespace != "a" {
				t.Fatalf("changes of a carry namespace %s", ch.Instance.Namespace)
			}
		}
	}
	w.must("GET", "/v1/changes?namespace=b&limit=10000", "", w.otherB.Secret, &feed)
	if len(feed.Changes) == 0 || feed.Changes[0].Instance == nil || feed.Changes[0].Instance.Namespace != "b" {
		t.Fatalf("changes of b for b's writer: %+v", feed.Changes)
	}
}
