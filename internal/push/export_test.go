package push

// SetSlowConfig makes every config round of e run f first (tests: an
// artificially slow recomputation).
func SetSlowConfig(e *Engine, f func()) { e.slowConfig = f }
