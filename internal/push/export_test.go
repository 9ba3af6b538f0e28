package push

// SetSlowConfig makes every config round of e run f first (tests: an
// artificially slow recomputation).
func SetSlowConfig(e *Engine, f func()) { e.slowConfig = f }

// SetSlowBuild makes every config round of e run f before building each
// service (tests: a round held between services).
func SetSlowBuild(e *Engine, f func()) { e.slowBuild = f }
