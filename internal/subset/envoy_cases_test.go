package subset

import (
	"testing"

	"github.com/sextant-mesh/sextant/internal/balancer"
	"github.com/sextant-mesh/sextant/internal/label"
)

// Envoy's SubsetLoadBalancerTest fixture: init() is two hosts of version 1.0.
func envoyInit() []Host { return []Host{host("80", "version", "1.0"), host("81", "version", "1.0")} }

// TestEnvoySubsetLoadBalancer is Envoy's SubsetLoadBalancerTest suite (see
// envoy_test.go for how a case is translated).
func TestEnvoySubsetLoadBalancer(t *testing.T) {
	noFallback := Config{FallbackPolicy: NoFallback}
	version := []Selector{sel(Unset, "version")}
	fourHosts := []Host{host("80", "version", "1.0"), host("81", "version", "1.0"),
		host("82", "version", "1.1"), host("83", "version", "1.1")}
	overlapping := []Host{
		host("80", "version", "1.0", "stage", "prod"), host("81", "version", "1.0", "stage", "prod"),
		host("82", "version", "1.0", "stage", "off"), host("83", "version", "1.1", "stage", "prod"),
		host("84", "version", "999", "stage", "dev")}
	defaultSubset := func(kv ...string) Config {
		return Config{FallbackPolicy: DefaultSubset, DefaultSubset: md(kv...)}
	}
	withSelectors := func(c Config, s ...Selector) Config { c.Selectors = s; return c }
	versionDefault := withSelectors(defaultSubset("default", "true"), sel(Unset, "version"), sel(Unset, "default"))
	purged := []Host{host("8000", "version", "1.2"), host("8001", "version", "1.0", "stage", "prod")}
	purgedCfg := Config{Selectors: []Selector{sel(Unset, "version"), sel(Unset, "version", "stage")}}

	runEnvoyCases(t, []envoyCase{
		{name: "NoFallback", cfg: noFallback, hosts: envoyInit(), steps: []envoyStep{pickErr(nil)}},
		{name: "NoFallbackAfterUpdate", cfg: noFallback, hosts: envoyInit(), steps: []envoyStep{
			pickErr(nil),
			modify([]Host{host("8000", "version", "1.0")}, "81"),
			pickErr(nil)}},
		{name: "FallbackAnyEndpoint", hosts: envoyInit(), steps: []envoyStep{pick(nil, "80", "81")}},
		{name: "FallbackAnyEndpointAfterUpdate", hosts: envoyInit(), steps: []envoyStep{
			pick(nil, "80", "81"),
			modify([]Host{host("8000", "version", "1.0")}, "81"),
			pick(nil, "80", "8000")}},
		{name: "FallbackDefaultSubset", cfg: defaultSubset("version", "default"),
			hosts: []Host{host("80", "version", "new"), host("81", "version", "default")},
			steps: []envoyStep{pick(nil, "81")}},
		{name: "FallbackPanicMode", cfg: Config{FallbackPolicy: DefaultSubset, PanicModeAny: true, DefaultSubset: md("version", "none")},
			hosts: []Host{host("80", "version", "new"), host("81", "version", "default")},
			steps: []envoyStep{pick(nil, "80", "81")}},
		{name: "FallbackPanicModeWithUpdates", cfg: Config{FallbackPolicy: DefaultSubset, PanicModeAny: true, DefaultSubset: md("version", "none")},
			hosts: []Host{host("80", "version", "default")},
			steps: []envoyStep{
				pick(nil, "80"),
				modify([]Host{host("8000", "version", "new")}, "80"),
				pick(nil, "8000")}},
		{name: "FallbackDefaultSubsetAfterUpdate", cfg: defaultSubset("version", "default"),
			hosts: []Host{host("80", "version", "new"), host("81", "version", "default")},
			steps: []envoyStep{
				pick(nil, "81"),
				modify([]Host{host("8000", "version", "new"), host("8001", "version", "default")}, "81"),
				pick(nil, "8001")}},
		{name: "FallbackEmptyDefaultSubsetConvertsToAnyEndpoint", cfg: Config{FallbackPolicy: DefaultSubset},
			hosts: envoyInit(), steps: []envoyStep{pick(nil, "80", "81")}},
		{name: "FallbackOnUnknownMetadata", hosts: envoyInit(), steps: []envoyStep{
			pick(md("unknown", "unknown"), "80", "81"),
			pick(md("version", "unknown"), "80", "81")}},
		{name: "BalancesSubset", cfg: withSelectors(noFallback, version...), hosts: fourHosts, steps: []envoyStep{
			pick(md("version", "1.0"), "80", "81"),
			pick(md("version", "1.1"), "82", "83")}},
		{name: "BalancesSubsetAfterUpdate", cfg: withSelectors(noFallback, version...), hosts: fourHosts, steps: []envoyStep{
			pick(md("version", "1.0"), "80", "81"),
			pick(md("version", "1.1"), "82", "83"),
			subsets(2),
			modify([]Host{host("8000", "version", "1.2"), host("8001", "version", "1.0")}, "81", "82"),
			pick(md("version", "1.0"), "80", "8001"),
			pick(md("version", "1.1"), "83"),
			pick(md("version", "1.2"), "8000"),
			subsets(3)}},
		{name: "ListAsAnyEnabled", cfg: Config{FallbackPolicy: NoFallback, ListAsAny: true, Selectors: version}, steps: []envoyStep{
			upsert(listHost("8000", map[string][]string{"version": {"1.2.1", "1.2"}}), host("8001", "version", "1.0")),
			pick(md("version", "1.0"), "8001"),
			pick(md("version", "1.2"), "8000"),
			pick(md("version", "1.2.1"), "8000")}},
		{name: "ListAsAnyEnabledMultipleLists", cfg: Config{FallbackPolicy: NoFallback, ListAsAny: true, Selectors: version}, steps: []envoyStep{
			upsert(listHost("8000", map[string][]string{"version": {"1.2.1", "1.2"}}),
				listHost("8000b", map[string][]string{"version": {"1.2.2", "1.2"}}), host("8001", "version", "1.0")),
			pick(md("version", "1.0"), "8001"),
			pick(md("version", "1.2"), "8000", "8000b"),
			pick(md("version", "1.2.1"), "8000"),
			pick(md("version", "1.2.2"), "8000b")}},
		{name: "ListAsAnyEnabledMultipleListsForSingleHost",
			cfg: Config{FallbackPolicy: NoFallback, ListAsAny: true, Selectors: []Selector{sel(Unset, "version", "hardware")}},
			steps: []envoyStep{
				upsert(listHost("8000", map[string][]string{"version": {"1.2.1", "1.2"}, "hardware": {"a", "b"}}),
					listHost("8000b", map[string][]string{"version": {"1.1", "1.1.1"}, "hardware": {"b", "c"}})),
				pick(md("version", "1.2", "hardware", "a"), "8000"),
				pick(md("version", "1.1", "hardware", "b"), "8000b"),
				pickErr(md("version", "1.1", "hardware", "a")),
				pick(md("version", "1.2.1", "hardware", "b"), "8000")}},
		{name: "ListAsAnyDisable", cfg: withSelectors(noFallback, version...), steps: []envoyStep{
			upsert(listHost("8000", map[string][]string{"version": {"1.2.1", "1.2"}}), host("8001", "version", "1.0")),
			pick(md("version", "1.0"), "8001"),
			pickErr(md("version", "1.2"))}},
		{name: "OnlyMetadataChanged", cfg: versionDefault,
			hosts: []Host{host("8000", "version", "1.2"), host("8001", "version", "1.0", "default", "true")},
			steps: []envoyStep{
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8001"),
				pick(md("default", "true"), "8001"),
				pick(md("version", "1.3"), "8001"),
				// Swap the default version.
				upsert(host("8000", "version", "1.2", "default", "true"), host("8001", "version", "1.0")),
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8001"),
				pick(md("default", "true"), "8000"),
				pick(md("version", "1.3"), "8000"),
				// Bump 1.0 to 1.3: one subset removed, one created.
				upsert(host("8001", "version", "1.3")),
				subsets(3),
				pick(md("version", "1.3"), "8001"),
				pick(md("version", "1.2"), "8000"),
				pick(md("default", "true"), "8000"),
				pick(md("version", "1.0"), "8000"),
				// Roll back from 1.3 to 1.0.
				upsert(host("8001", "version", "1.0")),
				subsets(3),
				pick(md("version", "1.0"), "8001"),
				pick(md("version", "1.2"), "8000"),
				pick(md("default", "true"), "8000"),
				pick(md("version", "1.3"), "8000"),
				// Make 1.0 default again.
				upsert(host("8001", "version", "1.0", "default", "true"), host("8000", "version", "1.2")),
				subsets(3),
				pick(md("version", "1.0"), "8001"),
				pick(md("version", "1.2"), "8000"),
				pick(md("default", "true"), "8001"),
				pick(md("version", "1.3"), "8001")}},
		{name: "EmptySubsetsPurged", cfg: purgedCfg, hosts: purged, steps: []envoyStep{
			subsets(3),
			upsert(host("8000", "version", "1.3")), subsets(3),
			// Move the host of the version + stage subset to a version-only one.
			upsert(host("8001", "version", "1.4")), subsets(2),
			upsert(host("8001", "version", "1.5", "stage", "devel")), subsets(3),
			upsert(host("8001", "version", "1.0", "stage", "prod")), subsets(3),
			upsert(host("8001", "version", "1.6")), subsets(2)}},
		{name: "EmptySubsetsPurgedCollapsed", cfg: purgedCfg, hosts: purged, steps: []envoyStep{
			subsets(3),
			upsert(host("8001", "version", "1.2", "stage", "prod")), subsets(2),
			upsert(host("8001", "version", "1.2")), subsets(1),
			upsert(host("8001", "version", "1.2", "stage", "prod")), subsets(2)}},
		{name: "EmptySubsetsPurgedVersionChanged", cfg: purgedCfg, hosts: purged, steps: []envoyStep{
			subsets(3),
			upsert(host("8001", "version", "1.2", "stage", "prod")), subsets(2),
			upsert(host("8000", "version", "1.3"), host("8001", "version", "1.4", "stage", "prod")), subsets(3)}},
		{name: "MetadataChangedHostsAddedRemoved", cfg: versionDefault,
			hosts: []Host{host("8000", "version", "1.2"), host("8001", "version", "1.0", "default", "true")},
			steps: []envoyStep{
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8001"),
				pick(md("default", "true"), "8001"),
				pick(md("version", "1.3"), "8001"),
				// Swap the default version and add a host.
				upsert(host("8000", "version", "1.2", "default", "true"), host("8001", "version", "1.0"), host("8002", "version", "1.3")),
				subsets(4),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8001"),
				pick(md("default", "true"), "8000"),
				pick(md("version", "1.3"), "8002"),
				// Swap the default again and remove the added host.
				modify([]Host{host("8000", "version", "1.2"), host("8001", "version", "1.0", "default", "true")}, "8002"),
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8001"),
				pick(md("default", "true"), "8001"),
				pick(md("version", "1.3"), "8001"),
				// Swap once more, adding a host and removing the default one.
				modify([]Host{host("8000", "version", "1.2", "default", "true"), host("8003", "version", "1.4")}, "8001"),
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8000"),
				pick(md("default", "true"), "8000"),
				pick(md("version", "1.3"), "8000"),
				pick(md("version", "1.4"), "8003"),
				// Make 1.4 default, with no host added or removed.
				upsert(host("8000", "version", "1.2"), host("8003", "version", "1.4", "default", "true")),
				subsets(3),
				pick(md("version", "1.2"), "8000"),
				pick(md("version", "1.0"), "8003"),
				pick(md("default", "true"), "8003"),
				pick(md("version", "1.3"), "8003"),
				pick(md("version", "1.4"), "8003")}},
		{name: "UpdateRemovingLastSubsetHost", cfg: Config{Selectors: version},
			hosts: []Host{host("80", "version", "1.0"), host("81", "version", "1.1")},
			steps: []envoyStep{
				pick(md("version", "1.0"), "80"),
				subsets(2),
				remove("80"),
				pick(md("version", "1.0"), "81"), // any endpoint
				subsets(1)}},
		{name: "UpdateRemovingUnknownHost", cfg: withSelectors(noFallback, sel(Unset, "stage", "version"), sel(Unset, "version")),
			hosts: []Host{host("80", "stage", "prod", "version", "1.0"), host("81", "stage", "prod", "version", "1.1")},
			steps: []envoyStep{
				pick(md("stage", "prod", "version", "1.0"), "80"),
				remove("8000", "8001"),
				pick(md("stage", "prod", "version", "1.0"), "80")}},
		{name: "UpdateModifyingOnlyHostHealth", cfg: withSelectors(noFallback, sel(Unset, "version"), sel(Unset, "hardware")),
			hosts: fourHosts, steps: []envoyStep{
				pick(md("version", "1.0"), "80", "81"),
				pick(md("version", "1.1"), "82", "83"),
				{unhealthy: []string{"80", "82"}},
				pick(md("version", "1.0"), "81"),
				pick(md("version", "1.1"), "83")}},
		{name: "BalancesDisjointSubsets", cfg: withSelectors(noFallback, sel(Unset, "version"), sel(Unset, "hardware")),
			hosts: []Host{host("80", "version", "1.0", "hardware", "std"), host("81", "version", "1.0", "hardware", "bigmem"),
				host("82", "version", "1.1", "hardware", "std"), host("83", "version", "1.1", "hardware", "bigmem")},
			steps: []envoyStep{
				pick(md("version", "1.0"), "80", "81"),
				pick(md("hardware", "bigmem"), "81", "83")}},
		{name: "BalancesOverlappingSubsets", cfg: withSelectors(noFallback, sel(Unset, "stage", "version"), sel(Unset, "version")),
			hosts: overlapping, steps: []envoyStep{
				pick(md("version", "1.0"), "80", "81", "82"),
				pick(md("version", "1.0", "stage", "prod"), "80", "81"),
				pick(md("version", "999", "stage", "dev"), "84"),
				pickErr(md("version", "2.0", "stage", "prod"))}},
		{name: "BalancesNestedSubsets", cfg: withSelectors(noFallback, sel(Unset, "stage", "version"), sel(Unset, "stage")),
			hosts: overlapping, steps: []envoyStep{
				pick(md("stage", "prod"), "80", "81", "83"),
				pick(md("version", "1.0", "stage", "prod"), "80", "81"),
				pickErr(md("stage", "larval")),
				pickErr(md("version", "2.0", "stage", "prod"))}},
		{name: "IgnoresUnselectedMetadata", cfg: withSelectors(noFallback, version...),
			hosts: []Host{host("80", "version", "1.0", "stage", "ignored"), host("81", "ignore", "value"), host("82", "version", "1.0")},
			steps: []envoyStep{
				pick(md("version", "1.0"), "80", "82"),
				pickErr(md("ignore", "value"))}},
		{name: "IgnoresHostsWithoutMetadata", cfg: withSelectors(noFallback, version...),
			hosts: []Host{host("80"), host("81", "version", "1.0")},
			steps: []envoyStep{pick(md("version", "1.0"), "81")}},
		{name: "SubsetSelectorNoFallbackPerSelector", cfg: Config{FallbackPolicy: DefaultSubset, Selectors: []Selector{sel(NoFallback, "version")}},
			hosts: fourHosts, steps: []envoyStep{
				pick(md("version", "1.0"), "80", "81"),
				pick(md("version", "1.1"), "82", "83"),
				pickErr(md("version", "1.2"))}},
		{name: "FallbackNotDefinedForIntermediateSelector", cfg: Config{Selectors: []Selector{sel(Unset, "stage"), sel(AnyEndpoint, "stage", "version")}},
			hosts: []Host{host("80", "version", "1.0", "stage", "dev"), host("81", "version", "1.0", "stage", "canary")},
			steps: []envoyStep{
				pick(md("stage", "dev"), "80"),
				pick(md("stage", "test"), "80", "81")}},
		{name: "SubsetSelectorFallbackOverridesTopLevelOne", cfg: Config{Selectors: []Selector{sel(NoFallback, "version")}},
			hosts: envoyInit(), steps: []envoyStep{
				pick(md("unknown", "unknown"), "80", "81"),
				pickErr(md("version", "unknown"))}},
		{name: "SubsetSelectorNoFallbackMatchesTopLevelOne", cfg: withSelectors(noFallback, sel(NoFallback, "version")),
			hosts: envoyInit(), steps: []envoyStep{
				pickErr(md("unknown", "unknown")),
				pickErr(md("version", "unknown"))}},
		{name: "SubsetSelectorDefaultAnyFallbackPerSelector",
			cfg: Config{FallbackPolicy: NoFallback, DefaultSubset: md("bar", "default"),
				Selectors: []Selector{sel(DefaultSubset, "version"), sel(AnyEndpoint, "app"), sel(Unset, "foo")}},
			hosts: []Host{host("81", "version", "0.0"), host("82", "version", "1.0"), host("83", "app", "envoy"),
				host("84", "foo", "abc", "bar", "default")},
			steps: []envoyStep{
				pick(md("app", "ngnix"), "81", "82", "83", "84"),
				pick(md("app", "envoy"), "83"),
				pick(md("version", "x"), "84"),
				pick(md("foo", "abc"), "84")}},
		{name: "SubsetSelectorDefaultAfterUpdate",
			cfg:   withSelectors(defaultSubset("version", "default"), sel(DefaultSubset, "version")),
			hosts: []Host{host("80", "version", "new"), host("81", "version", "default")},
			steps: []envoyStep{
				pick(nil, "81"),
				modify([]Host{host("8000", "version", "new"), host("8001", "version", "default")}, "81"),
				pick(md("version", "x"), "8001")}},
		{name: "SubsetSelectorAnyAfterUpdate", cfg: withSelectors(noFallback, sel(AnyEndpoint, "version")),
			hosts: []Host{host("81", "version", "1"), host("82", "version", "2")},
			steps: []envoyStep{
				pick(md("version", "x"), "81", "82"),
				modify([]Host{host("83", "version", "3")}, "82"),
				pick(md("version", "x"), "81", "83")}},
		{name: "FallbackForCompoundSelector",
			cfg: Config{DefaultSubset: md("foo", "bar"), Selectors: []Selector{
				sel(Unset, "version"),
				sel(NoFallback, "version", "hardware", "stage"),
				sel(DefaultSubset, "version", "hardware"),
				{Keys: []string{"version", "stage"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"version"}}}},
			hosts: []Host{host("80", "version", "1.0", "hardware", "c32"), host("81", "version", "1.0", "hardware", "c32", "foo", "bar"),
				host("82", "version", "2.0", "hardware", "c32", "stage", "dev"), host("83", "version", "2.0")},
			steps: []envoyStep{
				pick(md("version", "1.0", "hardware", "c32"), "80", "81"),
				pick(md("version", "x", "hardware", "c32"), "81"),
				pickErr(md("version", "2.0", "hardware", "zzz", "stage", "dev")),
				pickErr(md("version", "2.0", "hardware", "c32", "stage", "x")),
				pick(md("version", "2.0", "hardware", "c32", "stage", "dev"), "82"),
				pick(md("version", "2.0"), "82", "83"),
				pick(md("version", "2.0", "stage", "dev"), "82"),
				pick(md("version", "2.0", "stage", "canary"), "82", "83")}},
		{name: "KeysSubsetFallbackChained",
			cfg: Config{FallbackPolicy: NoFallback, Selectors: []Selector{
				sel(NoFallback, "stage"),
				{Keys: []string{"stage", "version"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"stage"}},
				{Keys: []string{"stage", "version", "hardware"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"version", "stage"}}}},
			hosts: []Host{host("80", "version", "1.0", "hardware", "c32", "stage", "dev"),
				host("81", "version", "2.0", "hardware", "c64", "stage", "dev"),
				host("82", "version", "1.0", "hardware", "c32", "stage", "test")},
			steps: []envoyStep{
				pick(md("version", "1.0", "hardware", "c32", "stage", "dev"), "80"),
				pick(md("version", "2.0", "hardware", "arm", "stage", "dev"), "81"),
				pick(md("version", "1.2", "hardware", "arm", "stage", "dev"), "80", "81")}},
		{name: "KeysSubsetFallbackToNotExistingSelector",
			cfg: Config{Selectors: []Selector{
				{Keys: []string{"stage", "version"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"stage"}}}},
			hosts: []Host{host("80", "version", "1.0", "stage", "dev")},
			steps: []envoyStep{pick(md("version", "1.0", "stage", "test"), "80")}},
	})
}

// TestEnvoySubsetLoadBalancerNewOptions: Envoy's tests of the options added
// by issue 18 (allow_redundant_keys, metadata_fallback_policy).
func TestEnvoySubsetLoadBalancerNewOptions(t *testing.T) {
	// Envoy's fallback_list is a key of the request's metadata; here it is
	// Request.FallbackList. An entry that is not a struct counts in Envoy
	// as an empty struct (Value::struct_value()), here an empty Labels; a
	// fallback_list that is not a list counts as an empty list.
	list := func(meta map[string]string, entries ...map[string]string) *Request {
		r := &Request{Metadata: label.FromMap(meta)}
		for _, e := range entries {
			r.FallbackList = append(r.FallbackList, label.FromMap(e))
		}
		return r
	}
	req := func(r *Request, want ...string) envoyStep { return envoyStep{req: r, want: want} }
	reqErr := func(r *Request) envoyStep { return envoyStep{req: r, wantErr: ErrNoSubset} }
	abcd := func(id, n string, d ...string) Host {
		dv := "D-V-" + n
		if len(d) > 0 {
			dv = d[0]
		}
		return host(id, "A", "A-V-"+n, "B", "B-V-"+n, "C", "C-V-"+n, "D", dv)
	}
	hwStage := []Host{host("80", "hardware", "c32", "stage", "production"),
		host("81", "hardware", "c64", "stage", "canary"), host("82", "hardware", "c64", "stage", "production")}

	runEnvoyCases(t, []envoyCase{
		{name: "AllowRedundantKeysForSubset",
			cfg: Config{FallbackPolicy: NoFallback, AllowRedundantKeys: true, Selectors: []Selector{
				sel(NoFallback, "A"), sel(NoFallback, "A", "B"), sel(NoFallback, "A", "B", "C"),
				sel(NoFallback, "A", "D"), sel(NoFallback, "version", "stage")}},
			hosts: []Host{abcd("80", "0"), abcd("81", "1"), abcd("82", "2"), abcd("83", "3"), abcd("84", "4"),
				host("85", "version", "1.0", "stage", "dev"), host("86", "version", "1.0", "stage", "canary")},
			steps: []envoyStep{
				pickErr(nil),
				// The same keys as {version, stage}.
				pick(md("version", "1.0", "stage", "canary"), "86"),
				// A superset of {version, stage}: the redundant key is ignored...
				pick(md("version", "1.0", "stage", "dev", "redundant", "X"), "85"),
				// ... and a value that matches no host still fails.
				pickErr(md("version", "1.0", "stage", "prod", "redundant", "X")),
				// The same keys as {A, B, C}, a superset of {A} and {A, B}.
				pick(md("A", "A-V-0", "B", "B-V-0", "C", "C-V-0"), "80"),
				pickErr(md("A", "A-V-0", "B", "B-V-0", "C", "C-V-X")),
				// A superset of {A}, {A, B}, {A, B, C}, {A, D}: the longest wins.
				pick(md("A", "A-V-1", "B", "B-V-1", "C", "C-V-1", "D", "D-V-X"), "81"),
				pickErr(md("A", "A-V-1", "B", "B-V-1", "C", "C-V-X", "D", "D-V-X")),
				// A superset of {A}, {A, B}, {A, D}: the longest and first wins.
				pick(md("A", "A-V-2", "B", "B-V-2", "D", "D-V-X"), "82"),
				pickErr(md("A", "A-V-3", "B", "B-V-X", "D", "D-V-3")),
				// A superset of {A}, {A, D}.
				pick(md("A", "A-V-3", "C", "C-V-X", "D", "D-V-3"), "83")}},
		{name: "MetadataFallbackList",
			cfg:   Config{FallbackPolicy: NoFallback, MetadataFallbackPolicy: FallbackList, Selectors: []Selector{sel(Unset, "version")}},
			hosts: []Host{host("80", "version", "1.0"), host("81", "version", "2.0"), host("82", "version", "3.0")},
			steps: []envoyStep{
				pickErr(nil),
				reqErr(list(nil)),
				// Version 2.0 is preferred...
				req(list(nil, md("version", "2.0"), md("version", "1.0")), "81"),
				remove("81"),
				// ... and 1.0 is the fallback once 2.0's host is gone.
				req(list(nil, md("version", "2.0"), md("version", "1.0")), "80"),
				// A fallback_list that is not a list: the metadata alone.
				req(list(md("version", "3.0")), "82"),
				// An entry that is not a struct is an empty entry.
				req(list(nil, md(), md("version", "1.0")), "80"),
				// Metadata with no fallback list works as usual.
				pick(md("version", "1.0"), "80"),
				// A fallback entry's value overrides the metadata's.
				req(list(md("version", "1.0"), md("hardware", "arm"), md("version", "5.0"), md("version", "3.0")), "82")}},
		{name: "MetadataFallbackDisabled",
			cfg:   Config{FallbackPolicy: NoFallback, MetadataFallbackPolicy: MetadataNoFallback, Selectors: []Selector{sel(Unset, "fallback_list")}},
			hosts: []Host{host("80", "fallback_list", "lorem"), host("81", "fallback_list", "ipsum")},
			steps: []envoyStep{
				// "fallback_list" is an ordinary key...
				pick(md("fallback_list", "ipsum"), "81"),
				// ... and, the policy being off, a request's list is ignored
				// (Sextant: the list is not part of the metadata).
				req(list(md("fallback_list", "ipsum"), md("fallback_list", "lorem")), "81")}},
		{name: "MetadataFallbackAndSubsetFallback",
			cfg: Config{FallbackPolicy: AnyEndpoint, MetadataFallbackPolicy: FallbackList, Selectors: []Selector{
				sel(NoFallback, "hardware"),
				{Keys: []string{"hardware", "stage"}, FallbackPolicy: KeysSubset, FallbackKeysSubset: []string{"hardware"}}}},
			hosts: hwStage,
			steps: []envoyStep{
				// The first entry answers through the selector's KEYS_SUBSET
				// fallback, though 81 matches the second exactly.
				req(list(md("stage", "canary"), md("hardware", "c32"), md("hardware", "c64")), "80"),
				// The first entry answers nothing, even with the fallbacks.
				req(list(md("stage", "canary"), md("hardware", "c16"), md("hardware", "c64")), "81"),
				// The first entry names no selector: the cluster's ANY_ENDPOINT.
				req(list(nil, md("unknown", "ipsum"), md("hardware", "c64")), "80", "81", "82")}},
	})
}

// TestEnvoySingleHostPerSubset is Envoy's
// SubsetLoadBalancerSingleHostPerSubsetTest suite: one selector {key} with
// single_host_per_subset and ANY_ENDPOINT unless a case says otherwise.
func TestEnvoySingleHostPerSubset(t *testing.T) {
	single := func(keys ...string) Selector { return Selector{Keys: keys, SingleHostPerSubset: true} }
	keyCfg := Config{Selectors: []Selector{single("key")}}
	initHosts := []Host{host("80"), host("81", "key", "a"), host("82", "key", "b")}
	versionStage := []Host{host("80"),
		host("81", "version", "v1", "stage", "dev"), host("82", "version", "v1", "stage", "dev"),
		host("83", "version", "v1", "stage", "prod"), host("84", "version", "v1", "stage", "prod"),
		host("85", "version", "v2", "stage", "dev"), host("86", "version", "v2", "stage", "dev"),
		host("87", "version", "v2", "stage", "prod"), host("88", "version", "v2", "stage", "prod")}

	runEnvoyCases(t, []envoyCase{
		{name: "AcceptMultipleSelectors",
			cfg:   Config{FallbackPolicy: NoFallback, Selectors: []Selector{sel(Unset, "version"), single("stage")}},
			hosts: versionStage,
			steps: []envoyStep{
				pick(md("version", "v1"), "81", "82", "83", "84"),
				pick(md("version", "v2"), "85", "86", "87", "88"),
				pick(md("stage", "dev"), "81"),
				pick(md("stage", "prod"), "83"),
				pickErr(md("stage", "test"))}},
		{name: "AcceptMultipleKeys",
			cfg:   Config{FallbackPolicy: NoFallback, Selectors: []Selector{single("version", "stage")}},
			hosts: versionStage,
			steps: []envoyStep{
				pick(md("version", "v1", "stage", "dev"), "81"),
				pick(md("version", "v1", "stage", "prod"), "83"),
				pick(md("version", "v2", "stage", "dev"), "85"),
				pick(md("version", "v2", "stage", "prod"), "87"),
				pickErr(md("version", "v2", "stage", "test"))}},
		{name: "HybridMultipleSelectorsAndKeys",
			cfg:   Config{FallbackPolicy: NoFallback, Selectors: []Selector{single("version", "stage"), sel(Unset, "stage")}},
			hosts: versionStage,
			steps: []envoyStep{
				pick(md("version", "v1", "stage", "dev"), "81"),
				pick(md("version", "v1", "stage", "prod"), "83"),
				pick(md("version", "v2", "stage", "dev"), "85"),
				pick(md("version", "v2", "stage", "prod"), "87"),
				pickErr(md("version", "v2", "stage", "test")),
				pick(md("stage", "dev"), "81", "82", "85", "86"),
				pick(md("stage", "prod"), "83", "84", "87", "88"),
				pickErr(md("stage", "test"))}},
		// Envoy counts the two duplicates of "a" in a gauge; here: they get
		// no traffic.
		{name: "DuplicateMetadataStat", cfg: keyCfg,
			hosts: []Host{host("80", "key", "a"), host("81", "key", "a"), host("82", "key", "a"), host("83", "key", "b")},
			steps: []envoyStep{pick(md("key", "a"), "80"), pick(md("key", "b"), "83")}},
		{name: "Match", cfg: keyCfg, hosts: initHosts, steps: []envoyStep{
			pick(md("key", "a"), "81"),
			pick(md("key", "b"), "82")}},
		{name: "FallbackOnUnknownMetadata", cfg: keyCfg, hosts: initHosts, steps: []envoyStep{
			pick(md("unknown", "unknown"), "80", "81", "82"),
			pick(md("key", "unknown"), "80", "81", "82")}},
		{name: "Update", cfg: keyCfg, hosts: initHosts, steps: []envoyStep{
			pick(md("key", "a"), "81"),
			pick(md("key", "b"), "82"),
			pick(md("key", "c"), "80", "81", "82"), // fallback
			modify([]Host{host("8000", "key", "c")}, "82"),
			pick(md("key", "a"), "81"),
			pick(md("key", "c"), "8000"),
			pick(md("key", "b"), "80", "81", "8000")}}, // fallback
	})
}

// TestEnvoyLoadBalancerTypes is Envoy's LoadBalancerTypes* cases
// (doChildLbNameTest), run with each of Sextant's child policies instead of
// Envoy's.
func TestEnvoyLoadBalancerTypes(t *testing.T) {
	var cases []envoyCase
	for _, name := range balancer.Names() {
		cases = append(cases, envoyCase{name: "LoadBalancerTypes/" + name, policy: name,
			hosts: []Host{host("80", "version", "1.0")},
			steps: []envoyStep{
				pick(nil, "80"),
				modify([]Host{host("8000", "version", "1.0")}, "80"),
				pick(nil, "8000")}})
	}
	runEnvoyCases(t, cases)
}
