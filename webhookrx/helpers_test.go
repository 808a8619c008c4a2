package webhookrx

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperEnv); dir != "" {
		os.Exit(runHelperReceiver(dir))
	}
	goleak.VerifyTestMain(m)
}

// recorder is the test Processor: it records every Process call and can
// block or fail on demand.
type recorder struct {
	mu      sync.Mutex
	calls   []Event // every call, in call order
	ok      []Event // successful calls, in order
	fail    error   // returned while set
	block   chan struct{}
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (p *recorder) Process(ctx context.Context, ev Event) error {
	p.mu.Lock()
	p.calls = append(p.calls, ev)
	block, fail := p.block, p.fail
	p.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	p.mu.Lock()
	p.ok = append(p.ok, ev)
	p.mu.Unlock()
	select {
	case p.changed <- struct{}{}:
	default:
	}
	return nil
}

func (p *recorder) setFail(err error) { p.mu.Lock(); p.fail = err; p.mu.Unlock() }

func (p *recorder) processed() []Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Event(nil), p.ok...)
}

func (p *recorder) callCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.calls)
}

// memLog is the test EventLog.
type memLog struct {
	mu      sync.Mutex
	entries []LogEntry
	fail    error
}

func (l *memLog) LogEvents(_ context.Context, es []LogEntry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fail != nil {
		return l.fail
	}
	l.entries = append(l.entries, es...)
	return nil
}

func (l *memLog) setFail(err error) { l.mu.Lock(); l.fail = err; l.mu.Unlock() }

func (l *memLog) all() []LogEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LogEntry(nil), l.entries...)
}

const testPath = "/webhooks/s3cr3t-7f1d2c"

// running is a Receiver running in the background.
type running struct {
	r    *Receiver
	reg  *prometheus.Registry
	url  string
	stop func() error
}

func testOptions(t testing.TB, dir string) Options {
	if dir == "" {
		dir = t.TempDir()
	}
	return Options{
		Listen:          "127.0.0.1:0",
		Path:            testPath,
		SpoolDir:        dir,
		RetryInitial:    10 * time.Millisecond,
		RetryMax:        50 * time.Millisecond,
		LogInterval:     10 * time.Millisecond,
		ShutdownTimeout: 2 * time.Second,
		Logger:          testLogger(t),
	}
}

func testLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func start(t testing.TB, o Options, p Processor, log EventLog) *running {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	r, err := New(o, p, log)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for (o.Listen != "" && r.Addr() == "") || r.Ready() != nil {
		select {
		case err := <-errc:
			cancel()
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatal("receiver did not start")
		}
		time.Sleep(2 * time.Millisecond)
	}
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-errc:
			case <-time.After(15 * time.Second):
				stopErr = fmt.Errorf("Run did not return within 15s of cancel")
			}
		})
		return stopErr
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	rx := &running{r: r, reg: reg, stop: stop}
	if o.Listen != "" {
		rx.url = "http://" + r.Addr() + o.Path
	}
	return rx
}

var client = &http.Client{Timeout: 30 * time.Second}

// post sends body to url and returns the status, the body and the headers.
func post(t testing.TB, url, body string, hdr map[string]string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			want := map[string]string{}
			for i := 0; i+1 < len(labels); i += 2 {
				want[labels[i]] = labels[i+1]
			}
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue metric
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			}
		}
	}
	t.Fatalf("metric %s %v not found", name, labels)
	return 0
}

// eventsOnDisk counts the events in the spool's database in dir, read
// from a copy (a running receiver holds the file's lock); -1 when the
// copy does not open (taken mid-commit: ask again).
func eventsOnDisk(t testing.TB, dir string) int {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, dbName))
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), dbName)
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		return -1
	}
	defer db.Close()
	n := -1
	_ = db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucketEvents); b != nil {
			n = b.Stats().KeyN
		}
		return nil
	})
	return n
}

// legacyFiles lists the files of the spool's former format left in dir.
func legacyFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	for _, pat := range []string{legacySegPrefix + "*" + legacySegSuffix, legacyDoneName, legacyRetryName, "*.tmp"} {
		m, err := filepath.Glob(filepath.Join(dir, pat))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

func responseBody(i int) string {
	return fmt.Sprintf(`{"event_name":"response_received","survey_id":4574,"response_id":"DA453B67-791E-4D4D-9009-%012X","distribution_id":14457,"distribution_type":"email","contact_id":4998745,"completed":true,"disqualified":true,"quota_full":false,"completed_at":"2022-08-21T10:30:00Z"}`, i)
}

func lint(t testing.TB, reg *prometheus.Registry) {
	t.Helper()
	probs, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Errorf("metric lint: %s: %s", p.Metric, p.Text)
	}
}
