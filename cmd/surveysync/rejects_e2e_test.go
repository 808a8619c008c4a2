package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/survey"
)

// callCounter counts the API calls an emulator answers, by kind.
type callCounter struct {
	mu      sync.Mutex
	all     int
	lists   int
	details map[string]int // by response id
}

func (c *callCounter) snapshot() (all, lists int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.all, c.lists
}

func (c *callCounter) detail(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.details[strings.ToLower(id)]
}

// startCountingSim serves an emulator behind a handler counting its API
// calls (the control API is not counted).
func startCountingSim(t *testing.T, opts sim.Options) (*emulator, *callCounter) {
	t.Helper()
	tok := "e2e-secret-token-" + randHex(8)
	opts.Token = tok
	if opts.Now == nil {
		fixed := time.Now().UTC().Add(-time.Minute)
		opts.Now = func() time.Time { return fixed }
	}
	s, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	c := &callCounter{details: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/") {
			parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
			c.mu.Lock()
			c.all++
			switch {
			case len(parts) == 4 && parts[1] == "surveys" && parts[3] == "responses":
				c.lists++
			case len(parts) == 5 && parts[1] == "surveys" && parts[3] == "responses":
				c.details[strings.ToLower(parts[4])]++
			}
			c.mu.Unlock()
		}
		s.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(func() { srv.Close(); s.Close() })
	e := &emulator{sim: s, srv: srv}
	for _, sp := range opts.Surveys {
		e.ids = append(e.ids, sp.ID)
	}
	tokens.Store(e, tok)
	return e, c
}

// rejectStore reads one response's reject records and its written status
// from the ClickHouse database of w, or from the Parquet folder of cfg
// when w is nil.
type rejectStore struct {
	t   *testing.T
	w   *testWarehouse
	dir string // Parquet: <dir>/data
}

// rows returns how many reject records the response has, and the listed
// status of one of them.
func (s rejectStore) rows(id string) (int, string) {
	s.t.Helper()
	if s.w != nil {
		var n uint64
		var st string
		if err := s.w.conn.QueryRow(context.Background(), fmt.Sprintf(
			"SELECT count(), any(listed_status) FROM %s.rejects WHERE lower(response_id) = '%s'", s.w.db, id)).Scan(&n, &st); err != nil {
			if strings.Contains(err.Error(), "doesn't exist") || strings.Contains(err.Error(), "Unknown identifier") {
				return 0, "" // the daemon's migrations are still running
			}
			s.t.Fatal(err)
		}
		return int(n), st
	}
	files, _ := filepath.Glob(filepath.Join(s.dir, "rejects", "*.jsonl"))
	n, st := 0, ""
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // replaced meanwhile
		}
		for line := range bytes.Lines(b) {
			if bytes.Contains(bytes.ToLower(line), []byte(id)) {
				n++
				if _, after, ok := bytes.Cut(line, []byte(`"listed_status":"`)); ok {
					st, _, _ = strings.Cut(string(after), `"`)
				}
			}
		}
	}
	return n, st
}

// written returns the response's status in the warehouse ("" when it is
// not there).
func (s rejectStore) written(sid int64, id string) string {
	s.t.Helper()
	if s.w != nil {
		var st string
		err := s.w.conn.QueryRow(context.Background(), fmt.Sprintf(
			"SELECT response_status FROM %s.responses_current WHERE response_id = toUUID('%s')", s.w.db, id)).Scan(&st)
		if err != nil {
			return ""
		}
		return st
	}
	cur, err := parquet.ReadCurrent(context.Background(), s.dir, sid)
	if err != nil {
		return ""
	}
	if r, ok := cur.Responses[id]; ok && !r.Deleted {
		return r.Status
	}
	return ""
}

func waitDaemon(t *testing.T, d *daemonProc, what string, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; output:\n%s", what, timeout, tail(d.output(), 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func stopDaemon(t *testing.T, d *daemonProc) {
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
}

// Issue 19 item 2, through the real binary: one response whose detail the
// emulator serves undecodable (a fault aimed at that response only) is
// rejected. Over several reconcile passes (every 2 s) and one restart it
// is fetched once and has one reject record: the record says at which
// status it was listed, and after the restart the poller holds it as
// rejected from the records. Then its content changes (the fault is lifted
// and the service re-classifies it as disqualified): listed at another
// status it is fetched again and written, with no new record.
func TestRejectedResponseReadOnceAcrossRestarts(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 40 s per sink")
	}
	t.Run("clickhouse", func(t *testing.T) {
		testRejectedReadOnce(t, clickhouseOrSkip(t))
	})
	t.Run("parquet", func(t *testing.T) {
		testRejectedReadOnce(t, nil)
	})
}

func testRejectedReadOnce(t *testing.T, w *testWarehouse) {
	const sid = 100
	e, calls := startCountingSim(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 300, Seed: 61}}})
	var bad string
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus == survey.StatusCompleted {
			bad = strings.ToLower(string(r.ResponseID))
			break
		}
	}
	if bad == "" {
		t.Fatal("no completed response")
	}
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultInvalidDate, Survey: sid, Response: bad}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 2s\n")
	store := rejectStore{t: t, w: w, dir: filepath.Join(filepath.Dir(cfg), "data")}
	const window = 12 * time.Second

	// Run 1: the backfill rejects it; then a fixed window of reconciles.
	d := startDaemon(t, cfg)
	waitDaemon(t, d, "the reject record", 60*time.Second, func() bool { n, _ := store.rows(bad); return n > 0 })
	_, l0 := calls.snapshot()
	time.Sleep(window)
	_, l1 := calls.snapshot()
	fetched1 := calls.detail(bad)
	rows1, listed := store.rows(bad)
	stopDaemon(t, d)
	t.Logf("run 1 (%v after the reject): detail calls %d, reject rows %d (listed_status %q), list calls in the window %d",
		window, fetched1, rows1, listed, l1-l0)
	if fetched1 != 1 || rows1 != 1 {
		t.Errorf("run 1: the rejected response was fetched %d times and has %d reject rows, want 1 and 1", fetched1, rows1)
	}
	if listed != survey.StatusCompleted {
		t.Errorf("the reject record's listed_status is %q, want completed", listed)
	}
	if l1-l0 < 8 {
		t.Errorf("only %d list calls in %v: too few reconcile passes to prove anything", l1-l0, window)
	}

	// Run 2, after a restart: a first cycle and reconciles; nothing read.
	_, l0 = calls.snapshot()
	d = startDaemon(t, cfg)
	time.Sleep(window)
	_, l1 = calls.snapshot()
	fetched2 := calls.detail(bad)
	rows2, _ := store.rows(bad)
	t.Logf("run 2 (restarted, %v): detail calls %d in all, reject rows %d, list calls %d", window, fetched2, rows2, l1-l0)
	if fetched2 != 1 || rows2 != 1 {
		t.Errorf("after a restart: fetched %d times in all, %d reject rows; want 1 and 1", fetched2, rows2)
	}

	// Its content changes: read again, written, no new record.
	e.sim.ClearFaults()
	r, ok := e.sim.Response(sid, survey.GUID(bad))
	if !ok {
		t.Fatal("the response is gone")
	}
	r.ResponseStatus = survey.StatusDisqualified
	if _, err := e.sim.UpdateResponse(sid, r); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	waitDaemon(t, d, "the changed response written", 60*time.Second, func() bool { return store.written(sid, bad) == survey.StatusDisqualified })
	fetched3 := calls.detail(bad)
	rows3, _ := store.rows(bad)
	t.Logf("after the change: written as disqualified within %v; detail calls %d in all, reject rows %d",
		time.Since(changed).Round(100*time.Millisecond), fetched3, rows3)
	if fetched3 != 2 || rows3 != 1 {
		t.Errorf("after the change: fetched %d times in all, %d reject rows; want 2 and 1", fetched3, rows3)
	}
	stopDaemon(t, d)
	// A third start: the written response wins over its old reject (it is
	// neither read again nor held as rejected).
	d = startDaemon(t, cfg)
	time.Sleep(4 * time.Second)
	stopDaemon(t, d)
	if n := calls.detail(bad); n != 2 {
		t.Errorf("after a third start: fetched %d times in all, want 2", n)
	}
}

// Issue 19 item 1's log lines, through the real binary: the token is
// revoked mid-backfill (every call answers 401 from then on). Over a fixed
// window the log has a few WARN lines, each cause once per back-off step
// with a count, never one per queued response; the calls made while
// revoked are bounded (the client stops and probes once a minute). Nothing
// is rejected, and once the token works again the backfill completes.
func TestRevokedTokenMidBackfillLogsAndCallsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("runs about 1-2 min")
	}
	e, calls := startCountingSim(t, sim.Options{Surveys: specs(2, 3000, 71)})
	// Details take 20 ms: with 16 fetchers the backfill takes ~8 s, so the
	// revocation lands mid-way with the queue full.
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultSlow, Delay: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	dir := filepath.Join(filepath.Dir(cfg), "data")
	d := startDaemon(t, cfg)
	waitDaemon(t, d, "1,000 detail calls", 90*time.Second, func() bool { return e.sim.Calls()[sim.OpGetResponse] >= 1000 })
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpAll, Kind: "401"}); err != nil {
		t.Fatal(err)
	}
	revokedAt := len(d.output())
	a0, _ := calls.snapshot()
	const window = 30 * time.Second
	time.Sleep(window)
	a1, _ := calls.snapshot()
	out := d.output()[revokedAt:]
	warn, fetchFailed, other := 0, 0, map[string]int{}
	for line := range strings.Lines(out) {
		if !strings.Contains(line, "level=WARN") {
			continue
		}
		warn++
		msg := line
		if _, after, ok := strings.Cut(line, "msg="); ok {
			msg = after
			if i := strings.Index(msg, "\" "); i >= 0 {
				msg = msg[:i+1]
			}
		}
		if strings.Contains(line, "fetch response failed") {
			fetchFailed++
		}
		other[msg]++
	}
	t.Logf("revoked for %v: %d API calls, %d WARN lines (%d \"fetch response failed\")", window, a1-a0, warn, fetchFailed)
	for msg, n := range other {
		t.Logf("  %3d × %s", n, strings.TrimSpace(msg))
	}
	// A cause once per back-off step (1 s doubling: 1+2+4+8+16 s) per
	// cause: a handful, not one per queued response, call in flight or
	// stream. Before (the same test on main): 58 lines, 16 of them one
	// per call in flight, 38 one per stream and retry.
	if fetchFailed > 6 {
		t.Errorf("%d \"fetch response failed\" lines in %v", fetchFailed, window)
	}
	if warn > 20 {
		t.Errorf("%d WARN lines in %v:\n%s", warn, window, tail(out, 60))
	}
	// The calls in flight when the 401s began (at most api.max_concurrency,
	// 32), then one probe a minute.
	if a1-a0 > 40 {
		t.Errorf("%d API calls in %v while the token was revoked", a1-a0, window)
	}
	// The token works again: after the next probe the backfill completes,
	// with nothing rejected.
	e.sim.ClearFaults()
	want := 0
	for _, id := range e.ids {
		for r := range e.sim.Responses(id) {
			if r.ResponseStatus != survey.StatusDeleted {
				want++
			}
		}
	}
	waitDaemon(t, d, "the backfill after the token works again", 150*time.Second, func() bool {
		n := 0
		for _, id := range e.ids {
			cur, err := parquet.ReadCurrent(context.Background(), dir, id)
			if err != nil {
				return false
			}
			for _, r := range cur.Responses {
				if !r.Deleted {
					n++
				}
			}
		}
		return n >= want
	})
	stopDaemon(t, d)
	if files, _ := filepath.Glob(filepath.Join(dir, "rejects", "*.jsonl")); len(files) != 0 {
		t.Errorf("the revoked token left reject records: %v", files)
	}
}
