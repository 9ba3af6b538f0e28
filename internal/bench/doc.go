// Package bench holds the load generators behind "sextant bench ...". Each
// part of Sextant has one file here; every generator prints one JSON object of
// figures and reports progress on an io.Writer the caller passes (nil: none).
// It owns no server state: it drives the public client or the engines.
package bench
