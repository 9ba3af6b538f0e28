package manifest

import (
	"fmt"
	"strings"
)

// destination is where objects of one kind go.
type destination struct {
	group, kind string // group "" is Kubernetes' core group (apiVersion v1)
	goes        string
}

// destinations are the kinds Sextant reads, with the command and API that
// take them.
var destinations = []destination{
	{"networking.istio.io", "VirtualService", `routing config goes to "sextant config apply" (POST /v1/config:apply)`},
	{"networking.istio.io", "DestinationRule", `routing config goes to "sextant config apply" (POST /v1/config:apply)`},
	{"", "Pod", `Pods go to "sextant place" (POST /v1/placements)`},
	{"", "Node", `Nodes go to "sextant nodes apply" (POST /v1/nodes)`},
}

// Mismatch words an object of apiVersion and kind given where want is read
// ("a Pod", "a VirtualService or DestinationRule"): what it is, what was
// expected and, for a kind Sextant reads elsewhere, where it goes.
//
//	this is a VirtualService (networking.istio.io/v1), not a Pod: routing config goes to "sextant config apply" (POST /v1/config:apply)
func Mismatch(apiVersion, kind, want string) string {
	what := "an object without a kind"
	if kind != "" {
		what = article(kind) + " " + kind
	}
	if apiVersion != "" {
		what += " (" + apiVersion + ")"
	}
	msg := fmt.Sprintf("this is %s, not %s", what, want)
	group, _, _ := strings.Cut(apiVersion, "/")
	if !strings.Contains(apiVersion, "/") {
		group = ""
	}
	for _, d := range destinations {
		if d.kind == kind && d.group == group {
			return msg + ": " + d.goes
		}
	}
	return msg
}

func article(word string) string {
	if strings.ContainsRune("AEIOU", rune(word[0])) {
		return "an"
	}
	return "a"
}
