//go:build !unix

package connlimit

// DefaultTotal is 4096 where the open-file limit is not read.
func DefaultTotal() int { return 4096 }
