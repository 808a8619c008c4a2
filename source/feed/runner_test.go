package feed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/internal/testkit/feedtest"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/source/feed"
	"github.com/surveysync/surveysync/source/surveyapi"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) {
	if os.Getenv("FEED_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	if os.Getenv("FEED_BENCH_CHILD") != "" {
		benchChild()
		return
	}
	goleak.VerifyTestMain(m)
}

const dist = 14457

func newClient(t testing.TB, url string, timeout time.Duration) *surveyapi.Client {
	t.Helper()
	c, err := surveyapi.New(surveyapi.Options{BaseURL: url + "/v1", Token: "test-token", UserAgent: "surveysync-test (test@example.cz)",
		RetryInitial: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxRetries: 60, Timeout: timeout, MaxConcurrency: 32})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func csvFeed(dir string) feed.Options {
	return feed.Options{
		Name: "crm", Type: feed.TypeCSVDir, DistributionID: dist, Channel: feed.ChannelEmail,
		Mapping: map[string]string{"email": "E-mail", "first_name": "Jméno", "last_name": "Příjmení",
			"company": "Firma", "import_number": "Import", "user_field1": "ID"},
		Salutation: feed.Salutation{Generate: true, PrefixMale: "Vážený pane", PrefixFemale: "Vážená paní", IncludeLastName: true},
		DedupeKey:  "ID",
		CSVDir:     feed.CSVDirOptions{Dir: dir},
		Send:       feed.SendOptions{MessageID: 9},
	}
}

type env struct {
	api       *surveyapi.Client
	ledger    *parquet.FileLedger
	reg       *prometheus.Registry
	runner    *feed.Runner
	ledgerDir string
}

func newEnv(t testing.TB, url string, ledgerDir string, timeout time.Duration, feeds ...feed.Options) *env {
	t.Helper()
	l, err := parquet.NewFileLedger(ledgerDir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	e := &env{api: newClient(t, url, timeout), ledger: l, reg: prometheus.NewRegistry(), ledgerDir: ledgerDir}
	e.runner, err = feed.NewRunner(feed.RunnerOptions{Feeds: feeds, API: e.api, Ledger: l, Registerer: e.reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// genCSV writes n rows with known malformed rows and repeats. It returns
// the IDs expected to be pushed and the lines expected to be rejected.
func genCSV(t testing.TB, path string, n int, withBad bool) (good map[string]bool, badLines map[int64]string) {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("\ufeffID;E-mail;Jméno;Příjmení;Firma;Import\n")
	good, badLines = map[string]bool{}, map[int64]string{}
	line := int64(1)
	for i := 1; i <= n; i++ {
		line++
		id := fmt.Sprintf("C%06d", i)
		email := fmt.Sprintf("kontakt%d@firma-%d.cz", i, i%17)
		imp := fmt.Sprint(i % 5)
		switch {
		case withBad && i%97 == 0:
			email = "kontakt" + fmt.Sprint(i) + "@"
			badLines[line] = "email"
		case withBad && i%211 == 0:
			imp = "pět"
			badLines[line] = "import_number"
		case withBad && i%503 == 0:
			fmt.Fprintf(&b, "%s;%s;Jana\n", id, email)
			badLines[line] = "fields"
			continue
		case withBad && i%601 == 0:
			fmt.Fprintf(&b, "%s;%s;Ja\"na;Nováková;Firma;1\n", id, email)
			badLines[line] = "quote"
			continue
		case withBad && i%50 == 0:
			id = fmt.Sprintf("C%06d", i-1) // a repeat of the previous row's key
			if !good[id] {
				good[id] = true // the previous row was rejected: this one is the first good one
			}
		default:
			good[id] = true
		}
		fmt.Fprintf(&b, "%s;%s;Jana;\"Nováková; ml.\";Firma %d s.r.o.;%s\n", id, email, i%3, imp)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return good, badLines
}

func pushedIDs(t testing.TB, svc *feedtest.Service) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, c := range svc.Contacts(dist) {
		got[c.UserField1]++
	}
	return got
}

func checkExactlyOnce(t testing.TB, got map[string]int, want map[string]bool) {
	t.Helper()
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s pushed %d times", id, n)
		}
		if !want[id] {
			t.Errorf("%s pushed but not expected", id)
		}
	}
	for id := range want {
		if got[id] == 0 {
			t.Errorf("%s never pushed", id)
		}
	}
}

func report(t testing.TB, dir, sub string) []*feed.FileReport {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(dir, sub, "*.report.json"))
	sort.Strings(paths)
	var out []*feed.FileReport
	for _, p := range paths {
		r, err := feed.ReadFileReport(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

func TestCSV10kOnceAndRedrop(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, csvFeed(dir))
	good, bad := genCSV(t, filepath.Join(dir, "kontakty.csv"), 10000, true)
	ctx := context.Background()
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	reps := report(t, dir, "done")
	if len(reps) != 1 {
		t.Fatalf("want 1 report in done/, got %d", len(reps))
	}
	r := reps[0]
	if r.File != "kontakty.csv" || r.Summary.Rows != 10000 || r.Summary.Pushed != int64(len(good)) ||
		r.Summary.Invalid != int64(len(bad)) || r.Summary.Failed != 0 || r.Summary.Uncertain != 0 {
		t.Fatalf("summary %+v; want %d pushed, %d invalid", r.Summary, len(good), len(bad))
	}
	if r.Summary.Skipped != 10000-int64(len(good))-int64(len(bad)) {
		t.Fatalf("skipped %d", r.Summary.Skipped)
	}
	gotBad := map[int64]bool{}
	for _, p := range r.Problems {
		if p.Outcome != feed.OutcomeInvalid || p.Reason == "" {
			t.Errorf("problem %+v", p)
		}
		gotBad[p.Line] = true
		switch want := bad[p.Line]; want {
		case "email", "import_number":
			if p.Field != want {
				t.Errorf("line %d: field %q, want %q", p.Line, p.Field, want)
			}
		}
	}
	for l := range bad {
		if !gotBad[l] {
			t.Errorf("bad line %d (%s) not reported", l, bad[l])
		}
	}
	if len(gotBad) != len(bad) {
		t.Errorf("reported %d bad lines, want %d", len(gotBad), len(bad))
	}
	if n := len(svc.Sends()); n != 1 {
		t.Fatalf("sends after first file: %d, want 1", n)
	}
	if r.Summary.Send == nil || r.Summary.Send.State != feed.SendSent || r.Summary.Send.Contacts != int64(len(good)) {
		t.Fatalf("send in report: %+v", r.Summary.Send)
	}

	// The same file dropped again pushes nothing and sends nothing.
	genCSV(t, filepath.Join(dir, "kontakty.csv"), 10000, true)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	if n := len(svc.Sends()); n != 1 {
		t.Fatalf("sends after re-drop: %d, want 1", n)
	}
	reps = report(t, dir, "done")
	if len(reps) != 2 || reps[1].Summary.Pushed != 0 || reps[1].Summary.Skipped != int64(10000-len(bad)) {
		t.Fatalf("re-drop report: %+v", reps[len(reps)-1].Summary)
	}
	// A fresh runner on the same ledger (a restart) also skips everything.
	e.ledger.Close() // one process holds the ledger at a time
	e2 := newEnv(t, svc.URL(), e.ledgerDir, 5*time.Second, csvFeed(dir))
	genCSV(t, filepath.Join(dir, "again.csv"), 10000, true)
	if err := e2.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	if got := metric(t, e.reg, "surveysync_feed_rows_total", "crm", "pushed"); got != float64(len(good)) {
		t.Fatalf("rows_total{pushed} = %v, want %d", got, len(good))
	}
	if got := metric(t, e.reg, "surveysync_feed_files_total", "crm", "done"); got != 2 {
		t.Fatalf("files_total{done} = %v", got)
	}
}

// metric returns the value of the series of name whose label values are
// values (in label order), or -1.
func metric(t testing.TB, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(values) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != values[i] {
					continue next
				}
			}
			if m.Counter != nil {
				return m.Counter.GetValue()
			}
			return m.Gauge.GetValue()
		}
	}
	return -1
}

func TestMalformedFileGoesToFailed(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, csvFeed(dir))
	os.WriteFile(filepath.Join(dir, "empty.csv"), nil, 0o644)
	os.WriteFile(filepath.Join(dir, "wrong.csv"), []byte("a,b,c\n1,2,3\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "ignored.xlsx"), []byte("PK"), 0o644)
	os.WriteFile(filepath.Join(dir, ".partial.csv"), []byte("ID\n"), 0o644)
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	reps := report(t, dir, "failed")
	if len(reps) != 2 || reps[0].Error == "" || reps[1].Error == "" {
		t.Fatalf("failed reports: %+v", reps)
	}
	for _, n := range []string{"ignored.xlsx", ".partial.csv"} {
		if _, err := os.Stat(filepath.Join(dir, n)); err != nil {
			t.Errorf("%s should stay untouched: %v", n, err)
		}
	}
	if len(svc.Contacts(dist)) != 0 || len(svc.Sends()) != 0 {
		t.Fatal("nothing should be pushed or sent")
	}
}

func TestStormsLoseAndDuplicateNothing(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.FaultFor = func(n int64) feedtest.Fault {
		switch {
		case n%3 == 0:
			return feedtest.TooMany
		case n%5 == 0 || n%7 == 0:
			return feedtest.Unavailable
		}
		return feedtest.None
	}
	dir := t.TempDir()
	o := csvFeed(dir)
	o.Concurrency = 16
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o)
	good, _ := genCSV(t, filepath.Join(dir, "storm.csv"), 2000, false)
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	r := report(t, dir, "done")[0]
	if r.Summary.Pushed != int64(len(good)) || r.Summary.Failed+r.Summary.Uncertain != 0 {
		t.Fatalf("summary %+v", r.Summary)
	}
	if len(svc.Sends()) != 1 {
		t.Fatalf("sends: %d", len(svc.Sends()))
	}
	if svc.Calls() < int64(len(good))*3/2 {
		t.Fatalf("only %d calls: the storm did not happen", svc.Calls())
	}
}

func TestRejectsAndUncertainAndResolve(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.Reject = func(c survey.Contact) string {
		if strings.HasPrefix(c.Email, "kontakt13@") {
			return "Invalid e-mail domain"
		}
		return ""
	}
	svc.FaultFor = func(n int64) feedtest.Fault {
		if n == 5 {
			return feedtest.Hang
		}
		return feedtest.None
	}
	dir := t.TempDir()
	ledgerDir := t.TempDir()
	o := csvFeed(dir)
	o.Concurrency = 1 // call n == row n
	e := newEnv(t, svc.URL(), ledgerDir, 300*time.Millisecond, o)
	genCSV(t, filepath.Join(dir, "a.csv"), 20, false)
	ctx := context.Background()
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	r := report(t, dir, "done")[0]
	if r.Summary.Pushed != 18 || r.Summary.Failed != 1 || r.Summary.Uncertain != 1 {
		t.Fatalf("summary %+v", r.Summary)
	}
	var uncertainKey string
	for _, p := range r.Problems {
		switch p.Outcome {
		case feed.OutcomeFailed:
			if p.Line != 14 || !strings.Contains(p.Reason, "Invalid e-mail domain") {
				t.Errorf("failed row %+v", p)
			}
		case feed.OutcomeUncertain:
			uncertainKey = p.Key
			if p.Line != 6 || !strings.Contains(p.Reason, "outcome unknown") {
				t.Errorf("uncertain row %+v", p)
			}
		}
	}
	unc, err := e.runner.Uncertain(ctx, "crm")
	if err != nil || len(unc) != 1 || unc[0].Key != uncertainKey || unc[0].Line != 6 || !strings.HasSuffix(unc[0].File, "a.csv") {
		t.Fatalf("Uncertain: %+v %v", unc, err)
	}
	if got := metric(t, e.reg, "surveysync_feed_uncertain_rows", "crm"); got != 1 {
		t.Fatalf("uncertain gauge %v", got)
	}

	// Dropped again: the rejected row is tried again (and rejected again),
	// the uncertain one is held, the others skipped.
	svc.Reject = nil
	genCSV(t, filepath.Join(dir, "b.csv"), 20, false)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	r = report(t, dir, "done")[1]
	if r.Summary.Pushed != 1 || r.Summary.Skipped != 18 || r.Summary.Uncertain != 1 {
		t.Fatalf("second summary %+v", r.Summary)
	}
	// The operator checked: the hung contact does exist. Resolve it.
	if err := e.runner.Resolve(ctx, "crm", []string{uncertainKey}, feed.ResolvePushed); err != nil {
		t.Fatal(err)
	}
	genCSV(t, filepath.Join(dir, "c.csv"), 20, false)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	r = report(t, dir, "done")[2]
	if r.Summary.Skipped != 20 {
		t.Fatalf("third summary %+v", r.Summary)
	}
	got := pushedIDs(t, svc)
	for id, n := range got {
		if n != 1 {
			t.Errorf("%s created %d times", id, n)
		}
	}
	if len(got) != 20 {
		t.Fatalf("%d distinct contacts, want 20", len(got))
	}
	if unc, _ := e.runner.Uncertain(ctx, "crm"); len(unc) != 0 {
		t.Fatalf("still uncertain: %+v", unc)
	}
	// Two batches pushed something: two sends; the third pushed nothing.
	if n := len(svc.Sends()); n != 2 {
		t.Fatalf("sends %d, want 2", n)
	}
}

func TestHTTPFeed(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	o := feed.Options{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Channel: feed.ChannelCATI,
		Mapping:   map[string]string{"phone": "tel", "mobile": "mob", "first_name": "name", "user_field1": "id", "import_number": "batch"},
		DedupeKey: "id", HTTP: feed.HTTPOptions{Path: "/feeds/web", Token: "s3cret"},
		Send: feed.SendOptions{MessageID: 3, Schedule: feed.Schedule{Policy: feed.PolicyDelay, Delay: time.Hour}}}
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o)
	srv := httptest.NewServer(e.runner.Handler())
	defer srv.Close()
	post := func(token, body string) (int, feed.HTTPResponse) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/feeds/web", strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out feed.HTTPResponse
		json.NewDecoder(res.Body).Decode(&out)
		return res.StatusCode, out
	}
	body := `[{"id": "1", "tel": "+420 777 000 001", "name": "Jan", "batch": 7},
	          {"id": 2, "tel": "777000002", "batch": "x"},
	          {"id": "3", "name": "Bez telefonu"},
	          {"id": "4", "tel": "777000004", "extra": {"nested": true}},
	          {"id": "5", "tel": "777000005"},
	          {"id": "1", "tel": "+420 777 000 001"}]`
	if code, _ := post("", body); code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", code)
	}
	if code, _ := post("wrong", body); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _ := post("s3cret", `[{"id": 1}, 2]`); code != http.StatusBadRequest {
		t.Fatalf("array with a number: %d", code)
	}
	if code, _ := post("s3cret", `[{"id": 1}] x`); code != http.StatusBadRequest {
		t.Fatalf("trailing garbage: %d", code)
	}
	code, res := post("s3cret", body)
	if code != 200 || len(res.Rows) != 6 {
		t.Fatalf("%d %+v", code, res)
	}
	want := []string{"pushed", "invalid", "invalid", "invalid", "pushed", "skipped"}
	for i, r := range res.Rows {
		if r.Line != int64(i+1) || r.Outcome != want[i] {
			t.Errorf("row %d: %+v, want %s", i+1, r, want[i])
		}
	}
	if res.Rows[0].ContactID == 0 || !strings.HasPrefix(res.Rows[0].SurveyURL, "https://") {
		t.Errorf("row 1 lacks contact id/url: %+v", res.Rows[0])
	}
	if res.Rows[1].Field != "import_number" || res.Rows[2].Field != "phone" || res.Rows[3].Field != "extra" {
		t.Errorf("fields: %q %q %q", res.Rows[1].Field, res.Rows[2].Field, res.Rows[3].Field)
	}
	if res.Send == nil || res.Send.ScheduledDate == nil || time.Until(*res.Send.ScheduledDate) < 50*time.Minute {
		t.Fatalf("send: %+v", res.Send)
	}
	// Posted again: all skipped, no second send.
	_, res = post("s3cret", body)
	if res.Pushed != 0 || res.Skipped != 3 || res.Send != nil {
		t.Fatalf("again: %+v", res.Summary)
	}
	sends := svc.Sends()
	if len(sends) != 1 || sends[0].MessageID != 3 || sends[0].ScheduledDate == nil {
		t.Fatalf("sends: %+v", sends)
	}
	// One object is accepted too; a mobile number is enough for CATI.
	code, res = post("s3cret", `{"id": "6", "mob": "+420 602 000 006"}`)
	if code != 200 || len(res.Rows) != 1 || res.Rows[0].Outcome != feed.OutcomePushed {
		t.Fatalf("one object: %d %+v", code, res)
	}
	if n := len(svc.Contacts(dist)); n != 3 {
		t.Fatalf("%d contacts", n)
	}
}

func TestDryRunAndJSONL(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	o := csvFeed(dir)
	o.Mapping = map[string]string{"email": "email", "first_name": "first", "last_name": "last", "user_field1": "ID"}
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o)
	os.WriteFile(filepath.Join(dir, "x.jsonl"), []byte(
		`{"ID": "a1", "email": "a1@example.cz", "first": "Adam", "last": "Novák"}
{"ID": "a2", "email": "not-an-email", "first": "Eva", "last": "Nová"}
this is not json

{"ID": "a1", "email": "a1@example.cz", "first": "Adam", "last": "Novák"}
{"ID": "a3", "email": "a3@example.cz", "first": "Petr"}
`), 0o644)
	var out bytes.Buffer
	if err := e.runner.DryRun(context.Background(), "crm", &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"x.jsonl:1\tpush\tkey=a1", "field=email", "x.jsonl:3\treject",
		"x.jsonl:5\tskip\tkey=a1", "x.jsonl:6\treject", "field=last_name", "would push 1, skip 1", "reject 3", "would send message 9"} {
		if !strings.Contains(s, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, s)
		}
	}
	if len(svc.Contacts(dist)) != 0 || svc.Calls() != 0 {
		t.Fatal("dry run called the API")
	}
	if _, err := os.Stat(filepath.Join(dir, "x.jsonl")); err != nil {
		t.Fatal("dry run claimed the file")
	}
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	r := report(t, dir, "done")[0]
	if r.Summary.Pushed != 1 || r.Summary.Invalid != 3 || r.Summary.Skipped != 1 {
		t.Fatalf("%+v", r.Summary)
	}
	if err := e.runner.DryRun(context.Background(), "nope", &out); err == nil {
		t.Fatal("unknown feed accepted")
	}
}

func TestRunPollsAndStops(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	o := csvFeed(dir)
	o.Interval = 20 * time.Millisecond
	h := feed.Options{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Mapping: map[string]string{"email": "e"},
		HTTP: feed.HTTPOptions{Path: "/p", Token: "t", Listen: "127.0.0.1:0"}}
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.runner.Run(ctx) }()
	good, _ := genCSV(t, filepath.Join(dir, ".tmp-upload"), 300, false)
	os.Rename(filepath.Join(dir, ".tmp-upload"), filepath.Join(dir, "late.csv"))
	deadline := time.Now().Add(10 * time.Second)
	for len(report(t, dir, "done")) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
}

// TestGracefulStopLeavesNothingUncertain cancels Run in the middle of a
// file: the chunks in flight finish, the file stays in processing/, and a
// restart pushes the rest, each row once, none uncertain.
func TestGracefulStopLeavesNothingUncertain(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.SetDelay(2 * time.Millisecond)
	dir, ledgerDir := t.TempDir(), t.TempDir()
	o := csvFeed(dir)
	o.ChunkRows = 50
	e := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, o)
	good, _ := genCSV(t, filepath.Join(dir, "big.csv"), 3000, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.runner.Run(ctx) }()
	for len(svc.Contacts(dist)) < 525 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	stopped := len(svc.Contacts(dist))
	if stopped >= len(good) {
		t.Fatalf("finished before the stop (%d)", stopped)
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "processing", "*big.csv")); len(n) != 1 {
		t.Fatalf("the file should stay in processing/: %v", n)
	}
	svc.SetDelay(0)
	e.ledger.Close() // one process holds the ledger at a time
	e2 := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, o)
	if unc, err := e2.runner.Uncertain(context.Background(), "crm"); err != nil || len(unc) != 0 {
		t.Fatalf("uncertain after a graceful stop: %d %v", len(unc), err)
	}
	if err := e2.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	r := report(t, dir, "done")
	if len(r) != 1 || r[0].Summary.Uncertain != 0 || r[0].Summary.Skipped != int64(stopped) {
		t.Fatalf("report %+v (stopped at %d)", r[0].Summary, stopped)
	}
	if n := len(svc.Sends()); n != 1 {
		t.Fatalf("sends %d", n)
	}
}

func TestRunFailsOnBusyListener(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	svc := feedtest.Start()
	defer svc.Close()
	o := csvFeed(t.TempDir())
	h := feed.Options{Name: "web", Type: feed.TypeHTTP, DistributionID: dist, Mapping: map[string]string{"email": "e"},
		HTTP: feed.HTTPOptions{Path: "/p", Token: "t", Listen: busy.Addr().String()}}
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o, h)
	if err := e.runner.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listener") {
		t.Fatalf("Run on a busy port: %v", err)
	}
}

// TestFinalServerErrorIsRecorded: a row the service keeps answering 503 (and
// one it keeps answering 429) fails after the client's retries; the failure
// is in the report and the ledger, and the row is pushed when dropped again.
func TestFinalServerErrorIsRecorded(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	svc.FaultForContact = func(c survey.Contact) feedtest.Fault {
		switch c.UserField1 {
		case "C000007":
			return feedtest.Unavailable
		case "C000008":
			return feedtest.TooMany
		}
		return feedtest.None
	}
	dir, ledgerDir := t.TempDir(), t.TempDir()
	e := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, csvFeed(dir))
	genCSV(t, filepath.Join(dir, "a.csv"), 10, false)
	ctx := context.Background()
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	r := report(t, dir, "done")[0]
	if r.Summary.Pushed != 8 || r.Summary.Failed != 2 {
		t.Fatalf("summary %+v", r.Summary)
	}
	for _, p := range r.Problems {
		if p.Outcome != feed.OutcomeFailed || !(strings.Contains(p.Reason, "503") || strings.Contains(p.Reason, "429")) {
			t.Errorf("problem %+v", p)
		}
	}
	failed := 0
	e.ledger.LoadContacts(ctx, "crm", func(c feed.ContactEntry) error {
		if c.State == feed.StateFailed {
			failed++
		}
		return nil
	})
	if failed != 2 {
		t.Fatalf("%d failed records in the ledger", failed)
	}
	svc.FaultForContact = nil
	genCSV(t, filepath.Join(dir, "b.csv"), 10, false)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	if r := report(t, dir, "done")[1]; r.Summary.Pushed != 2 || r.Summary.Skipped != 8 {
		t.Fatalf("second summary %+v", r.Summary)
	}
	got := pushedIDs(t, svc)
	if len(got) != 10 || got["C000007"] != 1 || got["C000008"] != 1 {
		t.Fatalf("created %v", got)
	}
	if v := metric(t, e.reg, "surveysync_feed_sends_total", "crm"); v != 2 {
		t.Fatalf("sends_total %v", v)
	}
	if v := metric(t, e.reg, "surveysync_feed_send_contacts", "crm", "pending"); v != 10 {
		t.Fatalf("send_contacts{pending} %v", v)
	}
	if v := metric(t, e.reg, "surveysync_feed_rows_total", "crm", "failed"); v != 2 {
		t.Fatalf("rows_total{failed} %v", v)
	}
}

// TestOutageStopsTheFile: when the service fails every call (a 503 outage
// outlasting the client's retries), the file is not failed row by row: it
// stays in processing/ and is pushed completely once the service is back.
func TestOutageStopsTheFile(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	var down atomic.Bool
	down.Store(true)
	svc.FaultFor = func(int64) feedtest.Fault {
		if down.Load() {
			return feedtest.Unavailable
		}
		return feedtest.None
	}
	dir := t.TempDir()
	o := csvFeed(dir)
	o.ChunkRows = 20
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, o)
	good, _ := genCSV(t, filepath.Join(dir, "a.csv"), 300, false)
	ctx := context.Background()
	err := e.runner.RunOnce(ctx, "crm")
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("RunOnce during the outage: %v", err)
	}
	if n, _ := filepath.Glob(filepath.Join(dir, "processing", "*a.csv")); len(n) != 1 {
		t.Fatalf("the file should stay in processing/: %v", n)
	}
	if calls := svc.Calls(); calls > 2*20*61 {
		t.Fatalf("%d calls: the outage was not noticed after two chunks", calls)
	}
	down.Store(false)
	if err := e.runner.RunOnce(ctx, "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	if r := report(t, dir, "done"); len(r) != 1 || r[0].Summary.Pushed != int64(len(good)) || r[0].Summary.Failed != 0 {
		t.Fatalf("report %+v", r)
	}
}

// notLeadingTicks is a slog handler that counts the runs a Runner's loop
// ended with ErrNotLeading ("feed: run failed; retried at the next
// interval"), so a test waits for them instead of sleeping.
type notLeadingTicks struct {
	ticks chan struct{}
}

func (h notLeadingTicks) Enabled(context.Context, slog.Level) bool { return true }
func (h notLeadingTicks) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h notLeadingTicks) WithGroup(string) slog.Handler            { return h }
func (h notLeadingTicks) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "feed: run failed; retried at the next interval" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok && errors.Is(err, feed.ErrNotLeading) {
			select {
			case h.ticks <- struct{}{}:
			default:
			}
		}
		return true
	})
	return nil
}

// TestLeadershipLostMidFile: a runner whose Leading turns false in the
// middle of a file (at the 525th create call, from the fake service's
// hook) starts no chunk and triggers no send after it (its context still
// running, as in a daemon paused past its lease); the intents it recorded
// without calling are released. Another runner on the same ledger and
// folder then leads and pushes the rest: every row once, none uncertain,
// one send. No sleeps: the test waits for the runs that a's loop ends with
// ErrNotLeading (a log hook).
func TestLeadershipLostMidFile(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir, ledgerDir := t.TempDir(), t.TempDir()
	o := csvFeed(dir)
	o.ChunkRows = 50
	o.Interval = 10 * time.Millisecond
	var leading atomic.Bool
	leading.Store(true)
	svc.FaultFor = func(n int64) feedtest.Fault {
		if n == 525 {
			leading.Store(false)
		}
		return feedtest.None
	}
	l, err := parquet.NewFileLedger(ledgerDir)
	if err != nil {
		t.Fatal(err)
	}
	ticks := notLeadingTicks{ticks: make(chan struct{})}
	a, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second), Ledger: l,
		Logger: slog.New(ticks), Leading: leading.Load})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := genCSV(t, filepath.Join(dir, "big.csv"), 3000, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	<-ticks.ticks // the file's batch ended: every chunk begun has finished
	stopped := len(svc.Contacts(dist))
	for range 3 { // three more runs of a's loop, each finding it not leading
		<-ticks.ticks
	}
	if n := len(svc.Contacts(dist)); n != stopped || stopped < 525 || stopped >= len(good) {
		t.Fatalf("a pushed %d → %d after losing the lead at the 525th call (of %d)", stopped, n, len(good))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(svc.Sends()); n != 0 {
		t.Fatalf("a triggered %d sends", n)
	}
	states := ledgerStates(t, l, "crm")
	l.Close()
	t.Logf("a stopped after %d contacts; its ledger: %v", stopped, states)
	if states[feed.StateIntent] != 0 || states[feed.StateUncertain] != 0 || states[feed.StatePushed] != stopped {
		t.Fatalf("a left the ledger with %v (%d created)", states, stopped)
	}
	b := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, o)
	if err := b.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	if r := report(t, dir, "done"); len(r) != 1 || r[0].Summary.Uncertain != 0 || int(r[0].Summary.Pushed) != len(good)-stopped {
		t.Fatalf("b's report %+v", r)
	}
	if n := len(svc.Sends()); n != 1 {
		t.Fatalf("sends %d", n)
	}
}

// ledgerStates counts the latest state of every key of a feed.
func ledgerStates(t testing.TB, l feed.Ledger, name string) map[string]int {
	t.Helper()
	last := map[string]string{}
	if err := l.LoadContacts(context.Background(), name, func(e feed.ContactEntry) error {
		last[e.Key] = e.State
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	n := map[string]int{}
	for _, s := range last {
		n[s]++
	}
	return n
}

// leaseLapsingLedger turns leading false right after the first intents it
// records: the lease lapsed while the intents were written. With
// failRelease it fails every release (the ledger went away too).
type leaseLapsingLedger struct {
	feed.Ledger
	leading     *atomic.Bool
	once        sync.Once
	failRelease bool
}

func (l *leaseLapsingLedger) RecordContacts(ctx context.Context, es []feed.ContactEntry) error {
	if l.failRelease && len(es) > 0 && es[0].State == feed.StateReleased {
		return errors.New("ledger unavailable")
	}
	err := l.Ledger.RecordContacts(ctx, es)
	if len(es) > 0 && es[0].State == feed.StateIntent {
		l.once.Do(func() { l.leading.Store(false) })
	}
	return err
}

// TestLeaseLapsedDuringIntentWrite: Leading is asked again before each
// create call, so a daemon whose lease lapsed while it wrote a chunk's
// intents creates nothing of that chunk and triggers no send; it knows it
// called nothing, so it releases those intents and the next leader pushes
// every row once, none uncertain. If the release cannot be recorded, the
// intents stay open and the next leader reports those rows uncertain (as
// after a crash), never pushing them.
func TestLeaseLapsedDuringIntentWrite(t *testing.T) {
	for _, failRelease := range []bool{false, true} {
		t.Run(fmt.Sprintf("failRelease=%v", failRelease), func(t *testing.T) {
			svc := feedtest.Start()
			defer svc.Close()
			dir, ledgerDir := t.TempDir(), t.TempDir()
			o := csvFeed(dir)
			o.ChunkRows = 50
			var leading atomic.Bool
			leading.Store(true)
			fl, err := parquet.NewFileLedger(ledgerDir)
			if err != nil {
				t.Fatal(err)
			}
			a, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
				Ledger: &leaseLapsingLedger{Ledger: fl, leading: &leading, failRelease: failRelease},
				Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leading: leading.Load})
			if err != nil {
				t.Fatal(err)
			}
			good, _ := genCSV(t, filepath.Join(dir, "small.csv"), 200, false)
			if err := a.RunOnce(context.Background(), "crm"); !errors.Is(err, feed.ErrNotLeading) {
				t.Fatalf("RunOnce: %v, want ErrNotLeading", err)
			}
			if n := len(svc.Contacts(dist)); n != 0 {
				t.Fatalf("a created %d contacts after its lease lapsed", n)
			}
			if n := len(svc.Sends()); n != 0 {
				t.Fatalf("a triggered %d sends", n)
			}
			states := ledgerStates(t, fl, "crm")
			fl.Close()
			// The chunks a had begun (intents recorded, not called): whole
			// chunks of 50, released or left open.
			begun, want := states[feed.StateReleased], feed.StateReleased
			if failRelease {
				begun, want = states[feed.StateIntent], feed.StateIntent
			}
			if begun == 0 || begun%50 != 0 || len(states) != 1 {
				t.Fatalf("a left the ledger with %v, want only %s", states, want)
			}
			b := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, o)
			if err := b.runner.RunOnce(context.Background(), "crm"); err != nil {
				t.Fatal(err)
			}
			got := pushedIDs(t, svc)
			r := report(t, dir, "done")
			if len(r) != 1 {
				t.Fatalf("reports %+v", r)
			}
			s := r[0].Summary
			if failRelease {
				for id, n := range got {
					if n != 1 {
						t.Errorf("%s pushed %d times", id, n)
					}
				}
				if int(s.Uncertain) != begun || int(s.Pushed) != len(got) || len(got)+begun != len(good) {
					t.Errorf("b: %+v; %d created of %d", s, len(got), len(good))
				}
			} else {
				checkExactlyOnce(t, got, good)
				if s.Uncertain != 0 || int(s.Pushed) != len(good) {
					t.Errorf("b: %+v", s)
				}
			}
			if n := len(svc.Sends()); n != 1 {
				t.Errorf("sends %d", n)
			}
		})
	}
}

// sendLapsingLedger turns leading false right after it records a send
// intent: the lease lapsed while the send's intent was written.
type sendLapsingLedger struct {
	feed.Ledger
	leading *atomic.Bool
}

func (l *sendLapsingLedger) RecordSend(ctx context.Context, e feed.SendEntry) error {
	err := l.Ledger.RecordSend(ctx, e)
	if e.State == feed.SendIntent {
		l.leading.Store(false)
	}
	return err
}

// TestLeaseLapsedDuringSendIntent: a daemon whose lease lapsed while it
// wrote a send's intent does not call send and releases the intent; the
// next leader, resuming the file, triggers the batch's send once.
func TestLeaseLapsedDuringSendIntent(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir, ledgerDir := t.TempDir(), t.TempDir()
	o := csvFeed(dir)
	var leading atomic.Bool
	leading.Store(true)
	fl, err := parquet.NewFileLedger(ledgerDir)
	if err != nil {
		t.Fatal(err)
	}
	a, err := feed.NewRunner(feed.RunnerOptions{Feeds: []feed.Options{o}, API: newClient(t, svc.URL(), 5*time.Second),
		Ledger: &sendLapsingLedger{Ledger: fl, leading: &leading},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Leading: leading.Load})
	if err != nil {
		t.Fatal(err)
	}
	good, _ := genCSV(t, filepath.Join(dir, "a.csv"), 120, false)
	if err := a.RunOnce(context.Background(), "crm"); !errors.Is(err, feed.ErrNotLeading) {
		t.Fatalf("RunOnce: %v, want ErrNotLeading", err)
	}
	if n := len(svc.Sends()); n != 0 {
		t.Fatalf("a triggered %d sends", n)
	}
	var sends []string
	if err := fl.LoadSends(context.Background(), "crm", func(e feed.SendEntry) error {
		sends = append(sends, e.State)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	fl.Close()
	if strings.Join(sends, ",") != feed.SendIntent+","+feed.SendReleased {
		t.Fatalf("a's send records: %v", sends)
	}
	b := newEnv(t, svc.URL(), ledgerDir, 5*time.Second, o)
	if err := b.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnce(t, pushedIDs(t, svc), good)
	if s := svc.Sends(); len(s) != 1 {
		t.Fatalf("sends %+v, want 1", s)
	}
	if r := report(t, dir, "done"); len(r) != 1 || r[0].Summary.Send == nil || r[0].Summary.Send.State != feed.SendSent {
		t.Fatalf("b's report %+v", r)
	}
}

// TestFeedFilesArePrivate: the folders a csv_dir feed creates are 0700
// and its reports 0600 (they hold keys and reasons: personal data); a
// done/ folder an earlier version created 0755 loses the world's access.
func TestFeedFilesArePrivate(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "done"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "done"), 0o755); err != nil { // whatever the umask
		t.Fatal(err)
	}
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, csvFeed(dir))
	genCSV(t, filepath.Join(dir, "a.csv"), 10, false)
	if err := os.WriteFile(filepath.Join(dir, "empty.csv"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	mode := func(p string) os.FileMode {
		t.Helper()
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	for sub, want := range map[string]os.FileMode{"processing": 0o700, "failed": 0o700, "done": 0o750} {
		if got := mode(filepath.Join(dir, sub)); got != want {
			t.Errorf("%s/ is %v, want %v", sub, got, want)
		}
	}
	reports, _ := filepath.Glob(filepath.Join(dir, "*", "*.report.json"))
	if len(reports) != 2 {
		t.Fatalf("reports %v", reports)
	}
	for _, p := range reports {
		if got := mode(p); got != 0o600 {
			t.Errorf("%s is %v, want 0600", p, got)
		}
	}
}

// writeSparseCSV writes a CSV file of size bytes: header and rows, then a
// quote left open and, up to size, a hole (NUL bytes taking no disk).
func writeSparseCSV(t testing.TB, path, head string, size int64) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(head); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestHugeCSVRecordFailsTheFile: a 2 GiB file whose third record opens a
// quote never closed goes to failed/ with a report naming
// feeds[].csv_dir.max_record_bytes; the rows before it are pushed, the
// record is not buffered (the runner reads about the cap), and the next
// file is processed.
func TestHugeCSVRecordFailsTheFile(t *testing.T) {
	svc := feedtest.Start()
	defer svc.Close()
	dir := t.TempDir()
	e := newEnv(t, svc.URL(), t.TempDir(), 5*time.Second, csvFeed(dir))
	head := "ID;E-mail;Jméno;Příjmení;Firma;Import\nC000001;a1@firma.cz;Jana;Nová;F;1\nC000002;a2@firma.cz;Petr;Starý;F;2\nC000003;\"a3@firma.cz"
	writeSparseCSV(t, filepath.Join(dir, "a.csv"), head, 2<<30)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 64<<20 {
		t.Fatalf("allocated %d MiB refusing the record", alloc>>20)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "processing", "*a.csv")); len(left) != 0 {
		t.Fatalf("left in processing/: %v", left)
	}
	r := report(t, dir, "failed")
	if len(r) != 1 || !strings.Contains(r[0].Error, "feeds[].csv_dir.max_record_bytes") || !strings.Contains(r[0].Error, "after line 3") ||
		r[0].Summary.Pushed != 2 {
		t.Fatalf("failed/ report %+v", *r[0])
	}
	if got := pushedIDs(t, svc); len(got) != 2 || got["C000001"] != 1 || got["C000002"] != 1 {
		t.Fatalf("pushed %v", got)
	}
	genCSV(t, filepath.Join(dir, "b.csv"), 5, false)
	if err := e.runner.RunOnce(context.Background(), "crm"); err != nil {
		t.Fatal(err)
	}
	if r := report(t, dir, "done"); len(r) != 1 || r[0].Summary.Pushed != 3 || r[0].Summary.Skipped != 2 {
		t.Fatalf("the next file: %+v", r)
	}
}
