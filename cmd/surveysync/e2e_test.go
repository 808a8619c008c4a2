package main

// End-to-end tests: the real binary against the emulator and, when
// SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set, a real ClickHouse. The warehouse
// is compared row by row with the emulator's truth.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ch "github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"

	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/internal/testkit/faultproxy"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "surveysync-e2e-")
	if err != nil {
		panic(err)
	}
	binPath = filepath.Join(dir, "surveysync")
	out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build surveysync: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// --- harness ---------------------------------------------------------------

type emulator struct {
	sim *sim.Sim
	srv *httptest.Server
	ids []int64
}

func startSim(t *testing.T, opts sim.Options) *emulator {
	t.Helper()
	if opts.Token == "" {
		opts.Token = "e2e-secret-token-" + randHex(8)
	}
	s, err := sim.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	e := &emulator{sim: s, srv: srv}
	for _, sp := range opts.Surveys {
		e.ids = append(e.ids, sp.ID)
	}
	return e
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type testWarehouse struct {
	conn driver.Conn
	db   string
	addr string
}

func clickhouseOrSkip(t *testing.T) *testWarehouse {
	t.Helper()
	addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR")
	if addr == "" {
		t.Skip("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set")
	}
	conn, err := ch.Open(&ch.Options{Addr: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	w := &testWarehouse{conn: conn, db: "test_e2e_" + randHex(6), addr: addr}
	t.Cleanup(func() {
		_ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+w.db)
		conn.Close()
	})
	return w
}

// config writes a YAML configuration for the daemon. extra is appended.
func writeConfig(t *testing.T, e *emulator, w *testWarehouse, extra string) string {
	t.Helper()
	dir := t.TempDir()
	var b strings.Builder
	fmt.Fprintf(&b, "api:\n  base_url: %s/v1\n  token: %s\n  user_agent: \"surveysync-e2e (e2e@example.invalid)\"\n  max_concurrency: 32\n  rate_limit: 100000\n  max_retries: 10\n", e.srv.URL, tokenOf(e))
	fmt.Fprintf(&b, "surveys: [%s]\n", joinIDs(e.ids))
	if w != nil {
		fmt.Fprintf(&b, "clickhouse:\n  addr: [%s]\n  database: %s\n", w.addr, w.db)
	}
	fmt.Fprintf(&b, "parquet:\n  dir: %s\n", filepath.Join(dir, "data"))
	fmt.Fprintf(&b, "metrics:\n  listen: \"\"\n")
	b.WriteString(extra)
	path := filepath.Join(dir, "surveysync.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var tokens sync.Map

func tokenOf(e *emulator) string {
	v, _ := tokens.Load(e)
	return v.(string)
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return strings.Join(s, ", ")
}

type daemonProc struct {
	cmd *exec.Cmd
	out *bytes.Buffer
	mu  *sync.Mutex
}

type lockedBuffer struct {
	mu  *sync.Mutex
	buf *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func startDaemon(t *testing.T, cfgPath string, args ...string) *daemonProc {
	t.Helper()
	d := &daemonProc{out: &bytes.Buffer{}, mu: &sync.Mutex{}}
	d.cmd = exec.Command(binPath, append([]string{"run", "--config", cfgPath}, args...)...)
	d.cmd.Stdout = lockedBuffer{d.mu, d.out}
	d.cmd.Stderr = lockedBuffer{d.mu, d.out}
	d.cmd.Env = append(os.Environ(), "SURVEYSYNC_LOG__LEVEL=info")
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			_ = d.cmd.Wait()
		}
	})
	return d
}

func (d *daemonProc) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

func (d *daemonProc) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("surveysync exited with %v; output:\n%s", err, tail(d.output(), 60))
		}
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-done
		t.Fatalf("surveysync did not finish in %v; output:\n%s", timeout, tail(d.output(), 60))
	}
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// --- truth and comparison --------------------------------------------------

// fingerprint renders a response's rows canonically: its header and each
// answer in page/question/answer order.
func truthFingerprints(e *emulator) map[string]string {
	out := map[string]string{}
	for _, id := range e.ids {
		for r := range e.sim.Responses(id) {
			if r.ResponseStatus == survey.StatusDeleted {
				continue
			}
			var b strings.Builder
			completed := "-"
			if r.DateCompleted != nil {
				completed = r.DateCompleted.UTC().Truncate(time.Second).Format(time.RFC3339)
			}
			fmt.Fprintf(&b, "%d|%s|%s|", r.SurveyID, r.ResponseStatus, completed)
			for pi, p := range r.Pages {
				for qi, q := range p.Questions {
					for ai, a := range q.Answers {
						fmt.Fprintf(&b, "[%d.%d.%d %d %s %s %s %s]", pi, qi, ai, q.ID, optInt(a.ChoiceID), optInt(a.RowID), optInt(a.Value), optStr(a.Text))
					}
				}
			}
			out[string(r.ResponseID)] = b.String()
		}
	}
	return out
}

func optInt(v *survey.FlexInt) string {
	if v == nil {
		return "∅"
	}
	return fmt.Sprint(int64(*v))
}

func optStr(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}

func warehouseFingerprints(t *testing.T, w *testWarehouse) map[string]string {
	t.Helper()
	out, err := readWarehouse(w)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func readWarehouse(w *testWarehouse) (map[string]string, error) {
	return readWarehouseAs(w.conn, w.db+".responses_current", w.db+".answers_current")
}

// readWarehouseAs reads the fingerprints from responsesFrom and answersFrom
// (tables, views or subqueries with a WHERE: what follows FROM).
func readWarehouseAs(conn driver.Conn, responsesFrom, answersFrom string) (map[string]string, error) {
	ctx := context.Background()
	out := map[string]string{}
	rows, err := conn.Query(ctx, fmt.Sprintf(`SELECT toString(response_id), survey_id, response_status,
		if(isNull(date_completed), '-', formatDateTime(assumeNotNull(date_completed), '%%Y-%%m-%%dT%%H:%%M:%%SZ'))
		FROM %s`, responsesFrom))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, status, completed string
		var sid int64
		if err := rows.Scan(&id, &sid, &status, &completed); err != nil {
			return nil, err
		}
		if _, dup := out[id]; dup {
			return nil, fmt.Errorf("response %s appears twice in responses_current", id)
		}
		out[id] = fmt.Sprintf("%d|%s|%s|", sid, status, completed)
	}
	rows.Close()
	rows, err = conn.Query(ctx, fmt.Sprintf(`SELECT toString(response_id), page_index, question_index, answer_index, question_id,
		choice_id, row_id, value, text FROM %s ORDER BY response_id, page_index, question_index, answer_index`, answersFrom))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, text string
		var pi, qi, ai uint16
		var qid int64
		var choice, row, value *int64
		if err := rows.Scan(&id, &pi, &qi, &ai, &qid, &choice, &row, &value, &text); err != nil {
			return nil, err
		}
		toFlex := func(p *int64) *survey.FlexInt {
			if p == nil {
				return nil
			}
			return survey.Int(*p)
		}
		out[id] += fmt.Sprintf("[%d.%d.%d %d %s %s %s %s]", pi, qi, ai, qid, optInt(toFlex(choice)), optInt(toFlex(row)), optInt(toFlex(value)), text)
	}
	return out, rows.Err()
}

func diff(want, got map[string]string) string {
	var problems []string
	for id, w := range want {
		g, ok := got[id]
		switch {
		case !ok:
			problems = append(problems, "missing "+id)
		case g != w:
			problems = append(problems, fmt.Sprintf("differs %s:\n  want %s\n  got  %s", id, w, g))
		}
	}
	for id := range got {
		if _, ok := want[id]; !ok {
			problems = append(problems, "unexpected "+id)
		}
	}
	sort.Strings(problems)
	if len(problems) == 0 {
		return ""
	}
	n := len(problems)
	if n > 10 {
		problems = problems[:10]
	}
	return fmt.Sprintf("%d differences, first ones:\n%s", n, strings.Join(problems, "\n"))
}

func waitConverged(t *testing.T, e *emulator, w *testWarehouse, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		got, err := readWarehouse(w)
		if err != nil {
			last = err.Error()
		} else if last = diff(truthFingerprints(e), got); last == "" {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("warehouse did not converge to the emulator in %v: %s", timeout, last)
}

func specs(n, responses int, seed int64) []sim.SurveySpec {
	out := make([]sim.SurveySpec, n)
	for i := range out {
		out[i] = sim.SurveySpec{ID: int64(100 + i), Responses: responses, Seed: seed + int64(i)}
	}
	return out
}

func newEmulator(t *testing.T, opts sim.Options) *emulator {
	tok := "e2e-secret-token-" + randHex(8)
	opts.Token = tok
	if opts.Now == nil {
		// The emulator's clock stands still, so its truth cannot move on
		// (a partial completing) between the sync and the comparison.
		fixed := time.Now().UTC().Add(-time.Minute)
		opts.Now = func() time.Time { return fixed }
	}
	e := startSim(t, opts)
	tokens.Store(e, tok)
	return e
}

// --- tests -----------------------------------------------------------------

func TestBackfillIntoClickHouseMatchesEmulator(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 1500, 7)})
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal(msg)
	}
	if strings.Contains(d.output(), tokenOf(e)) {
		t.Fatal("the API token appears in the daemon's output")
	}
	// A second run re-reads the overlap and changes nothing visible.
	d = startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal("after a second run: " + msg)
	}
}

func TestChangesDuringSyncEndUpExact(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 800, 11)})
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  overlap: 1m\n  reconcile_interval: 2s\n  partial_lookback: 24000h\n")
	d := startDaemon(t, cfg)
	waitConverged(t, e, w, 90*time.Second)
	// Now, while it stays in sync: delete some, complete partials (dated
	// before the overlap: only reconcile can see that), add new ones.
	sid := e.ids[0]
	var all []survey.Response
	for r := range e.sim.Responses(sid) {
		all = append(all, r)
	}
	deleted := 0
	completed := 0
	for i, r := range all {
		switch {
		case i%97 == 0 && r.ResponseStatus != survey.StatusDeleted:
			if err := e.sim.DeleteResponse(sid, r.ResponseID); err == nil {
				deleted++
			}
		case i%89 == 0 && r.ResponseStatus != survey.StatusDeleted:
			// Purged: the detail answers 404.
			if err := e.sim.PurgeResponse(sid, r.ResponseID); err == nil {
				deleted++
			}
		case r.ResponseStatus == survey.StatusPartial && completed < 10:
			if _, err := e.sim.CompletePartial(sid, r.ResponseID, survey.StatusCompleted); err == nil {
				completed++
			}
		}
	}
	for range 20 {
		now := time.Now().UTC().Add(-2 * time.Minute) // before the emulator's standing clock
		if _, err := e.sim.AddResponse(sid, survey.Response{ResponseStatus: survey.StatusCompleted,
			DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now.Add(-time.Second))}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("deleted %d, completed %d partials, added 20", deleted, completed)
	waitConverged(t, e, w, 90*time.Second)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
}

func TestSIGKILLMidBackfillThenRestartIsExact(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 15000, 23)})
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  batch:\n    max_rows: 5000\n")
	d := startDaemon(t, cfg)
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		row := w.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM system.tables WHERE database = '%s' AND name = 'responses'", w.db))
		if err := row.Scan(&n); err == nil && n == 1 {
			if err := w.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.responses", w.db)).Scan(&n); err == nil && n > 3000 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress before the kill; output:\n%s", tail(d.output(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	d = startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 4*time.Minute)
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal(msg)
	}
}

func TestFaultsLoseNothing(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 2000, 31), Seed: 5})
	for _, f := range []sim.Fault{
		{Op: "get_response", Kind: "429", Probability: 0.05},
		{Op: "get_response", Kind: "429_retry_after", Probability: 0.02, RetryAfter: time.Second},
		{Op: "get_response", Kind: "503", Probability: 0.05},
		{Op: "list_responses", Kind: "500", Probability: 0.1},
		{Op: "list_responses", Kind: "slow", Probability: 0.2, Delay: 50 * time.Millisecond},
		{Op: "list_responses", Kind: "shift", Probability: 0.2},
		{Op: "*", Kind: "variant_spelling", Probability: 0.5},
		{Op: "*", Kind: "uppercase_guid", Probability: 0.5},
	} {
		if err := e.sim.InjectFault(f); err != nil {
			t.Fatal(err)
		}
	}
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 4*time.Minute)
	e.sim.ClearFaults()
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		for _, l := range strings.Split(d.output(), "\n") {
			if strings.Contains(l, "reject") || strings.Contains(l, "WARN") || strings.Contains(l, "ERROR") {
				t.Log(l)
			}
		}
		t.Fatal(msg)
	}
}

func TestDemoDefaultsWriteParquet(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(binPath, "run", "--exit-when-synced")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "SURVEYSYNC_METRICS__LISTEN=", "SURVEYSYNC_WEBHOOKS__LISTEN=127.0.0.1:0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo run: %v\n%s", err, tail(string(out), 40))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "data", "answers", "*", "*", "*.parquet"))
	if len(files) == 0 {
		t.Fatalf("no answers Parquet files under ./data; output:\n%s", tail(string(out), 40))
	}
	if !strings.Contains(string(out), "caught up") {
		t.Fatalf("demo did not say where to look:\n%s", tail(string(out), 20))
	}
}

// ClickHouse unreachable for 30 s in the middle of a backfill: the daemon
// waits with bounded memory and resumes; nothing is lost or duplicated.
func TestClickHouseOutageMidSyncLosesNothing(t *testing.T) {
	w := clickhouseOrSkip(t)
	proxy, err := faultproxy.New(w.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	e := newEmulator(t, sim.Options{Surveys: specs(2, 10000, 41)})
	direct := *w
	w.addr = proxy.Addr() // the daemon goes through the proxy; the test reads directly
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  batch:\n    max_rows: 5000\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var n uint64
		if err := direct.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.responses", w.db)).Scan(&n); err == nil && n > 2000 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress before the outage; output:\n%s", tail(d.output(), 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
	proxy.SetDown(true)
	outage := 30 * time.Second
	if testing.Short() {
		outage = 5 * time.Second
	}
	var peak int64
	end := time.Now().Add(outage)
	for time.Now().Before(end) {
		if v := vmHWMKB(d.cmd.Process.Pid); v > peak {
			peak = v
		}
		time.Sleep(200 * time.Millisecond)
	}
	proxy.SetDown(false)
	d.wait(t, 4*time.Minute)
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, &direct)); msg != "" {
		t.Fatal(msg)
	}
	t.Logf("peak RSS during the %v outage: %d MB", outage, peak/1024)
	if peak > 400*1024 {
		t.Fatalf("peak RSS %d MB during the outage: memory is not bounded", peak/1024)
	}
}

func vmHWMKB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSuffix(strings.TrimSpace(v), " kB"), &kb)
			return kb
		}
	}
	return 0
}

func simOptions(surveys, responses int) sim.Options {
	return sim.Options{Surveys: specs(surveys, responses, 3)}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// A response completed at the service reaches responses_current through the
// webhook alone (polling is hours away) within seconds.
func TestWebhookMakesResponseQueryableFast(t *testing.T) {
	w := clickhouseOrSkip(t)
	port := freePort(t)
	path := "/hooks/e2e-" + randHex(12)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 50, 51),
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	spool := t.TempDir()
	cfg := writeConfig(t, e, w, fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\n  batch:\n    max_delay: 100ms\nwebhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", port, path, spool))
	d := startDaemon(t, cfg)
	waitConverged(t, e, w, 60*time.Second) // the backfill
	var lat []time.Duration
	for range 5 {
		now := time.Now().UTC().Add(-2 * time.Minute)
		r, err := e.sim.AddResponse(e.ids[0], survey.Response{ResponseStatus: survey.StatusCompleted,
			DateCreated: survey.Time{Time: now.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(now)})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for {
			var n uint64
			q := fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE response_id = toUUID('%s')", w.db, r.ResponseID)
			if err := w.conn.QueryRow(context.Background(), q).Scan(&n); err == nil && n == 1 {
				break
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("response %s not queryable 10 s after its webhook; output:\n%s", r.ResponseID, tail(d.output(), 30))
			}
			time.Sleep(20 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	t.Logf("webhook → queryable row: %v", lat)
	// The raw log is written in batches after processing.
	var n uint64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := w.conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count() FROM %s.webhook_events", w.db)).Scan(&n)
		if err == nil && n >= 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("webhook_events has %d rows (%v), want the 5 events", n, err)
		}
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
}

// Steady state: a response completed at the service is in
// responses_current within one poll interval (plus the write), by polling
// alone (no webhooks, no reconcile).
func TestSteadyStateNewResponseWithinOnePollInterval(t *testing.T) {
	w := clickhouseOrSkip(t)
	clock := time.Now().UTC().Add(-time.Minute)
	var mu sync.Mutex
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	e := newEmulator(t, sim.Options{Surveys: specs(1, 300, 61), Now: now})
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 2s\n  settle_lag: 0s\n  overlap: 10m\n  reconcile_interval: 0s\n")
	d := startDaemon(t, cfg)
	waitConverged(t, e, w, 60*time.Second)
	mu.Lock()
	clock = time.Now().UTC()
	mu.Unlock()
	r, err := e.sim.AddResponse(e.ids[0], survey.Response{ResponseStatus: survey.StatusCompleted,
		DateCreated: survey.Time{Time: clock.Add(-5 * time.Minute)}, DateCompleted: survey.TimeOf(clock)})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		var n uint64
		q := fmt.Sprintf("SELECT count() FROM %s.responses_current WHERE response_id = toUUID('%s')", w.db, r.ResponseID)
		if err := w.conn.QueryRow(context.Background(), q).Scan(&n); err == nil && n == 1 {
			break
		}
		if time.Since(start) > 2*time.Second+3*time.Second {
			t.Fatalf("new response not visible %v after it completed (poll interval 2s)", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("visible %v after completion (poll interval 2s)", time.Since(start))
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
}

// A broken response detail (completed in 2200, beyond ClickHouse's
// DateTime) is rejected with its reason, the other responses are written,
// and the sync completes: the broken response does not pin its stream. A
// rerun completes too (it does not re-read the window forever).
func TestBrokenDetailIsRejectedAndSyncMovesOn(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 400, 41)})
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultFutureDate, Count: 3}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	if !strings.Contains(d.output(), "response rejected") {
		t.Errorf("the daemon did not log the reject; output:\n%s", tail(d.output(), 30))
	}
	rejected := readRejects(t, w)
	if len(rejected) != 3 {
		t.Fatalf("rejects holds %v, want 3 responses", rejected)
	}
	for id, reason := range rejected {
		if reason != "flatten/date_out_of_range" && reason != "fetch/bad_date" {
			t.Errorf("response %s rejected for %s, want flatten/date_out_of_range", id, reason)
		}
	}
	// Everything else is in the warehouse, exactly.
	truth := truthFingerprints(e)
	for id := range rejected {
		delete(truth, id)
	}
	got := warehouseFingerprints(t, w)
	for id := range rejected {
		delete(got, id) // a reconcile pass may have read it again, intact
	}
	if msg := diff(truth, got); msg != "" {
		t.Fatal(msg)
	}
	// A second run finishes as well, and records nothing new (the fault is
	// spent: whatever it reads again now is intact).
	d = startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	if again := readRejects(t, w); len(again) != 3 {
		t.Errorf("after a rerun rejects holds %d responses, want 3", len(again))
	}
}

// A detail the client cannot decode (a date that is not a date) is
// rejected at the fetch stage, and the sync completes without it.
func TestUndecodableDetailIsRejectedAtFetch(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 300, 47)})
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultInvalidDate, Count: 2}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	rejected := readRejects(t, w)
	if len(rejected) != 2 {
		t.Fatalf("rejects holds %v, want 2 responses", rejected)
	}
	for id, reason := range rejected {
		if reason != "fetch/bad_date" {
			t.Errorf("response %s rejected for %s, want fetch/bad_date", id, reason)
		}
	}
	truth := truthFingerprints(e)
	got := warehouseFingerprints(t, w)
	for id := range rejected {
		delete(truth, id)
		delete(got, id)
	}
	if msg := diff(truth, got); msg != "" {
		t.Fatal(msg)
	}
	if strings.Contains(d.output(), tokenOf(e)) {
		t.Fatal("the API token appears in the daemon's output")
	}
	var leaks uint64
	if err := w.conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count() FROM %s.rejects WHERE position(error, '%s') > 0", w.db, tokenOf(e))).Scan(&leaks); err != nil || leaks != 0 {
		t.Fatalf("rejects rows quoting the API token: %d (%v)", leaks, err)
	}
}

// readRejects returns the rejected responses as id → "stage/reason".
func readRejects(t *testing.T, w *testWarehouse) map[string]string {
	t.Helper()
	rows, err := w.conn.Query(context.Background(), fmt.Sprintf(
		"SELECT response_id, any(stage), any(reason), any(error) FROM %s.rejects GROUP BY response_id", w.db))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, stage, reason, msg string
		if err := rows.Scan(&id, &stage, &reason, &msg); err != nil {
			t.Fatal(err)
		}
		if msg == "" {
			t.Errorf("reject of %s has no error text", id)
		}
		out[id] = stage + "/" + reason
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The Parquet sink keeps the rejects as JSON Lines under <dir>/rejects.
func TestBrokenDetailIsRejectedIntoParquetDir(t *testing.T) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 200, 43)})
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultFutureDate, Count: 2}); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n")
	d := startDaemon(t, cfg, "--exit-when-synced")
	d.wait(t, 3*time.Minute)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(cfg), "data", "rejects", "*.jsonl"))
	lines := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if !strings.Contains(l, `"reason":"date_out_of_range"`) && !strings.Contains(l, `"reason":"bad_date"`) {
				t.Errorf("reject line %s", l)
			}
			lines++
		}
	}
	if lines != 2 {
		t.Fatalf("%d reject lines in %v, want 2", lines, files)
	}
}

// A warehouse that refuses every row (issue 17): the answers table
// disappears mid-backfill. Within seconds the log has one line per back-off
// step naming the table and the server's message, the metric says
// refused, status and doctor name the table and the message; once the
// table is back, the daemon writes everything held and the warehouse
// matches the emulator exactly.
func TestWarehouseRefusingRowsIsVisibleAndLosesNothing(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(2, 3000, 43)})
	port := freePort(t)
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  batch:\n    max_rows: 2000\n")
	// metrics on a free port: status and doctor read the daemon there.
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), "metrics:\n  listen: \"\"\n", fmt.Sprintf("metrics:\n  listen: 127.0.0.1:%d\n", port), 1))
	if err := os.WriteFile(cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg, "--exit-when-synced")
	ctx := context.Background()
	waitUntil := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s; output:\n%s", what, tail(d.output(), 40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUntil("the first rows", 2*time.Minute, func() bool {
		var n uint64
		return w.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM %s.responses", w.db)).Scan(&n) == nil && n > 300
	})
	if err := w.conn.Exec(ctx, fmt.Sprintf("RENAME TABLE %s.answers TO %s.answers_away", w.db, w.db)); err != nil {
		t.Fatal(err)
	}
	refusedAt := time.Now()
	const line = "the warehouse refuses the write"
	waitUntil("the refusal in the log", time.Minute, func() bool { return strings.Count(d.output(), line) >= 3 })
	if took := time.Since(refusedAt); took > time.Minute {
		t.Errorf("the refusal took %v to show", took)
	}
	logged := d.output()
	for _, want := range []string{"table=answers", "code=60", "doesn't exist", "attempt=", "retry_in="} {
		if !strings.Contains(logged, want) {
			t.Errorf("the back-off log lines lack %q:\n%s", want, tail(logged, 20))
		}
	}
	m, err := daemon.Scrape(ctx, fmt.Sprintf("127.0.0.1:%d", port), `surveysync_sink_write_failing{class="refused",table="answers"}`)
	if err != nil || m[`surveysync_sink_write_failing{class="refused",table="answers"}`] != 1 {
		t.Errorf("surveysync_sink_write_failing{class=refused,table=answers} = %v (%v), want 1", m, err)
	}
	code, out, errOut := runBin(t, t.TempDir(), nil, "status", "--config", cfg)
	t.Logf("status:\n%s", out)
	if code != exitOK || !strings.Contains(out, "FAILING") || !strings.Contains(out, w.db+".answers") || !strings.Contains(out, "doesn't exist") {
		t.Errorf("status: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = runBin(t, t.TempDir(), nil, "doctor", "--config", cfg)
	t.Logf("doctor:\n%s", out)
	if code != exitFail || !strings.Contains(out, "FAIL  writes to "+w.db+".answers: refuses inserts: code 60") ||
		!strings.Contains(out, "fix: "+w.db+".answers is missing") || !strings.Contains(out, "the daemon on") ||
		!strings.Contains(out, "ok    writes to "+w.db+".responses") || strings.Contains(out, "FAIL  metrics listener") {
		t.Errorf("doctor: exit %d\n%s", code, out)
	}
	for _, s := range []string{d.output(), out} {
		if strings.Contains(s, tokenOf(e)) {
			t.Fatal("the API token appears in the output")
		}
	}
	if err := w.conn.Exec(ctx, fmt.Sprintf("RENAME TABLE %s.answers_away TO %s.answers", w.db, w.db)); err != nil {
		t.Fatal(err)
	}
	d.wait(t, 4*time.Minute)
	if !strings.Contains(d.output(), "sink writes succeed again") {
		t.Errorf("no recovery line:\n%s", tail(d.output(), 20))
	}
	if n := strings.Count(d.output(), line); n > 20 {
		t.Errorf("%d refusal lines for a short outage: one per back-off step expected", n)
	}
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal(msg)
	}
	if rej := readRejects(t, w); len(rej) != 0 {
		t.Fatalf("%d rejects for a table problem, want 0", len(rej))
	}
}
