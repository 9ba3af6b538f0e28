// Package acl owns Sextant's access control: tokens (a random secret shown
// once, stored as a SHA-256 hash, compared in constant time, named by an
// accessor id that is not secret), policies (read or write on instances,
// routing config, placements and push status per namespace, exact or by
// prefix, plus admin), the check every API calls, per-caller rate limits
// and the audit log of writes and denials.
//
// Tokens and policies are records of the store's Tokens and Policies kinds,
// written through the write engine's group commit by the appliers in write.go
// and held in memory by the catalog tables in table.go; every change
// rebuilds one immutable snapshot of compiled permissions that the checks
// read with one atomic load. A deleted token is gone from the snapshot
// before its delete is answered, so revocation holds from the next request.
//
// How an API adopts it: HTTP routes go through Guard.Wrap (or the httpapi
// handler, which calls Guard.Begin and Guard.End), gRPC servers install
// Guard.UnaryInterceptor and Guard.StreamInterceptor; then each handler
// calls Require (or RequireContext) with the permission it needs, and
// Readable to filter what a caller may list or subscribe to. A handler
// that was not wrapped is denied: the check fails closed.
//
// The package does not serve the /v1/acl routes (internal/httpapi does),
// does not terminate TLS (the listeners do) and does not store anything
// itself (the registry does).
package acl
