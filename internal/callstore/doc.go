// Package callstore owns the call-log store: an in-process, persistent,
// append-only store of one record per proxied call (t, a, a BodySize-byte body) that
// answers time-and-value window queries and averages.
//
// Many writers put concurrently, each in non-decreasing t. A merger goroutine
// merges the writers into one t order and cuts the stream into chunks; an
// encoder goroutine splits every chunk into buckets by a (so a query reads
// only the buckets whose value range it needs), stores t and a as fixed-width
// deltas apart from the bodies, and appends each chunk with large sequential
// writes. Every bucket keeps its count, sum of a and t/a bounds in a small
// in-memory index, so averages over fully covered buckets read no records.
//
// It does not own what t and a mean (the gateway decides: time and latency),
// nor retention: data only grows until the directory is removed.
// See docs/callstore.md for the file layout and the guarantees.
package callstore
