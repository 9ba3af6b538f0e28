package subset

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sextant-mesh/sextant/internal/label"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"zero value", Config{}, ""},
		{"envoy example", Config{
			FallbackPolicy: DefaultSubset, DefaultSubset: map[string]string{"stage": "prod"},
			Selectors: []Selector{{Keys: []string{"stage", "version"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"stage"}}, {Keys: []string{"stage"}}},
		}, ""},
		{"unknown cluster policy", Config{FallbackPolicy: "SOMETIMES"}, `subset: fallback_policy: unknown policy "SOMETIMES"`},
		{"keys subset cluster wide", Config{FallbackPolicy: KeysSubset}, `subset: fallback_policy: KEYS_SUBSET is only valid on a selector`},
		{"empty default key", Config{DefaultSubset: map[string]string{"": "x"}}, `subset: default_subset: empty key`},
		{"empty selector", Config{Selectors: []Selector{{Keys: []string{"a"}}, {}}}, `subset: selectors[1].keys: empty`},
		{"empty key", Config{Selectors: []Selector{{Keys: []string{"a", ""}}}}, `subset: selectors[0].keys: empty key`},
		{"duplicate key", Config{Selectors: []Selector{{Keys: []string{"a"}}, {Keys: []string{"b"}}, {Keys: []string{"zone", "x", "zone"}}}},
			`subset: selectors[2].keys: duplicate key "zone"`},
		{"same keys twice", Config{Selectors: []Selector{{Keys: []string{"a", "b"}}, {Keys: []string{"b", "a"}}}},
			`subset: selectors[1].keys: same keys as selectors[0]`},
		{"too many keys", Config{Selectors: []Selector{{Keys: strings.Split("a b c d e f g h i j k l m n o p q", " ")}}},
			`subset: selectors[0].keys: 17 keys, at most 16`},
		{"unknown selector policy", Config{Selectors: []Selector{{Keys: []string{"a"}, FallbackPolicy: "nope"}}},
			`subset: selectors[0].fallback_policy: unknown policy "nope"`},
		{"keys subset missing", Config{Selectors: []Selector{{Keys: []string{"a", "b"}, FallbackPolicy: KeysSubset}}},
			`subset: selectors[0].fallback_keys_subset: required with KEYS_SUBSET`},
		{"keys subset not strict", Config{Selectors: []Selector{{Keys: []string{"a", "b"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"a", "b"}}}},
			`subset: selectors[0].fallback_keys_subset: must be a strict subset of keys`},
		{"keys subset foreign key", Config{Selectors: []Selector{{Keys: []string{"a", "b"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"c"}}}},
			`subset: selectors[0].fallback_keys_subset: key "c" is not in keys`},
		{"keys subset without policy", Config{Selectors: []Selector{{Keys: []string{"a", "b"}, FallbackKeysSubset: []string{"a"}}}},
			`subset: selectors[0].fallback_keys_subset: only valid with fallback_policy KEYS_SUBSET`},
		// Accepted since Envoy 1.24 (envoyproxy/envoy#22644).
		{"single host with two keys", Config{Selectors: []Selector{{Keys: []string{"a", "b"}, SingleHostPerSubset: true}}}, ""},
		{"unknown metadata fallback policy", Config{MetadataFallbackPolicy: "SOMETIMES"},
			`subset: metadata_fallback_policy: unknown policy "SOMETIMES"`},
		{"fallback list and redundant keys", Config{MetadataFallbackPolicy: FallbackList, AllowRedundantKeys: true,
			Selectors: []Selector{{Keys: []string{"a"}}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.cfg, tt.want) })
	}
}

// checkValidate: cfg is valid (want "") or fails with exactly want, an
// ErrInvalidConfig.
func checkValidate(t *testing.T, cfg Config, want string) {
	t.Helper()
	err := cfg.Validate()
	if want == "" {
		if err != nil {
			t.Fatalf("Validate: %v, want nil", err)
		}
		return
	}
	if err == nil || err.Error() != want {
		t.Fatalf("Validate: %v, want %q", err, want)
	}
	if !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
	}
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"full", `{"fallback_policy":"DEFAULT_SUBSET","default_subset":{"stage":"prod"},
			"subset_selectors":[{"keys":["stage","version"],"fallback_policy":"KEYS_SUBSET","fallback_keys_subset":["stage"]},
			{"keys":["host"],"single_host_per_subset":true}],"panic_mode_any":true,"list_as_any":true}`, ""},
		{"unknown field", `{"fallback":"ANY_ENDPOINT"}`, `json: unknown field "fallback"`},
		{"unknown selector field", `{"subset_selectors":[{"keys":["a"],"fallbck_policy":"ANY_ENDPOINT"}]}`, `json: unknown field "fallbck_policy"`},
		{"trailing data", `{} {}`, `subset: trailing data after the config`},
		{"wrong type", `{"subset_selectors":{"keys":["a"]}}`, `cannot unmarshal`},
		{"invalid", `{"subset_selectors":[{"keys":["a","a"]}]}`, `subset: selectors[0].keys: duplicate key "a"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseConfig([]byte(tt.json))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("ParseConfig: %v", err)
				}
				if len(c.Selectors) != 2 || !c.PanicModeAny || !c.ListAsAny || c.DefaultSubset["stage"] != "prod" {
					t.Fatalf("decoded %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("ParseConfig: %v, want an ErrInvalidConfig containing %q", err, tt.want)
			}
		})
	}
}

// FuzzParseConfig: any input either fails cleanly or yields a config that
// validates and builds a balancer that answers picks.
func FuzzParseConfig(f *testing.F) {
	files, _ := filepath.Glob("testdata/config/*.json")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	hosts := []Host{
		{ID: "h1", Labels: label.FromMap(map[string]string{"stage": "prod", "version": "1"})},
		{ID: "h2", Labels: label.FromMap(map[string]string{"stage": "dev"}), Lists: map[string][]string{"version": {"1", "2"}}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig(data)
		if err != nil {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("parsed config fails Validate: %v", err)
		}
		lb, err := New(c, testPolicy(), slices.Clone(hosts))
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		for _, s := range c.Selectors {
			md := map[string]string{}
			for _, k := range s.Keys {
				md[k] = "1"
			}
			if _, err := lb.Pick(md); err != nil && !errors.Is(err, ErrNoSubset) && !errors.Is(err, ErrNoHealthyHost) {
				t.Fatalf("Pick: unexpected error %v", err)
			}
			md["redundant"] = "x"
			req := &Request{Metadata: label.FromMap(md), FallbackList: []label.Labels{{}, label.FromMap(map[string]string{"stage": "dev"})}}
			if _, err := lb.PickRequest(req); err != nil && !errors.Is(err, ErrNoSubset) && !errors.Is(err, ErrNoHealthyHost) {
				t.Fatalf("PickRequest: unexpected error %v", err)
			}
		}
	})
}

// TestEnvoyLoadBalancerSubsetInfoImpl is Envoy's
// LoadBalancerSubsetInfoImplTest suite: what its config accepts and rejects.
func TestEnvoyLoadBalancerSubsetInfoImpl(t *testing.T) {
	keysSubset := func(keys, fallback []string) Selector {
		return Selector{Keys: keys, FallbackPolicy: KeysSubset, FallbackKeysSubset: fallback}
	}
	tests := []struct {
		name string
		cfg  Config
		want string // "" for valid
	}{
		{"KeysSubsetFallbackValid", Config{Selectors: []Selector{
			keysSubset([]string{"key1", "key2", "key3"}, []string{"key1", "key3"}),
			keysSubset([]string{"key1", "key3", "key4"}, []string{"key4"})}}, ""},
		{"KeysSubsetForOtherPolicyInvalid", Config{Selectors: []Selector{
			{Keys: []string{"key1", "key2"}, FallbackPolicy: AnyEndpoint, FallbackKeysSubset: []string{"key1"}}}},
			`subset: selectors[0].fallback_keys_subset: only valid with fallback_policy KEYS_SUBSET`},
		{"KeysSubsetNotASubsetInvalid", Config{Selectors: []Selector{keysSubset([]string{"key1", "key2"}, []string{"key3"})}},
			`subset: selectors[0].fallback_keys_subset: key "key3" is not in keys`},
		{"KeysSubsetEmptyInvalid", Config{Selectors: []Selector{keysSubset([]string{"key1", "key2"}, nil)}},
			`subset: selectors[0].fallback_keys_subset: required with KEYS_SUBSET`},
		{"KeysSubsetEqualKeysInvalid", Config{Selectors: []Selector{keysSubset([]string{"key1", "key2"}, []string{"key2", "key1"})}},
			`subset: selectors[0].fallback_keys_subset: must be a strict subset of keys`},
		// Envoy: the default config disables the subset balancer. Here the
		// zero config is valid and every pick fails (TestSelection).
		{"DefaultConfigIsDiabled", Config{}, ""},
		{"SubsetConfig", Config{FallbackPolicy: DefaultSubset, DefaultSubset: map[string]string{"key": "the value"},
			Selectors: []Selector{{Keys: []string{"selector_key1"}}, {Keys: []string{"selector_key2"}, FallbackPolicy: AnyEndpoint}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkValidate(t, tt.cfg, tt.want) })
	}
}
