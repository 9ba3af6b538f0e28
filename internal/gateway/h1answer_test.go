package gateway

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestAnswerWriterDate: an answer goes out with its own Date (of the
// usual length, of another, none at all) and nothing else changed, whether
// its head is built in the writer's buffer or beside it (a small buffer, a
// buffer mostly full, a head larger than it).
func TestAnswerWriterDate(t *testing.T) {
	for _, date := range []string{"Mon, 02 Jan 2006 15:04:05 GMT", "Monday, 02-Jan-06 15:04:05 GMT", "1", ""} {
		for _, server := range []string{"", "up"} {
			for _, big := range []int{0, 5000} {
				for _, fill := range []int{0, 3000} {
					// As the upstream leg has it: parsed (fasthttp's Set
					// drops a Date).
					raw := "HTTP/1.1 201 Created\r\n"
					if server != "" {
						raw += "Server: " + server + "\r\n"
					}
					raw += "X-A: 1\r\n"
					if date != "" {
						raw += "Date: " + date + "\r\n"
					}
					raw += "X-Big: " + strings.Repeat("b", big) + "\r\nX-Z: 2\r\nContent-Length: 5\r\n\r\nhello"
					var resp fasthttp.Response
					if err := resp.Read(bufio.NewReaderSize(strings.NewReader(raw), 8192)); err != nil {
						t.Fatal(err)
					}
					var out bytes.Buffer
					w := bufio.NewWriterSize(&out, 4096)
					w.WriteString(strings.Repeat("p", fill))
					var a answerWriter
					for range 2 { // the second with a.head as left by the first
						if err := a.write(w, &resp); err != nil {
							t.Fatal(err)
						}
					}
					w.Flush()
					br := bufio.NewReader(bytes.NewReader(out.Bytes()[fill:]))
					for n := range 2 {
						got, err := http.ReadResponse(br, nil)
						if err != nil {
							t.Fatalf("date %q server %q big %d fill %d answer %d: %v\n%s", date, server, big, fill, n, err, out.Bytes()[fill:])
						}
						body, _ := io.ReadAll(got.Body)
						want := []string(nil)
						if date != "" {
							want = []string{date}
						}
						if d := got.Header.Values("Date"); strings.Join(d, "|") != strings.Join(want, "|") || got.StatusCode != 201 || string(body) != "hello" ||
							got.Header.Get("Server") != server || got.Header.Get("X-A") != "1" || got.Header.Get("X-Z") != "2" || len(got.Header.Get("X-Big")) != big {
							t.Errorf("date %q server %q big %d fill %d answer %d: %d %q, Date %q, Server %q, X-Big %d bytes", date, server, big, fill, n, got.StatusCode, body, d, got.Header.Get("Server"), len(got.Header.Get("X-Big")))
						}
					}
				}
			}
		}
	}
}

// BenchmarkAnswerWrite: a typical answer's head and 1 KiB body written by
// answerWriter (the endpoint's Date put back in place) and, for scale, by
// fasthttp's Response.Write (which puts the current time instead).
func BenchmarkAnswerWrite(b *testing.B) {
	raw := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nDate: Mon, 02 Jan 2006 15:04:05 GMT\r\nContent-Length: 1024\r\n\r\n" + strings.Repeat("x", 1024)
	var resp fasthttp.Response
	if err := resp.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		b.Fatal(err)
	}
	resp.Header.Set("Via", "1.1 sextant")
	resp.Header.Set("X-Request-Id", "0123456789abcdef0123456789abcdef")
	w := bufio.NewWriterSize(io.Discard, 4096)
	var a answerWriter // as a connection keeps it
	for _, tc := range []struct {
		name  string
		write func() error
	}{
		{"answerWriter", func() error { return a.write(w, &resp) }},
		{"fasthttp", func() error { return resp.Write(w) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := tc.write(); err != nil {
					b.Fatal(err)
				}
				w.Flush()
			}
		})
	}
}
