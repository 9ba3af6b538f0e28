package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/sextant-mesh/sextant/internal/calllog"
)

// CallRecord is one attempt of a call made through a RoundTripper. A
// CallLog keeps it in the call log the gateway writes too (internal/calllog,
// docs/gateway.md "Call records"): the same layout, queries and statistics.
type CallRecord struct {
	Start    time.Time     // when the attempt was sent
	Latency  time.Duration // until the answer's headers, or the error
	Service  string        // "namespace/service"
	Endpoint string        // host:port called
	Status   int           // HTTP status, 0 when no answer came
	Outcome  Outcome
	Attempt  int // 0 for the first try, 1 for the first retry, ...
}

// CallRecorder receives one record per attempt of a RoundTripper. Called
// from the goroutines making requests, concurrently; it must not block for
// long.
type CallRecorder interface {
	RecordCall(CallRecord) error
}

// Call is one recorded call as CallLog.Calls returns it.
type Call = calllog.Call

// CallStep is one step of CallLog.Stats: count, errors, average and
// p50/p90/p99 latency.
type CallStep = calllog.Step

// CallLog is a CallRecorder that keeps records in a directory in Sextant's
// call log: partitioned by service, time-ordered, compressed, with latency
// windows, statistics per step and retention (docs/callstore.md). Recording
// never blocks: a record is queued for the log's writer goroutine, and
// dropped (and counted) if the queue is full. Safe for concurrent use.
type CallLog struct{ l *calllog.Log }

// CallLogOptions tune a CallLog; zero values are defaults (records kept 7
// days, at most 10 GiB).
type CallLogOptions struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// OpenCallLog opens (or creates) a call log in dir.
func OpenCallLog(dir string, opts ...CallLogOptions) (*CallLog, error) {
	var o CallLogOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	l, err := calllog.Open(calllog.Options{Dir: dir, MaxAge: o.MaxAge, MaxBytes: o.MaxBytes})
	if err != nil {
		return nil, fmt.Errorf("client: call log: %w", err)
	}
	return &CallLog{l: l}, nil
}

// outcomeReason maps an attempt's outcome to the log's reason for a call
// that got no answer.
func outcomeReason(r CallRecord) calllog.Reason {
	if r.Status != 0 {
		return calllog.ReasonNone
	}
	switch r.Outcome {
	case OutcomeTimeout:
		return calllog.ReasonTimeout
	case OutcomeRejected:
		return calllog.ReasonShed
	case OutcomeFailed:
		return calllog.ReasonConnect
	}
	return calllog.ReasonOther
}

// RecordCall queues one record; it never blocks.
func (l *CallLog) RecordCall(r CallRecord) error {
	if r.Service == "" {
		return errors.New("client: call log: a record needs its service")
	}
	l.l.Record(calllog.Record{
		Start: r.Start.UnixNano(), Latency: r.Latency, Service: r.Service, Cluster: r.Service,
		Endpoint: r.Endpoint, Status: uint16(r.Status), Retries: uint8(min(r.Attempt, 255)),
		Reason: outcomeReason(r),
	})
	return nil
}

// Calls returns the calls of service that started in [from, to] with a
// latency in [minLatency, maxLatency] (0: no upper bound), oldest first,
// at most limit (0: 1000), and whether more matched. Records become
// visible within a second, and at once after Sync.
func (l *CallLog) Calls(service string, from, to time.Time, minLatency, maxLatency time.Duration, limit int) ([]Call, bool, error) {
	calls, more, err := l.l.Calls(calllog.Query{Service: service, From: from, To: to,
		MinLatency: minLatency, MaxLatency: maxLatency, Limit: limit})
	if err != nil {
		return nil, false, fmt.Errorf("client: call log: %w", err)
	}
	return calls, more, nil
}

// Stats returns per-step statistics of service's calls in [from, to).
func (l *CallLog) Stats(service string, from, to time.Time, step time.Duration) ([]CallStep, error) {
	steps, err := l.l.Stats(calllog.StatsQuery{Service: service, From: from, To: to, Step: step})
	if err != nil {
		return nil, fmt.Errorf("client: call log: %w", err)
	}
	return steps, nil
}

// Sync makes every record so far visible to queries (durable within 10 s,
// and at Close).
func (l *CallLog) Sync() error {
	if err := l.l.Flush(); err != nil {
		return fmt.Errorf("client: call log: %w", err)
	}
	return nil
}

// Dropped is how many records were dropped because the writer fell behind.
func (l *CallLog) Dropped() uint64 { _, d := l.l.Counts(); return d }

// Close writes what is queued and closes the log.
func (l *CallLog) Close() error {
	if err := l.l.Close(); err != nil {
		return fmt.Errorf("client: call log: %w", err)
	}
	return nil
}
