// Package manifest reads Kubernetes-style manifests, the form every object a
// user writes to Sextant takes (Istio routing config, Nodes, Pods): a YAML or
// JSON stream of documents separated by "---" lines. It splits a stream into
// documents that remember where they start, converts each to JSON with any
// syntax error at the line of the stream it is on, and words what an object
// is when it is not what a command or an API reads ("this is a
// VirtualService, not a Pod").
//
// It owns no kind: internal/config decodes routing config, internal/placement
// Nodes and Pods, from what this package gives them.
package manifest
