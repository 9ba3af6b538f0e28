package main

import (
	"math"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  bool
	}{
		{in: "450MiB", want: 450 << 20},
		{in: "2GiB", want: 2 << 30},
		{in: "1TiB", want: 1 << 40},
		{in: "512KiB", want: 512 << 10},
		{in: "500MB", want: 500e6},
		{in: "1GB", want: 1e9},
		{in: "123456", want: 123456},
		{in: "100B", want: 100},
		{in: "off", want: math.MaxInt64},
		{in: " 64MiB ", want: 64 << 20},
		{in: "0", err: true},
		{in: "-1MiB", err: true},
		{in: "MiB", err: true},
		{in: "1.5GiB", err: true},
		{in: "10XB", err: true},
		{in: "9000000TiB", err: true}, // overflows
	} {
		got, err := parseMemoryLimit(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestShouldRelease(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		sinceRelease, lastTick, live uint64
		want                         bool
	}{
		{"quiet after a burst", 300 << 20, 10 << 10, 330 << 20, true},
		{"still busy", 300 << 20, 50 << 20, 330 << 20, false},
		{"quiet, nothing to return", 10 << 20, 0, 1 << 20, false},
		{"at the thresholds", releaseBurst, releaseQuiet - 1, 0, true},
		{"just busy", releaseBurst, releaseQuiet, 0, false},
		{"burst small for the heap", 100 << 20, 0, 330 << 20, false},
		{"half the heap", 165 << 20, 0, 330 << 20, true},
	} {
		if got := shouldRelease(tc.sinceRelease, tc.lastTick, tc.live); got != tc.want {
			t.Errorf("%s: shouldRelease(%d, %d, %d) = %v, want %v", tc.name, tc.sinceRelease, tc.lastTick, tc.live, got, tc.want)
		}
	}
}
