package subset

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
)

// Fallback is what happens when a request's subset has no host.
type Fallback string

// Fallback policies, named as in Envoy's LbSubsetConfig.
const (
	// Unset: a selector defers to the cluster-wide policy; cluster-wide it
	// means NoFallback.
	Unset Fallback = ""
	// NoFallback fails the pick with ErrNoSubset.
	NoFallback Fallback = "NO_FALLBACK"
	// AnyEndpoint picks among all hosts.
	AnyEndpoint Fallback = "ANY_ENDPOINT"
	// DefaultSubset picks among the hosts matching Config.DefaultSubset.
	DefaultSubset Fallback = "DEFAULT_SUBSET"
	// KeysSubset (selectors only) retries with the request restricted to
	// Selector.FallbackKeysSubset.
	KeysSubset Fallback = "KEYS_SUBSET"
)

// Config is the subset load balancer's configuration; its zero value (no
// selectors, NO_FALLBACK) fails every pick, as Envoy's does. JSON field names
// follow Envoy's LbSubsetConfig.
type Config struct {
	// FallbackPolicy applies when no selector's subset or fallback answers:
	// NO_FALLBACK (default), ANY_ENDPOINT or DEFAULT_SUBSET.
	FallbackPolicy Fallback `json:"fallback_policy,omitempty"`
	// DefaultSubset is the key/values a host must all have to be in the
	// default subset; empty means every host.
	DefaultSubset map[string]string `json:"default_subset,omitempty"`
	// Selectors are the key sets requests may name.
	Selectors []Selector `json:"subset_selectors,omitempty"`
	// PanicModeAny: when the chosen subset has no healthy host, pick among
	// all healthy hosts instead of failing.
	PanicModeAny bool `json:"panic_mode_any,omitempty"`
	// ListAsAny: a host whose value for a key is a list (Host.Lists) is in
	// the subset of each element. Without it a list value matches nothing.
	ListAsAny bool `json:"list_as_any,omitempty"`
	// MetadataFallbackPolicy: METADATA_NO_FALLBACK (default) or
	// FALLBACK_LIST, which tries a request's Request.FallbackList in order.
	MetadataFallbackPolicy MetadataFallback `json:"metadata_fallback_policy,omitempty"`
	// AllowRedundantKeys: a request may name keys no selector uses with the
	// others; it is narrowed to the selector with the most keys (the first
	// configured among equals) whose keys it all names.
	AllowRedundantKeys bool `json:"allow_redundant_keys,omitempty"`
}

// MetadataFallback says whether a request's fallback list is used.
type MetadataFallback string

// Metadata fallback policies, named as in Envoy's LbSubsetConfig.
const (
	// MetadataNoFallback (the default, also when unset): a request's
	// FallbackList is ignored.
	MetadataNoFallback MetadataFallback = "METADATA_NO_FALLBACK"
	// FallbackList: each entry of a request's FallbackList, merged over its
	// Metadata, is tried in order until one gives a host.
	FallbackList MetadataFallback = "FALLBACK_LIST"
)

// Selector is one set of metadata keys requests may name.
type Selector struct {
	// Keys, in any order, without repeats; at most MaxSelectorKeys.
	Keys []string `json:"keys"`
	// FallbackPolicy for requests naming exactly Keys whose subset has no
	// host: unset (the cluster's), NO_FALLBACK, ANY_ENDPOINT, DEFAULT_SUBSET
	// or KEYS_SUBSET.
	FallbackPolicy Fallback `json:"fallback_policy,omitempty"`
	// FallbackKeysSubset: with KEYS_SUBSET, the non-empty strict subset of
	// Keys the request is restricted to before trying again.
	FallbackKeysSubset []string `json:"fallback_keys_subset,omitempty"`
	// SingleHostPerSubset: each subset of this selector (one or more keys,
	// as in Envoy since 1.24) holds one host: its member that joined first.
	SingleHostPerSubset bool `json:"single_host_per_subset,omitempty"`
}

// Limits that keep a request's key set in one machine word.
const (
	MaxKeys         = 64 // distinct keys over all selectors and the default subset
	MaxSelectorKeys = 16 // keys in one selector
)

// ErrInvalidConfig wraps every configuration error.
var ErrInvalidConfig = errors.New("subset: invalid config")

type configError struct{ msg string }

func (e *configError) Error() string { return "subset: " + e.msg }
func (e *configError) Unwrap() error { return ErrInvalidConfig }

func invalid(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...)}
}

// ParseConfig decodes a JSON config strictly (unknown fields and trailing
// data are errors) and validates it.
func ParseConfig(data []byte) (Config, error) {
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Config{}, invalid("trailing data after the config")
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Validate reports the first problem in c, naming the field.
func (c *Config) Validate() error {
	switch c.FallbackPolicy {
	case Unset, NoFallback, AnyEndpoint, DefaultSubset:
	case KeysSubset:
		return invalid("fallback_policy: KEYS_SUBSET is only valid on a selector")
	default:
		return invalid("fallback_policy: unknown policy %q", c.FallbackPolicy)
	}
	switch c.MetadataFallbackPolicy {
	case "", MetadataNoFallback, FallbackList:
	default:
		return invalid("metadata_fallback_policy: unknown policy %q", c.MetadataFallbackPolicy)
	}
	for k := range c.DefaultSubset {
		if k == "" {
			return invalid("default_subset: empty key")
		}
	}
	seen := map[string]int{}
	keys := map[string]bool{}
	for k := range c.DefaultSubset {
		keys[k] = true
	}
	for i, s := range c.Selectors {
		f := selField(i)
		if len(s.Keys) == 0 {
			return invalid("%s.keys: empty", f)
		}
		if len(s.Keys) > MaxSelectorKeys {
			return invalid("%s.keys: %d keys, at most %d", f, len(s.Keys), MaxSelectorKeys)
		}
		set := map[string]bool{}
		for _, k := range s.Keys {
			if k == "" {
				return invalid("%s.keys: empty key", f)
			}
			if set[k] {
				return invalid("%s.keys: duplicate key %q", f, k)
			}
			set[k] = true
			keys[k] = true
		}
		id := canonical(s.Keys)
		if j, ok := seen[id]; ok {
			return invalid("%s.keys: same keys as selectors[%d]", f, j)
		}
		seen[id] = i
		switch s.FallbackPolicy {
		case Unset, NoFallback, AnyEndpoint, DefaultSubset:
			if len(s.FallbackKeysSubset) > 0 {
				return invalid("%s.fallback_keys_subset: only valid with fallback_policy KEYS_SUBSET", f)
			}
		case KeysSubset:
			if len(s.FallbackKeysSubset) == 0 {
				return invalid("%s.fallback_keys_subset: required with KEYS_SUBSET", f)
			}
			if len(s.FallbackKeysSubset) >= len(s.Keys) {
				return invalid("%s.fallback_keys_subset: must be a strict subset of keys", f)
			}
			sub := map[string]bool{}
			for _, k := range s.FallbackKeysSubset {
				if !set[k] {
					return invalid("%s.fallback_keys_subset: key %q is not in keys", f, k)
				}
				if sub[k] {
					return invalid("%s.fallback_keys_subset: duplicate key %q", f, k)
				}
				sub[k] = true
			}
		default:
			return invalid("%s.fallback_policy: unknown policy %q", f, s.FallbackPolicy)
		}
	}
	if len(keys) > MaxKeys {
		return invalid("subset_selectors: %d distinct keys with default_subset, at most %d", len(keys), MaxKeys)
	}
	return nil
}

// selField names selectors[i] for errors.
func selField(i int) string { return "selectors[" + strconv.Itoa(i) + "]" }

func canonical(keys []string) string {
	s := slices.Clone(keys)
	sort.Strings(s)
	var b bytes.Buffer
	for _, k := range s {
		b.WriteString(k)
		b.WriteByte(0)
	}
	return b.String()
}

// compiled is the validated config in the form picks use: keys numbered,
// each selector's keys ascending by number, selectors found by key mask.
type compiled struct {
	keyID    map[string]int
	keys     []string // by id: ascending, so a sorted label set yields ascending ids
	kt       keyTable // keys, for hosts' and requests' labels
	sels     []csel
	byMask   map[uint64]int // when there are many selectors
	masks    []uint64       // sels[i].mask; scanned when few
	fallback Fallback
	defKeys  []string // ascending
	defVals  []string
	listAny  bool
	panicAny bool
	// fallbackList: metadata_fallback_policy FALLBACK_LIST.
	fallbackList bool
	// trie holds the selectors' key lists (ascending ids) as paths, so that
	// the build intersects a shared prefix once; depth is the longest.
	trie  []*trieNode
	depth int
	// redundant: allow_redundant_keys; bySize then holds the selectors by
	// descending key count, configuration order among equals (Envoy's
	// stable sort), for narrow.
	redundant bool
	bySize    []int
}

// trieNode is one key of a selector path in compiled.trie.
type trieNode struct {
	key      int // id
	name     string
	sel      int // the selector whose keys end here, or -1
	children []*trieNode
}

type csel struct {
	ids    []int    // ascending
	names  []string // keys by ids order
	mask   uint64
	fb     Fallback
	fbMask uint64
	single bool
}

func compile(c Config) *compiled {
	cc := &compiled{keyID: map[string]int{}, fallback: c.FallbackPolicy,
		listAny: c.ListAsAny, panicAny: c.PanicModeAny,
		fallbackList: c.MetadataFallbackPolicy == FallbackList, redundant: c.AllowRedundantKeys}
	if cc.fallback == Unset {
		cc.fallback = NoFallback
	}
	n := len(c.DefaultSubset)
	for _, s := range c.Selectors {
		n += len(s.Keys)
	}
	all := make([]string, 0, n)
	for _, s := range c.Selectors {
		all = append(all, s.Keys...)
	}
	for k := range c.DefaultSubset {
		all = append(all, k)
	}
	sort.Strings(all)
	for _, k := range slices.Compact(all) {
		cc.keyID[k] = len(cc.keys)
		cc.keys = append(cc.keys, k)
	}
	cc.kt = newKeyTable(cc.keys)
	cc.sels = make([]csel, 0, len(c.Selectors))
	cc.masks = make([]uint64, 0, len(c.Selectors))
	if len(c.Selectors) > scanSelectors {
		cc.byMask = make(map[uint64]int, len(c.Selectors))
	}
	for i, s := range c.Selectors {
		cs := csel{fb: s.FallbackPolicy, single: s.SingleHostPerSubset,
			ids: make([]int, 0, len(s.Keys)), names: make([]string, 0, len(s.Keys))}
		for _, k := range s.Keys {
			cs.ids = append(cs.ids, cc.keyID[k])
			cs.mask |= 1 << cc.keyID[k]
		}
		sort.Ints(cs.ids)
		for _, id := range cs.ids {
			cs.names = append(cs.names, cc.keys[id])
		}
		for _, k := range s.FallbackKeysSubset {
			cs.fbMask |= 1 << cc.keyID[k]
		}
		if cc.byMask != nil {
			cc.byMask[cs.mask] = i
		}
		cc.masks = append(cc.masks, cs.mask)
		cc.sels = append(cc.sels, cs)
	}
	for si, cs := range cc.sels {
		level, node := &cc.trie, (*trieNode)(nil)
		for _, name := range cs.names {
			i := slices.IndexFunc(*level, func(n *trieNode) bool { return n.name == name })
			if i < 0 {
				*level = append(*level, &trieNode{key: cc.keyID[name], name: name, sel: -1})
				i = len(*level) - 1
			}
			node = (*level)[i]
			level = &node.children
		}
		node.sel = si
		cc.depth = max(cc.depth, len(cs.names))
	}
	if cc.redundant {
		for i := range cc.sels {
			cc.bySize = append(cc.bySize, i)
		}
		sort.SliceStable(cc.bySize, func(a, b int) bool {
			return len(cc.sels[cc.bySize[a]].ids) > len(cc.sels[cc.bySize[b]].ids)
		})
	}
	for k := range c.DefaultSubset {
		cc.defKeys = append(cc.defKeys, k)
	}
	sort.Strings(cc.defKeys)
	for _, k := range cc.defKeys {
		cc.defVals = append(cc.defVals, c.DefaultSubset[k])
	}
	return cc
}

// narrow is allow_redundant_keys: the request's key set mask is cut down to
// the keys of the largest selector it covers; unchanged if it covers none.
func (c *compiled) narrow(mask uint64) uint64 {
	for _, si := range c.bySize {
		if m := c.sels[si].mask; m&mask == m {
			return m
		}
	}
	return mask
}

// scanSelectors is how many selectors a linear scan of masks beats a map.
const scanSelectors = 32

// selector returns the index of the selector whose keys are exactly mask,
// or -1.
func (c *compiled) selector(mask uint64) int {
	if len(c.masks) <= scanSelectors {
		for i, m := range c.masks {
			if m == mask {
				return i
			}
		}
		return -1
	}
	if i, ok := c.byMask[mask]; ok {
		return i
	}
	return -1
}
