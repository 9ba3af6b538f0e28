// Package store defines the durable records of the registry and what every
// backend (embedded/, and MySQL next) must guarantee about them. A backend
// keeps opaque instance records by id and a revision counter that advances
// with its order of commits; it knows nothing of what a record means.
package store

import "errors"

// Op is one change to a record: a put when Value is non-nil, else a delete.
type Op struct {
	ID    string
	Value []byte
}

// Txn is the ops of one write request; a commit gives it one revision.
// A Txn with no ops still takes a revision (a health change).
type Txn struct {
	Ops []Op
}

// Record is a stored instance: its id, the revision of its last put, and
// the value as put.
type Record struct {
	ID       string
	Revision int64
	Value    []byte
}

// ErrClosed is returned by a closed store.
var ErrClosed = errors.New("store: closed")
