package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/internal/testkit/chtest"
	"github.com/surveysync/surveysync/internal/testkit/faultproxy"
	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// The start-up's line, /readyz text, fix and back-off for each cause it
// waits out.
func TestWaitStartupNamesTheCause(t *testing.T) {
	cfg := &config.Config{ClickHouse: config.ClickHouse{Addr: []string{"127.0.0.1:9101"}}}
	cde := &clickhouse.ClusterDDLError{Cluster: "c", Migration: "0065_privacy.sql", Statement: 1, Query: "ALTER TABLE db.t_local ON CLUSTER c",
		Nodes: []string{"127.0.0.1:9104"}, Err: errors.New("Cannot enqueue replicated DDL query for a replicated shard")}
	busy := &clickhouse.MigrationsBusyError{Database: "db", Host: "other", PID: 7, Since: 3 * time.Second}
	for _, c := range []struct {
		err              error
		line, ready, fix string
		maxWait          time.Duration
	}{
		{cde, "start-up: the cluster has not run a migration on every node", "starting: cluster c: migration 0065_privacy.sql statement 1", "start ClickHouse on 127.0.0.1:9104", 10 * time.Second},
		{busy, "start-up: another surveysync applies the migrations", "being applied by another surveysync (host other, pid 7", "its claim in db.migration_lock expires", 5 * time.Second},
		{errors.New("dial tcp: connection refused"), "start-up: the warehouse is unreachable", "starting: the warehouse is unreachable", "check clickhouse.addr", startRetryMax},
	} {
		var buf bytes.Buffer
		log := slog.New(slog.NewTextHandler(&buf, nil))
		st := &startup{}
		wait := waitStartup(log, st, cfg, 9, c.err)
		if wait > c.maxWait || wait < c.maxWait/2 {
			t.Errorf("%v: wait %v, want within [%v, %v]", c.err, wait, c.maxWait/2, c.maxWait)
		}
		if strings.Count(buf.String(), "\n") != 1 || !strings.Contains(buf.String(), c.line) {
			t.Errorf("%v: log %q, want one line with %q", c.err, buf.String(), c.line)
		}
		errs := st.errs()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), c.ready) || !strings.Contains(errs[0].Error(), "attempt 9") {
			t.Errorf("%v: /readyz says %v, want %q", c.err, errs, c.ready)
		}
		if fix := SinkFixFor(cfg, c.err); !strings.Contains(fix, c.fix) {
			t.Errorf("%v: fix %q, want %q", c.err, fix, c.fix)
		}
	}
}

// waitFor polls cond every few milliseconds for at most 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// clickHouseBehindProxy is a configuration whose warehouse is a fresh
// database (dropped after the test) of the test ClickHouse, reached
// through a proxy that can cut it; it skips without the test server.
func clickHouseBehindProxy(t *testing.T) (*config.Config, *faultproxy.Proxy) {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	o, ok := chtest.Options("test_daemon_startup_" + hex.EncodeToString(b[:]))
	if !ok || chtest.OnCluster() {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR (a single server) is not set")
	}
	p, err := faultproxy.New(o.Addr[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	cfg := config.Default()
	cfg.ClickHouse.Addr = []string{p.Addr()}
	cfg.ClickHouse.Database = o.Database
	cfg.ClickHouse.Replicated = false
	cfg.ClickHouse.DialTimeout = 2 * time.Second
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		s, err := clickhouse.Open(ctx, o)
		if err != nil {
			t.Errorf("reopen %s to drop it: %v", o.Database, err)
			return
		}
		defer s.Close()
		if err := chtest.DropDatabase(ctx, s); err != nil {
			t.Errorf("drop %s: %v", o.Database, err)
		}
	})
	return cfg, p
}

// The daemon's start waits out an unreachable ClickHouse, one log line
// per attempt with the fix, /readyz saying what it waits for, and starts
// once it answers; a one-shot run fails at once with the fix instead; a
// stop while waiting ends the wait with the last error.
func TestStartupWaitsForTheWarehouse(t *testing.T) {
	cfg, proxy := clickHouseBehindProxy(t)
	proxy.SetDown(true)
	ctx := context.Background()

	t0 := time.Now()
	_, err := openWarehouseWaiting(ctx, cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), &startup{}, true)
	if err == nil || !strings.HasPrefix(err.Error(), "open sink: ") || !strings.HasSuffix(err.Error(), "; fix: "+clickHouseFix) {
		t.Fatalf("one-shot start with ClickHouse down: %v", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Fatalf("the one-shot start failed after %v, want at once", took)
	}

	var logs syncBuffer
	st := &startup{}
	h := &health{start: st}
	type result struct {
		wh  warehouse.Warehouse
		err error
	}
	done := make(chan result, 1)
	go func() {
		wh, err := openWarehouseWaiting(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), prometheus.NewRegistry(), st, false)
		done <- result{wh, err}
	}()
	waitFor(t, "the start-up to say what it waits for", func() bool { return len(st.errs()) > 0 })
	err = h.ready(ctx)
	if err == nil || !strings.Contains(err.Error(), "starting: the warehouse is unreachable (attempt 1, next in") {
		t.Fatalf("/readyz while waiting: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, "start-up: the warehouse is unreachable; waiting for it") || !strings.Contains(l, "attempt=1") ||
		!strings.Contains(l, `fix="`+clickHouseFix) {
		t.Fatalf("log while waiting: %q", l)
	}
	proxy.SetDown(false)
	r := <-done
	if r.err != nil {
		t.Fatalf("the start after ClickHouse came back: %v", r.err)
	}
	defer r.wh.Close()
	if errs := st.errs(); len(errs) != 0 {
		t.Fatalf("/readyz still waits for %v", errs)
	}
	if l := logs.String(); !strings.Contains(l, "start-up: the warehouse answers; starting") {
		t.Fatalf("log after the wait: %q", l)
	}

	proxy.SetDown(true)
	stopCtx, stop := context.WithCancel(ctx)
	st = &startup{}
	go func() {
		_, err := openWarehouseWaiting(stopCtx, cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), st, false)
		done <- result{nil, err}
	}()
	waitFor(t, "the second start to wait", func() bool { return len(st.errs()) > 0 })
	stop()
	if r := <-done; r.err == nil || !strings.Contains(r.err.Error(), "open sink: stopped while waiting for the warehouse (last: ") {
		t.Fatalf("a stop while waiting: %v", r.err)
	}
}

// A warehouse that cannot be opened for another reason than an outage (a
// Parquet folder that is a file) fails the daemon's start at once, with
// the Parquet fix.
func TestStartupFailsAtOnceOnABadFolder(t *testing.T) {
	cfg := config.Default()
	cfg.Parquet.Dir = filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(cfg.Parquet.Dir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := &startup{}
	_, err := openWarehouseWaiting(context.Background(), cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), st, false)
	if err == nil || !strings.HasSuffix(err.Error(), "; fix: "+parquetFix) || len(st.errs()) != 0 {
		t.Fatalf("start on a folder that is a file: %v (readyz %v)", err, st.errs())
	}
}

// The service must answer a one-shot run's start at once: a rejected
// token and an unreachable service fail it with what to fix; the daemon's
// start asks until the service answers, /readyz saying it meanwhile.
func TestStartupAsksTheService(t *testing.T) {
	s, err := sim.New(sim.Options{Token: "test-token"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	cfg := config.Default()
	cfg.API.BaseURL = config.URL(srv.URL + "/v1")
	cfg.API.Token = "test-token"
	cfg.API.UserAgent = "surveysync-test (test@example.cz)"
	ctx := context.Background()
	log := slog.New(slog.DiscardHandler)
	if err := checkAPIOnce(ctx, cfg, log); err != nil {
		t.Fatalf("a service that answers: %v", err)
	}
	bad := *cfg
	bad.API.Token = "wrong-token"
	if err := checkAPIOnce(ctx, &bad, log); err == nil || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("a rejected token: %v, want the 401 without the token", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := *cfg
	down.API.BaseURL = config.URL("http://" + ln.Addr().String() + "/v1")
	ln.Close()
	if err := checkAPIOnce(ctx, &down, log); err == nil || !strings.Contains(err.Error(), "does not answer") || !strings.HasSuffix(err.Error(), "; fix: "+apiFix) {
		t.Fatalf("a service that does not answer: %v", err)
	}

	if err := s.InjectFault(sim.Fault{Op: sim.OpAll, Kind: "503", Count: 1}); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	st := &startup{}
	done := make(chan struct{})
	go func() { defer close(done); waitAPI(ctx, cfg, st, slog.New(slog.NewTextHandler(&logs, nil))) }()
	waitFor(t, "the start-up to wait for the service", func() bool { return len(st.errs()) > 0 })
	if errs := st.errs(); !strings.Contains(errs[0].Error(), "starting: the survey service does not answer (attempt 1") {
		t.Fatalf("/readyz while the service answers 503: %v", errs)
	}
	<-done
	if errs := st.errs(); len(errs) != 0 {
		t.Fatalf("/readyz after the service answered: %v", errs)
	}
	if l := logs.String(); strings.Count(l, "the survey service does not answer; waiting") != 1 || !strings.Contains(l, "the survey service answers") {
		t.Fatalf("log: %q", l)
	}
	for _, err := range []error{nil, surveyapi.ErrUnauthorized, surveyapi.ErrQuotaExceeded} {
		if !apiAnswered(err) {
			t.Errorf("%v does not count as an answer", err)
		}
	}
	if apiAnswered(errors.New("connection refused")) {
		t.Error("connection refused counts as an answer")
	}
}

// /readyz: what the start-up waits for, then (with no warehouse yet) that
// it is being opened; once attached, the sink's ping, writes held
// because the sink refuses them, and the token's access.
func TestReadiness(t *testing.T) {
	ctx := context.Background()
	st := &startup{}
	h := &health{start: st}
	if err := h.ready(ctx); err == nil || err.Error() != "starting: the warehouse is being opened" {
		t.Fatalf("/readyz before the warehouse: %v", err)
	}
	st.set("api", errors.New("starting: the survey service does not answer (attempt 2, next in 2s)"))
	if err := h.ready(ctx); err == nil || strings.Contains(err.Error(), "being opened") || !strings.Contains(err.Error(), "attempt 2") {
		t.Fatalf("/readyz while waiting for the service: %v", err)
	}
	st.set("api", nil)
	wh := openParquet(t, t.TempDir())
	defer wh.Close()
	var status pipeline.WriteStatus
	forbidden := error(nil)
	h.attach(&health{sink: wh, writes: func() pipeline.WriteStatus { return status }, access: func() error { return forbidden }})
	if err := h.ready(ctx); err != nil {
		t.Fatalf("/readyz of a working daemon: %v", err)
	}
	status = pipeline.WriteStatus{Failing: true, Class: pipeline.WriteRefused, Table: "responses", Code: 241, Attempts: 3, Message: "Memory limit exceeded"}
	err := h.ready(ctx)
	if err == nil || err.Error() != "sink writes to responses failing (refused, 3 attempts; the batch is held and retried): code 241: Memory limit exceeded" {
		t.Fatalf("/readyz while writes are refused: %v", err)
	}
	status = pipeline.WriteStatus{}
	a := newAccessWatch(nil)
	a.set(666, true)
	forbidden = tokenState(nil, a)
	if err := h.ready(ctx); err == nil || !strings.Contains(err.Error(), "the token may read none of the surveys (HTTP 403 on each)") {
		t.Fatalf("/readyz when every survey is forbidden: %v", err)
	}
	a.set(4574, false)
	forbidden = tokenState(nil, a)
	if err := h.ready(ctx); err != nil {
		t.Fatalf("/readyz when one survey is readable: %v", err)
	}
}

// syncBuffer is a bytes.Buffer safe for a logger in one goroutine and
// the test in another.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
