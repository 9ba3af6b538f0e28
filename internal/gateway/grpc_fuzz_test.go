package gateway

import (
	"strconv"
	"testing"
	"time"
)

// FuzzGRPCTimeout holds parseGRPCTimeout to the spec's grammar: it accepts
// exactly 1 to 8 digits and a unit, never panics, never returns a negative
// duration, and reads back what formatting a value in that grammar wrote.
func FuzzGRPCTimeout(f *testing.F) {
	for _, s := range []string{"1S", "300m", "99999999H", "0n", "12u", "5M", "", "S", "123456789S", "1s", "-1S", "1 S"} {
		f.Add(s)
	}
	units := map[byte]time.Duration{'H': time.Hour, 'M': time.Minute, 'S': time.Second, 'm': time.Millisecond, 'u': time.Microsecond, 'n': time.Nanosecond}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseGRPCTimeout([]byte(s))
		valid := len(s) >= 2 && len(s) <= 9 && units[s[len(s)-1]] != 0
		for i := 0; valid && i < len(s)-1; i++ {
			valid = s[i] >= '0' && s[i] <= '9'
		}
		if valid != (err == nil) {
			t.Fatalf("%q: valid %v, err %v", s, valid, err)
		}
		if err != nil {
			return
		}
		if d < 0 {
			t.Fatalf("%q: negative %v", s, d)
		}
		n, _ := strconv.ParseInt(s[:len(s)-1], 10, 64)
		unit := units[s[len(s)-1]]
		if n <= int64(maxGRPCTimeout/unit) && d != time.Duration(n)*unit {
			t.Fatalf("%q read as %v", s, d)
		}
	})
}
