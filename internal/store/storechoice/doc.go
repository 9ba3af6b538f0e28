// Package storechoice holds the measurements that chose the embedded store
// backend; it has no production code.
package storechoice
