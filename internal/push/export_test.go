package push

import "time"

// SetSlowConfig makes every config round of e run f first (tests: an
// artificially slow recomputation).
func SetSlowConfig(e *Engine, f func()) { e.slowConfig = f }

// SetSlowBuild makes every config round of e run f before building each
// service (tests: a round held between services).
func SetSlowBuild(e *Engine, f func()) { e.slowBuild = f }

// SetSlowEndpoints makes the endpoint worker run f before recomputing each
// service (tests: endpoint work held).
func SetSlowEndpoints(e *Engine, f func()) { e.slowEP = f }

// SetServerGrace sets how long a server listener is kept without a
// subscriber (tests).
func SetServerGrace(d time.Duration) { serverGrace.Store(int64(d)) }
