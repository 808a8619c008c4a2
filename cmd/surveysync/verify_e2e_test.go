package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/daemon"
	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
)

// verifyCLI runs surveysync verify and returns its stdout, stderr and exit
// status.
func verifyCLI(t *testing.T, cfg string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"verify", "--config", cfg}, args...)...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("surveysync verify %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// verifyJSON runs surveysync verify --json and returns its rows by stream
// (one survey), checking each line has exactly the interface's keys.
func verifyJSON(t *testing.T, cfg string, wantCode int, args ...string) map[string]verifyRow {
	t.Helper()
	stdout, stderr, code := verifyCLI(t, cfg, append([]string{"--json"}, args...)...)
	if code != wantCode {
		t.Fatalf("surveysync verify --json %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", args, code, wantCode, stdout, tail(stderr, 30))
	}
	rows := map[string]verifyRow{}
	sc := bufio.NewScanner(strings.NewReader(stdout))
	for sc.Scan() {
		var keys map[string]any
		if err := json.Unmarshal(sc.Bytes(), &keys); err != nil {
			t.Fatalf("a line of --json is not JSON: %q: %v", sc.Text(), err)
		}
		got := make([]string, 0, len(keys))
		for k := range keys {
			got = append(got, k)
		}
		slices.Sort(got)
		if want := []string{"content_mismatch", "extra", "missing", "service", "stream", "survey_id", "warehouse"}; !slices.Equal(got, want) {
			t.Fatalf("--json keys %v, want exactly %v", got, want)
		}
		var r verifyRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		rows[r.Stream] = r
	}
	if len(rows) != 4 {
		t.Fatalf("--json: %d streams, want 4:\n%s", len(rows), stdout)
	}
	return rows
}

// listedByStream counts the emulator's responses per list stream.
func listedByStream(e *emulator, sid int64) map[string]int64 {
	out := map[string]int64{}
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus != survey.StatusDeleted {
			out[r.ResponseStatus]++
		}
	}
	return out
}

// writeRows writes responses into the warehouse behind the daemon's back,
// as the sink would (a phantom, or an altered newer version).
func writeRows(t *testing.T, wh warehouse.Warehouse, sid int64, rs ...survey.Response) {
	t.Helper()
	b := flatten.NewBuilder(memory.NewGoAllocator())
	defer b.Release()
	for i := range rs {
		r := rs[i]
		if err := b.Add(flatten.Item{Response: &r, SurveyID: sid, ResponseID: r.ResponseID, Version: uint64(time.Now().UnixNano()), SyncedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	batch := b.Flush()
	defer batch.Release()
	if err := wh.Write(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
}

// alterFirstAnswer returns r with its first answer's text changed.
func alterFirstAnswer(t *testing.T, r survey.Response, text string) survey.Response {
	t.Helper()
	r.Pages = slices.Clone(r.Pages)
	for pi := range r.Pages {
		qs := slices.Clone(r.Pages[pi].Questions)
		r.Pages[pi].Questions = qs
		for qi := range qs {
			if len(qs[qi].Answers) > 0 {
				as := slices.Clone(qs[qi].Answers)
				as[0].Text = &text
				qs[qi].Answers = as
				return r
			}
		}
	}
	t.Fatalf("response %s has no answer", r.ResponseID)
	return r
}

// Damage made behind the daemon's back, on ClickHouse: rows deleted by
// hand, responses removed at the emulator without a webhook, responses
// added dated weeks back, a phantom row and an altered answer. verify
// reports each count exactly and exits 1; --repair (in this process) makes
// it exit 0; --deep finds the altered answer and --deep --repair, through a
// running daemon's admin endpoint, restores it.
func TestVerifyClickHouse(t *testing.T) {
	w := clickhouseOrSkip(t)
	testVerify(t, w)
}

// The same on the Parquet files; the rows are lost by removing a
// responses file.
func TestVerifyParquet(t *testing.T) {
	testVerify(t, nil)
}

func testVerify(t *testing.T, w *testWarehouse) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 600, 61)})
	sid := e.ids[0]
	port := freePort(t)
	cfgPath := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\n  batch:\n    max_rows: 100\nverify:\n  interval: 0s\n")
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 2*time.Minute)
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	clean := verifyJSON(t, cfgPath, 0)
	service := listedByStream(e, sid)
	for s, r := range clean {
		if r.Service != service[s] || r.Warehouse != service[s] || r.Missing+r.Extra+r.ContentMismatch != 0 {
			t.Fatalf("after the sync, %s: %+v; the emulator lists %d", s, r, service[s])
		}
	}

	// A survey the service does not know cannot be verified: exit 2,
	// naming it.
	if stdout, stderr, code := verifyCLI(t, cfgPath, "--survey", "999999"); code != 2 || !strings.Contains(stderr, "survey 999999 could not be verified") {
		t.Fatalf("verify of an unknown survey: exit %d\n%s\n%s", code, stdout, tail(stderr, 10))
	}

	var byStatus = map[string][]survey.Response{}
	for r := range e.sim.Responses(sid) {
		byStatus[r.ResponseStatus] = append(byStatus[r.ResponseStatus], r)
	}
	completed := byStatus[survey.StatusCompleted]
	missing := map[string]int{}
	extra := map[string]int{}
	lostIDs := map[string]bool{}

	// Rows lost in the warehouse.
	if w != nil {
		var ids []survey.GUID
		for _, r := range completed[:7] {
			ids = append(ids, r.ResponseID)
			lostIDs[string(r.ResponseID)] = true
		}
		deleteByHand(t, w, ids)
		missing[survey.StatusCompleted] += 7
	} else {
		lost := removeResponsesFile(t, cfg.Parquet.Dir, sid)
		for id, st := range lost {
			missing[st]++
			lostIDs[id] = true
		}
	}
	// Responses removed at the emulator, which sends no webhook.
	for _, r := range byStatus[survey.StatusDisqualified][:5] {
		if err := e.sim.PurgeResponse(sid, r.ResponseID); err != nil {
			t.Fatal(err)
		}
	}
	extra[survey.StatusDisqualified] += 5
	// Responses added dated weeks back (a back-dated import).
	for i := range 3 {
		at := time.Now().UTC().Add(-40*24*time.Hour + time.Duration(i)*time.Hour)
		if _, err := e.sim.AddResponse(sid, survey.Response{DateCreated: survey.Time{Time: at.Add(-10 * time.Minute)},
			DateCompleted: &survey.Time{Time: at}, ResponseStatus: survey.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	missing[survey.StatusCompleted] += 3
	// A phantom row and an altered answer, written as the sink would.
	wh := openTestWarehouse(t, cfg, w)
	var kept []survey.Response // completed responses the warehouse still has
	for _, r := range completed {
		if !lostIDs[string(r.ResponseID)] {
			kept = append(kept, r)
		}
	}
	phantom := kept[0]
	phantom.ResponseID = "0badf00d-0000-4000-8000-000000000001"
	altered := kept[1]
	writeRows(t, wh, sid, phantom, alterFirstAnswer(t, altered, "altered in the warehouse"))
	extra[survey.StatusCompleted]++
	_ = wh.Close()

	service = listedByStream(e, sid)
	rows := verifyJSON(t, cfgPath, 1)
	for _, s := range []string{"completed", "disqualified", "quotafull", "partial"} {
		r := rows[s]
		want := verifyRow{SurveyID: sid, Stream: s, Service: service[s], Warehouse: service[s] - int64(missing[s]) + int64(extra[s]),
			Missing: missing[s], Extra: extra[s]}
		if r != want {
			t.Errorf("verify %s: %+v, want %+v", s, r, want)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	stdout, _, code := verifyCLI(t, cfgPath)
	t.Logf("verify's table:\n%s", stdout)
	if code != 1 || !strings.Contains(stdout, "MISSING") || !strings.Contains(stdout, "0badf00d-0000-4000-8000-000000000001") {
		t.Fatalf("verify's table (exit %d):\n%s", code, stdout)
	}

	// --repair, no daemon running: read again in this process.
	stdout, stderr, code := verifyCLI(t, cfgPath, "--repair")
	if code != 0 || !strings.Contains(stderr, "read again (this process)") {
		t.Fatalf("verify --repair: exit %d\n%s\n%s", code, stdout, tail(stderr, 30))
	}
	verifyJSON(t, cfgPath, 0)

	// The altered answer: only --deep sees it.
	rows = verifyJSON(t, cfgPath, 1, "--deep")
	for s, r := range rows {
		want := 0
		if s == survey.StatusCompleted {
			want = 1
		}
		if r.ContentMismatch != want || r.Missing+r.Extra != 0 {
			t.Errorf("verify --deep %s: %+v; want content_mismatch %d only", s, r, want)
		}
	}
	stdout, stderr, _ = verifyCLI(t, cfgPath, "--deep")
	if !strings.Contains(stdout, "CONTENT") || !strings.Contains(stdout, string(altered.ResponseID)) {
		t.Errorf("verify --deep's table:\n%s\n%s", stdout, tail(stderr, 10))
	}

	// --deep --repair through a running daemon (its admin endpoint).
	raw, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	raw = []byte(strings.Replace(string(raw), "metrics:\n  listen: \"\"\n", fmt.Sprintf("metrics:\n  listen: 127.0.0.1:%d\n", port), 1))
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfgPath)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(d.output(), "metrics at /metrics") })
	stdout, stderr, code = verifyCLI(t, cfgPath, "--deep", "--repair")
	if code != 0 || !strings.Contains(stderr, fmt.Sprintf("read again (127.0.0.1:%d)", port)) {
		t.Fatalf("verify --deep --repair beside a daemon: exit %d\n%s\n%s\ndaemon:\n%s", code, stdout, tail(stderr, 30), tail(d.output(), 30))
	}
	if !strings.Contains(d.output(), "re-read asked on the admin endpoint") {
		t.Errorf("the daemon did not log the re-read:\n%s", tail(d.output(), 30))
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)
	verifyJSON(t, cfgPath, 0, "--deep")
}

// openTestWarehouse opens the test's warehouse in this process (the daemon
// is stopped).
func openTestWarehouse(t *testing.T, cfg *config.Config, w *testWarehouse) warehouse.Warehouse {
	t.Helper()
	if w != nil {
		wh, err := clickhouse.OpenWarehouse(context.Background(), clickhouse.Options{Addr: []string{w.addr}, Database: w.db, Registerer: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		return wh
	}
	wh, err := parquet.OpenWarehouse(parquet.Options{Dir: cfg.Parquet.Dir, KeepTempFiles: true})
	if err != nil {
		t.Fatal(err)
	}
	return wh
}

// removeResponsesFile removes the survey's smallest responses file and
// returns the responses no longer current for it, with their status.
func removeResponsesFile(t *testing.T, dir string, sid int64) map[string]string {
	t.Helper()
	ctx := context.Background()
	before, err := parquet.ReadCurrent(ctx, dir, sid)
	if err != nil {
		t.Fatal(err)
	}
	paths, err := filepath.Glob(filepath.Join(dir, "responses", fmt.Sprintf("survey_id=%d", sid), "date=*", "*.parquet"))
	if err != nil || len(paths) < 2 {
		t.Fatalf("responses files: %v %v", paths, err)
	}
	smallest := paths[0]
	for _, p := range paths {
		a, _ := os.Stat(p)
		b, _ := os.Stat(smallest)
		if a.Size() < b.Size() {
			smallest = p
		}
	}
	if err := os.Remove(smallest); err != nil {
		t.Fatal(err)
	}
	after, err := parquet.ReadCurrent(ctx, dir, sid)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[string]string{}
	for id, r := range before.Responses {
		if r.Deleted {
			continue
		}
		if a, ok := after.Responses[id]; !ok || a.Deleted {
			lost[id] = r.Status
		} else if a.Status != r.Status {
			t.Fatalf("removing %s brought back an older status of %s: pick another file", smallest, id)
		}
	}
	if len(lost) == 0 {
		t.Fatalf("removing %s lost no response", smallest)
	}
	t.Logf("removed %s: %d responses lost", filepath.Base(smallest), len(lost))
	return lost
}

// On the replicated 2×2 cluster: responses removed at the emulator, added
// dated weeks back and a phantom row are counted exactly; --repair (in
// this process) makes verify exit 0.
func TestClusterVerify(t *testing.T) {
	c, cw := clusterOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 400, 63)})
	sid := e.ids[0]
	cfgPath := writeConfig(t, e, nil, clusterSection(t, c, cw.db)+"sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\nverify:\n  interval: 0s\n")
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)
	verifyJSON(t, cfgPath, 0)

	var byStatus = map[string][]survey.Response{}
	for r := range e.sim.Responses(sid) {
		byStatus[r.ResponseStatus] = append(byStatus[r.ResponseStatus], r)
	}
	for _, r := range byStatus[survey.StatusDisqualified][:3] {
		if err := e.sim.PurgeResponse(sid, r.ResponseID); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		at := time.Now().UTC().Add(-30*24*time.Hour + time.Duration(i)*time.Hour)
		if _, err := e.sim.AddResponse(sid, survey.Response{DateCreated: survey.Time{Time: at.Add(-10 * time.Minute)},
			DateCompleted: &survey.Time{Time: at}, ResponseStatus: survey.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := daemon.ClickHouseOptions(cfg, slog.New(slog.DiscardHandler), prometheus.NewRegistry())
	wh, err := clickhouse.OpenWarehouse(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	phantom := byStatus[survey.StatusCompleted][0]
	phantom.ResponseID = "0badf00d-0000-4000-8000-000000000002"
	writeRows(t, wh, sid, phantom)
	_ = wh.Close()

	service := listedByStream(e, sid)
	rows := verifyJSON(t, cfgPath, 1)
	missing := map[string]int{survey.StatusCompleted: 2}
	extra := map[string]int{survey.StatusCompleted: 1, survey.StatusDisqualified: 3}
	for _, s := range []string{"completed", "disqualified", "quotafull", "partial"} {
		want := verifyRow{SurveyID: sid, Stream: s, Service: service[s], Warehouse: service[s] - int64(missing[s]) + int64(extra[s]),
			Missing: missing[s], Extra: extra[s]}
		if rows[s] != want {
			t.Errorf("verify %s on the cluster: %+v, want %+v", s, rows[s], want)
		}
	}
	if _, stderr, code := verifyCLI(t, cfgPath, "--repair"); code != 0 {
		t.Fatalf("verify --repair on the cluster: exit %d\n%s", code, tail(stderr, 30))
	}
	verifyJSON(t, cfgPath, 0)
}
