package pipeline

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/pipeline/flatten"
)

// logBuf collects JSON log records.
type logBuf struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuf) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(b)
}

// records returns the log records whose msg starts with prefix.
func (l *logBuf) records(t *testing.T, prefix string) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(m["msg"].(string), prefix) {
			out = append(out, m)
		}
	}
	return out
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// refusingSink refuses the first `refuse` writes as ClickHouse does when a
// table is missing or its sharding key is of the wrong type; it may wait on
// gate before each refusal (to look at the state in between).
type refusingSink struct {
	memSink
	refuse int
	err    error
	gate   chan struct{}
}

func (s *refusingSink) Write(ctx context.Context, b *flatten.Batch) error {
	s.mu.Lock()
	n := s.refuse
	if n > 0 {
		s.refuse--
	}
	s.mu.Unlock()
	if n > 0 {
		if s.gate != nil {
			select {
			case <-s.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return s.err
	}
	return s.memSink.Write(ctx, b)
}

var errCode43 = &WriteError{
	Table: flatten.TableAnswers, Code: 43, Refused: true,
	Message: "Unexpected type UUID of argument of function cityHash64",
	Err:     errors.New("clickhouse: insert 4 rows into db.answers: code: 43, message: Unexpected type UUID of argument of function cityHash64"),
}

// A warehouse that refuses every write: one log line per back-off step with
// the table, code, message, attempt and wait; the gauge and WriteStatus
// say so while it lasts; the waits grow to RefusedRetryMax and no further;
// once the table is fixed, one recovery line, the gauge back at 0, and
// every response written once with nothing rejected.
func TestRefusedWritesAreVisibleAndNothingIsLost(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var logs logBuf
	reg := prometheus.NewRegistry()
	rej := &memRejects{}
	const refusals = 8
	sink := &refusingSink{refuse: refusals, err: errCode43, gate: make(chan struct{})}
	p := New(Options{
		Allocator: mem, MaxRows: 1_000_000, MaxDelay: 5 * time.Millisecond,
		RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond, RefusedRetryMax: 8 * time.Millisecond,
		Rejects: rej, Registerer: reg, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 4 {
		if err := p.Submit(context.Background(), acks.ref(i, "poll")); err != nil {
			t.Fatal(err)
		}
	}
	gauge := func(table, class string) float64 {
		return testutil.ToFloat64(p.m.writeFailing.WithLabelValues(table, class))
	}
	sink.gate <- struct{}{} // first refusal
	sink.gate <- struct{}{} // second: the first has been recorded
	st := p.WriteStatus()
	if !st.Failing || st.Table != "answers" || st.Code != 43 || st.Class != WriteRefused ||
		!strings.Contains(st.Message, "cityHash64") || st.Attempts < 1 || st.Responses != 4 || st.Since.IsZero() {
		t.Fatalf("WriteStatus while refused = %+v", st)
	}
	if g := gauge("answers", WriteRefused); g != 1 {
		t.Fatalf("surveysync_sink_write_failing{table=answers,class=refused} = %v while refused, want 1", g)
	}
	if g := gauge("answers", WriteTransient) + gauge("responses", WriteRefused); g != 0 {
		t.Fatalf("other failing series = %v, want 0", g)
	}
	for range refusals - 2 {
		sink.gate <- struct{}{}
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 4)
	if len(sink.rows) != 4 || len(rej.all()) != 0 {
		t.Fatalf("%d responses written, %d rejected; want 4 and 0", len(sink.rows), len(rej.all()))
	}
	if g := gauge("answers", WriteRefused); g != 0 {
		t.Fatalf("failing gauge after recovery = %v, want 0", g)
	}
	if st := p.WriteStatus(); st.Failing || st.LastWrite.IsZero() {
		t.Fatalf("WriteStatus after recovery = %+v", st)
	}
	steps := logs.records(t, "the warehouse refuses the write")
	if len(steps) != refusals {
		t.Fatalf("%d back-off log lines for %d refused attempts, want one each:\n%s", len(steps), refusals, logs.String())
	}
	for i, r := range steps {
		if r["level"] != "ERROR" || r["table"] != "answers" || r["code"] != "43" || !strings.Contains(r["message"].(string), "cityHash64") ||
			r["attempt"] != float64(i+1) || r["retry_in"] == nil {
			t.Fatalf("back-off line %d = %v", i, r)
		}
		// retry_in is the jittered wait: at most the cap.
		if d := time.Duration(r["retry_in"].(float64)); d > 8*time.Millisecond {
			t.Fatalf("back-off line %d waits %v, cap 8ms", i, d)
		}
	}
	if n := len(logs.records(t, "sink writes succeed again")); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, logs.String())
	}
	if strings.Contains(logs.String(), "response rejected") || strings.Contains(logs.String(), string(id(1))) {
		t.Fatalf("refused writes were logged per response:\n%s", logs.String())
	}
}

// A transient failure (no WriteError, or one not refused) is class
// transient and backs off up to RetryMax only.
func TestTransientWriteFailureClass(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var logs logBuf
	sink := &refusingSink{refuse: 6, err: errors.New("clickhouse: dial tcp 127.0.0.1:9000: connection refused")}
	p := New(Options{
		Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	if err := p.Submit(context.Background(), acks.ref(1, "poll")); err != nil {
		t.Fatal(err)
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 1)
	steps := logs.records(t, "sink write failed")
	if len(steps) != 6 {
		t.Fatalf("%d back-off lines, want 6:\n%s", len(steps), logs.String())
	}
	for _, r := range steps {
		d := time.Duration(r["retry_in"].(float64))
		if r["level"] != "WARN" || r["class"] != WriteTransient || r["code"] != "none" || d > 2*time.Millisecond {
			t.Fatalf("transient back-off line = %v", r)
		}
	}
}

// A batch every response of which the sink refuses permanently one by one
// (a column's type changed: each insert fails to convert) is a table
// problem: one log line per round, not per response, the state names the
// table, nothing is rejected.
func TestEveryResponseRefusedLogsOncePerRound(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	var logs logBuf
	rej := &memRejects{}
	typeErr := &WriteError{Table: flatten.TableResponses, Code: 53, Refused: true, Message: "Type mismatch in IN or VALUES section",
		Err: permanent.Errorf("insert_rejected", "clickhouse: code: 53, message: Type mismatch in IN or VALUES section")}
	// 4 responses: batch, halves, quarters = 7 refusals per round; 2 rounds.
	sink := &refusingSink{refuse: 14, err: typeErr}
	p := New(Options{Allocator: mem, MaxRows: 1_000_000, MaxDelay: 20 * time.Millisecond, RetryInitial: time.Millisecond,
		Rejects: rej, Logger: slog.New(slog.NewJSONHandler(&logs, nil))}, &fakeFetcher{}, sink)
	done := run(t, p, context.Background())
	var acks ackLog
	for i := range 4 {
		if err := p.Submit(context.Background(), acks.ref(i, "poll")); err != nil {
			t.Fatal(err)
		}
	}
	// The first round ends with the warehouse known to refuse.
	deadline := time.Now().Add(10 * time.Second)
	for !p.refusing() {
		if time.Now().After(deadline) {
			t.Fatal("the pipeline never saw the table refuse the batch")
		}
		time.Sleep(time.Millisecond)
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 4)
	if len(rej.all()) != 0 || len(sink.rows) != 4 {
		t.Fatalf("%d rejects, %d written; want 0 and 4", len(rej.all()), len(sink.rows))
	}
	if n := len(logs.records(t, "the warehouse refuses the write")); n != 2 {
		t.Fatalf("%d back-off lines for 2 rounds, want 2:\n%s", n, logs.String())
	}
	if n := len(logs.records(t, "sink refused a batch permanently")); n != 1 {
		t.Fatalf("%d 'writing in parts' lines, want 1 (not repeated every round):\n%s", n, logs.String())
	}
}

// While the warehouse refuses everything, a single-response batch refused
// permanently waits with the others instead of being rejected.
func TestSingleResponseWaitsWhileWarehouseRefuses(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	rej := &memRejects{}
	typeErr := &WriteError{Table: flatten.TableAnswers, Code: 70, Refused: true, Message: "cannot convert",
		Err: permanent.Errorf("bad_value", "clickhouse: cannot convert")}
	sink := &refusingSink{refuse: 5, err: typeErr}
	p := New(Options{Allocator: mem, MaxDelay: time.Millisecond, RetryInitial: time.Millisecond, Rejects: rej}, &fakeFetcher{}, sink)
	// The warehouse was already seen refusing (an earlier batch).
	p.failing(typeErr, WriteRefused, 2)
	done := run(t, p, context.Background())
	var acks ackLog
	if err := p.Submit(context.Background(), acks.ref(1, "webhook")); err != nil {
		t.Fatal(err)
	}
	p.CloseInput()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	acks.check(t, 1)
	if len(rej.all()) != 0 || len(sink.rows) != 1 {
		t.Fatalf("%d rejects, %d written; want 0 and 1", len(rej.all()), len(sink.rows))
	}
}
