package dashboards

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// --- the daemon binary ---------------------------------------------------------

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// daemonBinary builds cmd/surveysync once per test binary.
func daemonBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "surveysync-dashboards-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "surveysync")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/surveysync").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ./cmd/surveysync: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func cleanupBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// proc is a child process stopped (SIGTERM, then SIGKILL) at cleanup.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan error
}

func startProc(t testing.TB, name string, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s output (tail):\n%s", name, tail(p.out.String(), 40))
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// waitFor polls cond every 200 ms until it returns true or timeout.
func waitFor(t testing.TB, what string, timeout time.Duration, p *proc, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if p != nil && p.exited() {
			t.Fatalf("waiting for %s: %s exited:\n%s", what, p.name, tail(p.out.String(), 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func httpGet(url string) (int, []byte, error) {
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// --- a daemon against its built-in emulator ---------------------------------------

type daemonSetup struct {
	surveys, responses int
	clickhouseAddr     string // "" = Parquet sink
	clickhouseDB       string
	metricsListen      string // "" = no metrics server
	webhooks, feed     bool
	files              bool
	pollInterval       string
	reconcile          string // sync.reconcile_interval with ClickHouse; "" = default
}

// writeDaemonConfig writes the daemon's YAML configuration under dir.
func writeDaemonConfig(t testing.TB, dir string, s daemonSetup) (cfgPath, webhookURL string) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "demo:\n  emulator:\n    enabled: true\n    surveys: %d\n    responses_per_survey: %d\n", s.surveys, s.responses)
	fmt.Fprintf(&b, "sync:\n  poll_interval: %s\n", s.pollInterval)
	if s.reconcile != "" {
		fmt.Fprintf(&b, "  reconcile_interval: %s\n", s.reconcile)
	}
	if s.clickhouseAddr != "" {
		fmt.Fprintf(&b, "clickhouse:\n  addr: [%s]\n  database: %s\n", s.clickhouseAddr, s.clickhouseDB)
	}
	fmt.Fprintf(&b, "parquet:\n  dir: %s\n", filepath.Join(dir, "data"))
	fmt.Fprintf(&b, "metrics:\n  listen: %q\n", s.metricsListen)
	fmt.Fprintf(&b, "shutdown:\n  drain_timeout: 5s\n")
	if s.files {
		fmt.Fprintf(&b, "files:\n  enabled: true\n  url: file://%s\n", filepath.Join(dir, "files"))
	}
	if s.webhooks {
		listen := freeAddr(t)
		path := "/hooks/" + randHex(12)
		webhookURL = "http://" + listen + path
		fmt.Fprintf(&b, "webhooks:\n  enabled: true\n  listen: %s\n  path: %s\n  spool_dir: %s\n", listen, path, filepath.Join(dir, "spool"))
	}
	if s.feed {
		feedDir := filepath.Join(dir, "feed")
		if err := os.MkdirAll(feedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		csv := "email,first_name,last_name\njan.novak@example.com,Jan,Novák\neva.dvorakova@example.com,Eva,Dvořáková\npetr.svoboda@example.com,Petr,Svoboda\n"
		if err := os.WriteFile(filepath.Join(feedDir, "contacts.csv"), []byte(csv), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, `feeds:
  - name: crm
    type: csv_dir
    distribution_id: 14457
    mapping:
      email: email
      first_name: first_name
      last_name: last_name
    dedupe_key: email
    interval: 1s
    csv_dir:
      dir: %s
    send:
      message_id: 88
      schedule:
        policy: immediate
`, feedDir)
	}
	cfgPath = filepath.Join(dir, "surveysync.yaml")
	if err := os.WriteFile(cfgPath, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfgPath, webhookURL
}

// exposition is a parsed /metrics page: family → type, and its sample lines.
type exposition struct {
	types   map[string]string
	samples map[string][]string // family → sample lines
	raw     []byte
}

func parseExposition(raw []byte) exposition {
	e := exposition{types: map[string]string{}, samples: map[string][]string{}, raw: raw}
	for _, line := range strings.Split(string(raw), "\n") {
		if f, ok := strings.CutPrefix(line, "# TYPE "); ok {
			parts := strings.Fields(f)
			e.types[parts[0]] = parts[1]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		fam := familyOf(name, func(s string) bool { _, ok := e.types[s]; return ok })
		e.samples[fam] = append(e.samples[fam], line)
	}
	return e
}

// sum adds the values of a family's samples whose line contains every one
// of the given label matchers (e.g. `outcome="pushed"`).
func (e exposition) sum(family string, contains ...string) float64 {
	var total float64
next:
	for _, l := range e.samples[family] {
		for _, c := range contains {
			if !strings.Contains(l, c) {
				continue next
			}
		}
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err == nil {
			total += v
		}
	}
	return total
}

func scrape(t testing.TB, metricsURL string) exposition {
	t.Helper()
	code, body, err := httpGet(metricsURL)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s: %d %v", metricsURL, code, err)
	}
	return parseExposition(body)
}

func postWebhook(t testing.TB, url, id, body string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", id)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestLiveDaemon runs the real daemon against its built-in emulator with
// webhooks, file copies and a contact feed (and ClickHouse when
// SURVEYSYNC_TEST_CLICKHOUSE_ADDR is set), then checks its /metrics with
// promlint and against docs/metrics.md, and evaluates every PromQL
// expression of the dashboards and alert rules in a real Prometheus
// scraping it.
func TestLiveDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the daemon and Prometheus")
	}
	bin := daemonBinary(t)
	dir := t.TempDir()
	setup := daemonSetup{surveys: 3, responses: 150, metricsListen: freeAddr(t), webhooks: true, feed: true, files: true, pollInterval: "1s"}
	active := map[string]bool{"always": true, "webhooks": true, "feeds": true, "files": true}
	if addr := os.Getenv("SURVEYSYNC_TEST_CLICKHOUSE_ADDR"); addr != "" {
		setup.clickhouseAddr, setup.clickhouseDB = addr, "test_dashboards_"+randHex(6)
		setup.reconcile = "3s" // a reconcile pass within the test
		active["clickhouse"] = true
		t.Cleanup(func() { dropDatabase(t, addr, setup.clickhouseDB) })
	} else {
		t.Log("SURVEYSYNC_TEST_CLICKHOUSE_ADDR is not set: Parquet sink, ClickHouse metrics are not checked")
	}
	cfg, hookURL := writeDaemonConfig(t, dir, setup)
	d := startProc(t, "surveysync", exec.Command(bin, "run", "--config", cfg))
	base := "http://" + setup.metricsListen
	// /readyz, not /healthz: the webhook receiver listens a moment after
	// the metrics listener answers (readiness waits for it).
	waitFor(t, "/readyz", 30*time.Second, d, func() bool { code, _, _ := httpGet(base + "/readyz"); return code == 200 })

	// A webhook sent twice with one id: accepted, then a duplicate.
	ev := `{"event_name":"survey_launched","survey_id":4574,"launched_at":"` + time.Now().UTC().Format(time.RFC3339) + `"}`
	id := "msg_" + randHex(8)
	for range 2 {
		if code := postWebhook(t, hookURL, id, ev); code/100 != 2 {
			t.Fatalf("webhook: status %d", code)
		}
	}

	// Everything has data: every stream polled, responses written, files
	// copied, the feed pushed and sent, the webhook processed (and a
	// reconcile pass with ClickHouse).
	streams := setup.surveys * 4
	var last exposition
	waitFor(t, "metrics of every component", 120*time.Second, d, func() bool {
		last = scrape(t, base+"/metrics")
		ok := len(last.samples["surveysync_poll_watermark_timestamp_seconds"]) == streams &&
			last.sum("surveysync_pipeline_responses_written_total") > 0 &&
			last.sum("surveysync_files_copied_total") > 0 &&
			last.sum("surveysync_feed_rows_total", `outcome="pushed"`) == 3 &&
			last.sum("surveysync_feed_sends_total") > 0 &&
			last.sum("surveysync_webhook_events_total", `outcome="processed"`) > 0 &&
			last.sum("surveysync_webhook_events_total", `outcome="duplicate"`) > 0
		if active["clickhouse"] {
			// A reconcile pass done (with webhooks on, the streams' second
			// cycles are a 30 min safety net away).
			ok = ok && last.sum("surveysync_poll_reconcile_passes_total", `outcome="ok"`) > 0
		}
		return ok
	})
	if code, body, _ := httpGet(base + "/readyz"); code != 200 {
		t.Errorf("/readyz: %d %s", code, body)
	}

	t.Run("promlint", func(t *testing.T) {
		problems, err := promlint.New(bytes.NewReader(last.raw)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
		for fam, lines := range last.samples {
			for _, l := range lines {
				if regexp.MustCompile(`response_id=|contact_id=|file_id=`).MatchString(l) {
					t.Errorf("%s: unbounded label in %s", fam, l)
				}
			}
		}
	})

	t.Run("docs/metrics.md", func(t *testing.T) {
		doc := loadMetricsDoc(t)
		for fam, typ := range last.types {
			if !strings.HasPrefix(fam, "surveysync_") {
				continue
			}
			m, ok := doc[fam]
			if !ok {
				t.Errorf("/metrics has %s (%s), docs/metrics.md does not", fam, typ)
				continue
			}
			if !strings.Contains(docTypeLine(t, fam), "| "+typ+" |") {
				t.Errorf("%s is a %s in /metrics, not as documented", fam, typ)
			}
			_ = m
		}
		for name, m := range doc {
			if m.when == "first event" {
				continue // defined in the sources (TestMetricsDocMatchesSources), no series until it happens
			}
			if _, ok := last.types[name]; !ok && active[m.when] {
				t.Errorf("docs/metrics.md lists %s (when: %s), /metrics does not have it", name, m.when)
			}
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		checkWithPrometheus(t, setup.metricsListen, active)
	})
}

func docTypeLine(t *testing.T, name string) string {
	raw, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(l, "| `"+name+"` |") {
			return l
		}
	}
	return ""
}

// --- Prometheus -----------------------------------------------------------------

type promResponse struct {
	Status    string          `json:"status"`
	Error     string          `json:"error"`
	ErrorType string          `json:"errorType"`
	Data      json.RawMessage `json:"data"`
}

type promClient struct{ base string }

// query evaluates expr at the current time; it returns the number of
// series (1 for a scalar or string result).
func (c promClient) query(expr string) (int, error) {
	code, body, err := httpGet(c.base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return 0, err
	}
	var r promResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return 0, fmt.Errorf("status %d, body %.200s", code, body)
	}
	if r.Status != "success" {
		return 0, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	var data struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(r.Data, &data); err != nil {
		return 0, err
	}
	if data.ResultType == "scalar" || data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	if err := json.Unmarshal(data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

func (c promClient) value(expr string) float64 {
	code, body, err := httpGet(c.base + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil || code != 200 {
		return -1
	}
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &r) != nil || len(r.Data.Result) == 0 {
		return -1
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return -1
	}
	return v
}

// mayBeEmpty are dashboard expressions whose metrics all have series but
// which select values that a healthy run does not produce (matched by
// substring), with the reason.
var mayBeEmpty = map[string]string{}

// checkWithPrometheus starts Debian's prometheus scraping the daemon every
// second, with the alert rules loaded, and evaluates every expression.
//
// The rule: every expression must parse and evaluate. A dashboard
// expression must return at least one series, unless a metric it reads has
// no series and is documented as "first event" (or needs a feature this run
// does not have), or it is in mayBeEmpty. An alert expression is a
// threshold, so an empty result is its normal state: every metric it reads
// must have series (same exceptions), and Prometheus's own evaluation of the
// rule must report health "ok".
func checkWithPrometheus(t *testing.T, metricsListen string, active map[string]bool) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not installed (Debian package prometheus)")
	}
	dir := t.TempDir()
	rules, err := filepath.Abs(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: surveysync
    static_configs:
      - targets: [%q]
`, rules, metricsListen)
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	listen := freeAddr(t)
	p := startProc(t, "prometheus", exec.Command(bin, "--config.file="+cfgPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+listen, "--log.level=warn"))
	c := promClient{base: "http://" + listen}
	waitFor(t, "prometheus ready", 60*time.Second, p, func() bool { code, _, _ := httpGet(c.base + "/-/ready"); return code == 200 })
	// At least 12 scrapes, so that rate() over the 10 s that stands for
	// $__rate_interval has samples, and a few rule evaluations.
	waitFor(t, "12 scrapes", 60*time.Second, p, func() bool {
		return c.value(`count_over_time(up{job="surveysync"}[1m])`) >= 12 && c.value(`min(up{job="surveysync"})`) == 1
	})

	doc := loadMetricsDoc(t)
	hasSeries := map[string]bool{}
	seriesOf := func(name string) bool {
		if v, ok := hasSeries[name]; ok {
			return v
		}
		n, err := c.query(fmt.Sprintf(`count({__name__=%q})`, name))
		hasSeries[name] = err == nil && n > 0
		return hasSeries[name]
	}
	known := func(s string) bool { _, ok := doc[s]; return ok }
	// exempt says why a metric without series is acceptable, or "".
	exempt := func(name string) string {
		m, ok := doc[familyOf(name, known)]
		switch {
		case !ok:
			return ""
		case m.when == "first event":
			return "first event"
		case !active[m.when]:
			return "needs " + m.when
		}
		return ""
	}

	exprs := append(healthExprs(t), alertExprs(t)...)
	checked := 0
	for _, e := range exprs {
		q := expandPromVars(e.expr)
		n, err := c.query(q)
		if err != nil {
			t.Errorf("%s: %v\n  %s", e.where, err, q)
			continue
		}
		checked++
		var missing []string
		for _, name := range metricNames(q) {
			if seriesOf(name) {
				continue
			}
			why := exempt(name)
			if why == "" {
				t.Errorf("%s: metric %s has no series in Prometheus\n  %s", e.where, name, q)
			}
			missing = append(missing, name+" ("+why+")")
		}
		if e.alert || n > 0 {
			continue
		}
		if len(missing) > 0 {
			t.Logf("%s: no data, allowed: %s", e.where, strings.Join(missing, ", "))
			continue
		}
		allowed := ""
		for sub, why := range mayBeEmpty {
			if strings.Contains(q, sub) {
				allowed = why
			}
		}
		if allowed == "" {
			t.Errorf("%s: no data\n  %s", e.where, q)
		} else {
			t.Logf("%s: no data, allowed: %s", e.where, allowed)
		}
	}
	t.Logf("evaluated %d PromQL expressions (%d dashboard, %d alert)", checked, len(healthExprs(t)), len(alertExprs(t)))

	// Prometheus evaluated the rules itself: none may be broken.
	_, body, err := httpGet(c.base + "/api/v1/rules")
	if err != nil {
		t.Fatal(err)
	}
	var rr struct {
		Data struct {
			Groups []struct {
				Rules []struct {
					Name      string `json:"name"`
					Health    string `json:"health"`
					LastError string `json:"lastError"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &rr); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rr.Data.Groups {
		for _, r := range g.Rules {
			n++
			if r.Health != "ok" {
				t.Errorf("rule %s: health %q %s", r.Name, r.Health, r.LastError)
			}
		}
	}
	if want := len(alertExprs(t)); n != want {
		t.Errorf("Prometheus loaded %d rules, alerts.yaml has %d", n, want)
	}
	// A healthy daemon fires nothing but the quiet-survey-independent
	// alerts; in particular no sync lag, no 401/402, no spool alerts.
	_, body, _ = httpGet(c.base + "/api/v1/alerts")
	if bytes.Contains(body, []byte(`"state":"firing"`)) {
		t.Errorf("alerts firing against a healthy daemon: %s", body)
	}
	_ = context.Background
}
