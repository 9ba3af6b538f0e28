package naming

import (
	"slices"
	"strings"
	"testing"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"orders", true}, {"a", true}, {"a.b-c_d", true}, {"0x", true}, {strings.Repeat("a", 128), true},
		{"", false}, {"-a", false}, {"a-", false}, {"Orders", false}, {"a b", false}, {"a/b", false},
		{strings.Repeat("a", 129), false}, {"é", false},
	} {
		if got := ValidName(tc.s); got != tc.want {
			t.Errorf("ValidName(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}

func TestServiceKeyOrder(t *testing.T) {
	keys := []ServiceKey{{"b", "a"}, {"a", "z"}, {"a", "b"}, {"ab", ""}}
	slices.SortFunc(keys, ServiceKey.Compare)
	want := []ServiceKey{{"a", "b"}, {"a", "z"}, {"ab", ""}, {"b", "a"}}
	if !slices.Equal(keys, want) {
		t.Fatalf("sorted %v, want %v", keys, want)
	}
	if s := (ServiceKey{"prod", "orders"}).String(); s != "prod/orders" {
		t.Fatalf("String = %q", s)
	}
}

func TestValidLabel(t *testing.T) {
	for _, tc := range []struct {
		s    string
		want bool
	}{
		{"v1", true}, {"dc1", true}, {"a-b", true}, {strings.Repeat("a", 63), true},
		{"", false}, {"-a", false}, {"a-", false}, {"a.b", false}, {"a_b", false}, {"V1", false}, {strings.Repeat("a", 64), false},
	} {
		if got := ValidLabel(tc.s); got != tc.want {
			t.Errorf("ValidLabel(%q) = %v, want %v", tc.s, got, tc.want)
		}
	}
}
