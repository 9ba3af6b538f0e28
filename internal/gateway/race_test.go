//go:build race

package gateway_test

// raceEnabled: the race detector slows byte copying several times over;
// the 1 GiB streaming test moves 256 MiB under it.
const raceEnabled = true
