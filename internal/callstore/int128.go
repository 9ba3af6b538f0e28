package callstore

import "math/bits"

// int128 is a two's-complement 128-bit integer: sums of int64 values over
// billions of records overflow int64, and averages must stay exact.
type int128 struct {
	hi, lo uint64
}

func int128From(v int64) int128 {
	return int128{hi: uint64(v >> 63), lo: uint64(v)}
}

func (x int128) add(y int128) int128 {
	lo, c := bits.Add64(x.lo, y.lo, 0)
	hi, _ := bits.Add64(x.hi, y.hi, c)
	return int128{hi: hi, lo: lo}
}

func (x int128) addUint64(v uint64) int128 {
	lo, c := bits.Add64(x.lo, v, 0)
	return int128{hi: x.hi + c, lo: lo}
}

func (x int128) neg() int128 {
	lo, b := bits.Sub64(0, x.lo, 0)
	hi, _ := bits.Sub64(0, x.hi, b)
	return int128{hi: hi, lo: lo}
}

func (x int128) negative() bool { return int64(x.hi) < 0 }

// mulInt64 returns v*n as an int128.
func mulInt64(v int64, n uint64) int128 {
	neg := v < 0
	u := uint64(v)
	if neg {
		u = -u
	}
	hi, lo := bits.Mul64(u, n)
	r := int128{hi: hi, lo: lo}
	if neg {
		r = r.neg()
	}
	return r
}

// quo returns x/n truncated toward zero, as an int64: the mean of int64
// values always fits.
func (x int128) quo(n uint64) int64 {
	neg := x.negative()
	if neg {
		x = x.neg()
	}
	qhi := x.hi / n
	r := x.hi % n
	qlo, _ := bits.Div64(r, x.lo, n)
	_ = qhi // zero whenever x/n fits in int64, which a mean always does
	q := int64(qlo)
	if neg {
		q = -q
	}
	return q
}
