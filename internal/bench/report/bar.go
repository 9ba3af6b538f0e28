package report

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// Bar is a progress bar on w, which is stderr in the CLI so that stdout
// holds only the JSON object. With a nil w every method does nothing, so a
// scenario needs no branches for a quiet run. A nil *Bar does nothing too.
type Bar struct {
	pb   *progressbar.ProgressBar
	poll func() int64 // PollBar and TimeBar: what to show
	max  int64
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// throttle bounds how often a bar redraws: drawing must not cost the
// loader CPU it shares with the server.
const throttle = 200 * time.Millisecond

func newBar(w io.Writer, desc string, total int64, count bool) *Bar {
	if w == nil || total <= 0 {
		return &Bar{}
	}
	opts := []progressbar.Option{progressbar.OptionSetWriter(w), progressbar.OptionSetDescription(desc),
		progressbar.OptionThrottle(throttle), progressbar.OptionClearOnFinish()}
	if count {
		opts = append(opts, progressbar.OptionShowCount())
	}
	return &Bar{pb: progressbar.NewOptions64(total, opts...), max: total}
}

// NewBar shows a count from 0 to total that the scenario advances with Add.
func NewBar(w io.Writer, desc string, total int64) *Bar {
	return newBar(w, desc, total, true)
}

// NewPollBar shows poll() out of total, read every 200 ms by a goroutine
// of the bar's own, so a hot loop only bumps an atomic counter. The
// goroutine ends at Finish or when ctx ends; call Finish in any case.
func NewPollBar(ctx context.Context, w io.Writer, desc string, total int64, poll func() int64) *Bar {
	b := newBar(w, desc, total, true)
	b.follow(ctx, poll)
	return b
}

// NewTimeBar shows the time elapsed out of d, for scenarios that run for a
// duration. Like a PollBar it has a goroutine that Finish stops.
func NewTimeBar(ctx context.Context, w io.Writer, desc string, d time.Duration) *Bar {
	b := newBar(w, desc, d.Milliseconds(), false)
	start := time.Now()
	b.follow(ctx, func() int64 { return time.Since(start).Milliseconds() })
	return b
}

func (b *Bar) follow(ctx context.Context, poll func() int64) {
	if b.pb == nil {
		return
	}
	b.poll, b.stop = poll, make(chan struct{})
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		tick := time.NewTicker(throttle)
		defer tick.Stop()
		for {
			select {
			case <-b.stop:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = b.pb.Set64(min(poll(), b.max))
			}
		}
	}()
}

// Add advances a NewBar by n; any goroutine may call it.
func (b *Bar) Add(n int64) {
	if b != nil && b.pb != nil {
		_ = b.pb.Add64(n)
	}
}

// Finish stops the bar's goroutine, if any, waits for it, draws the last
// value and clears the line. Later calls do nothing.
func (b *Bar) Finish() {
	if b == nil || b.pb == nil {
		return
	}
	b.once.Do(func() {
		if b.stop != nil {
			close(b.stop)
			b.wg.Wait()
			_ = b.pb.Set64(min(b.poll(), b.max))
		}
		_ = b.pb.Finish()
	})
}
