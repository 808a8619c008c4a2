package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/pipeline/flatten"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/sink/clickhouse"
	"github.com/surveysync/surveysync/sink/parquet"
	"github.com/surveysync/surveysync/sink/warehouse"
	"github.com/surveysync/surveysync/survey"
	"github.com/surveysync/surveysync/verify"
)

// metricSum scrapes the daemon's /metrics and sums the samples of name
// whose labels contain every one of match ("key=\"value\"").
func metricSum(addr, name string, match ...string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sum, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if !ok {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", line, err)
		}
		sum, found = sum+v, true
	}
	if !found {
		return 0, fmt.Errorf("no %s %v on /metrics", name, match)
	}
	return sum, sc.Err()
}

// openWarehouseBeside opens the test's warehouse in this process while the
// daemon runs (Parquet: its temporary files are left alone).
func openWarehouseBeside(t *testing.T, cfgDir string, w *testWarehouse) warehouse.Warehouse {
	t.Helper()
	var wh warehouse.Warehouse
	var err error
	if w != nil {
		wh, err = clickhouse.OpenWarehouse(context.Background(), clickhouse.Options{Addr: []string{w.addr}, Database: w.db, Registerer: prometheus.NewRegistry()})
	} else {
		wh, err = parquet.OpenWarehouse(parquet.Options{Dir: cfgDir, KeepTempFiles: true})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wh.Close() })
	return wh
}

// writeBehind writes responses' rows as the sink would, behind the
// daemon's back (a phantom, an altered answer).
func writeBehind(t *testing.T, wh warehouse.Warehouse, sid int64, rs ...survey.Response) {
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

// withFirstAnswer returns r with its first text answer changed.
func withFirstAnswer(t *testing.T, r survey.Response, text string) survey.Response {
	t.Helper()
	r.Pages = slices.Clone(r.Pages)
	for pi := range r.Pages {
		qs := slices.Clone(r.Pages[pi].Questions)
		r.Pages[pi].Questions = qs
		for qi := range qs {
			if len(qs[qi].Answers) > 0 {
				as := slices.Clone(qs[qi].Answers)
				as[0].Text, as[0].ChoiceID = &text, nil
				qs[qi].Answers = as
				return r
			}
		}
	}
	t.Fatalf("response %s has no answer", r.ResponseID)
	return r
}

// dropParquetFile removes the survey's smallest responses file, as an
// operator's mistake would, and returns the responses no longer current.
func dropParquetFile(t *testing.T, dir string, sid int64) map[survey.GUID]bool {
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
	size := func(p string) int64 { fi, _ := os.Stat(p); return fi.Size() }
	smallest := slices.MinFunc(paths, func(a, b string) int { return int(size(a) - size(b)) })
	if err := os.Remove(smallest); err != nil {
		t.Fatal(err)
	}
	after, err := parquet.ReadCurrent(ctx, dir, sid)
	if err != nil {
		t.Fatal(err)
	}
	lost := map[survey.GUID]bool{}
	for id, r := range before.Responses {
		if a, ok := after.Responses[id]; !r.Deleted && (!ok || a.Deleted) {
			lost[survey.GUID(id)] = true
		}
	}
	return lost
}

// exactAgainstEmulator checks that the warehouse holds as current exactly
// the emulator's responses, each with the emulator's content.
func exactAgainstEmulator(t *testing.T, e *emulator, wh warehouse.Warehouse, sid int64) {
	t.Helper()
	ctx := context.Background()
	r := wh.Verifier()
	truth := map[survey.GUID]survey.Response{}
	var ids []survey.GUID
	for x := range e.sim.Responses(sid) {
		if x.ResponseStatus != survey.StatusDeleted {
			truth[x.ResponseID] = x
			ids = append(ids, x.ResponseID)
		}
	}
	stored, err := r.Content(ctx, sid, ids)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		c, ok := stored[id]
		if !ok {
			t.Errorf("response %s is not current in the warehouse", id)
			continue
		}
		if !c.Equal(verify.ContentOf(new(truth[id]))) {
			t.Errorf("response %s differs from the emulator's", id)
		}
	}
	have, err := r.IDs(ctx, warehouse.Range{SurveyID: sid, Statuses: []string{"completed", "disqualified", "quotafull", "partial"}})
	if err != nil {
		t.Fatal(err)
	}
	for id := range have {
		if _, ok := truth[id]; !ok {
			t.Errorf("response %s is current in the warehouse, not at the emulator", id)
		}
	}
}

// The daemon's verification repairs damage done behind its back, on
// ClickHouse and on Parquet: rows lost in the warehouse (deleted by hand; a
// Parquet file removed), responses deleted at the emulator without a
// webhook, responses added dated weeks back (behind every watermark), a
// phantom row and an answer altered in the warehouse (found by the sample,
// which here covers the survey). The drift gauge rises, the next pass
// repairs, the one after is clean and brings it back to 0; verify_runs
// holds each count exactly; status says when the survey was last verified
// clean.
func TestDaemonVerificationRepairsClickHouse(t *testing.T) {
	testDaemonVerificationRepairs(t, clickhouseOrSkip(t))
}

func TestDaemonVerificationRepairsParquet(t *testing.T) {
	testDaemonVerificationRepairs(t, nil)
}

func testDaemonVerificationRepairs(t *testing.T, w *testWarehouse) {
	e := newEmulator(t, sim.Options{Surveys: specs(1, 300, 77)})
	sid := e.ids[0]
	metrics := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	t.Setenv("SURVEYSYNC_METRICS__LISTEN", metrics)
	// Small batches: several Parquet files, one of which is lost.
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\n  batch:\n    max_rows: 400\n"+
		"verify:\n  interval: 2s\n  sample: 1000\n")
	dataDir := filepath.Join(filepath.Dir(cfg), "data")
	d := startDaemon(t, cfg)
	sum := func(name string, match ...string) float64 {
		v, err := metricSum(metrics, name, match...)
		if err != nil {
			return -1
		}
		return v
	}
	waitUntil := func(what string, timeout time.Duration, ok func() bool) {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for !ok() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within %v; log:\n%s", what, timeout, tail(d.output(), 40))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitUntil("a clean verification pass", 60*time.Second, func() bool { return sum("surveysync_verify_passes_total", `result="clean"`) >= 1 })
	if v := sum("surveysync_verify_drift_responses"); v != 0 {
		t.Fatalf("drift %v after the backfill", v)
	}
	wh := openWarehouseBeside(t, dataDir, w)

	// The damage, right after a pass (one every 2 s).
	clean := sum("surveysync_verify_passes_total", `result="clean"`)
	waitUntil("the next clean pass", 30*time.Second, func() bool { return sum("surveysync_verify_passes_total", `result="clean"`) > clean })
	var completed []survey.Response
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus == survey.StatusCompleted {
			completed = append(completed, r)
		}
	}
	if len(completed) < 40 {
		t.Fatalf("%d completed responses", len(completed))
	}
	damageStart := time.Now()
	var lost map[survey.GUID]bool
	if w != nil {
		lost = map[survey.GUID]bool{}
		for _, r := range completed[:7] {
			lost[r.ResponseID] = true
		}
		deleteByHand(t, w, slices.Collect(maps.Keys(lost)))
	} else {
		lost = dropParquetFile(t, dataDir, sid)
	}
	purged := 0
	for _, r := range completed[10:15] { // deleted at the service: no webhook for it
		if err := e.sim.PurgeResponse(sid, r.ResponseID); err != nil {
			t.Fatal(err)
		}
		if lost[r.ResponseID] {
			delete(lost, r.ResponseID) // gone on both sides: no difference
		} else {
			purged++
		}
	}
	fixed := time.Now().UTC().Add(-time.Minute)
	for i := range 3 { // dated three weeks back: behind every watermark
		at := fixed.Add(-21*24*time.Hour + time.Duration(i)*time.Hour)
		if _, err := e.sim.AddResponse(sid, survey.Response{DateCreated: survey.Time{Time: at.Add(-10 * time.Minute)},
			DateCompleted: &survey.Time{Time: at}, ResponseStatus: survey.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	phantom := completed[20]
	phantom.ResponseID = "0badf00d-0000-4000-8000-000000000001"
	altered := withFirstAnswer(t, completed[30], "altered in the warehouse")
	writeBehind(t, wh, sid, phantom, altered)
	delete(lost, altered.ResponseID) // current again, with another answer
	damaged := time.Now()

	// The gauge rises, then returns to 0 at a clean pass.
	peak := 0.0
	waitUntil("the drift gauge to rise", 60*time.Second, func() bool {
		peak = max(peak, sum("surveysync_verify_drift_responses"))
		return peak > 0
	})
	clean = sum("surveysync_verify_passes_total", `result="clean"`)
	waitUntil("the drift gauge back to 0 after a clean pass", 60*time.Second, func() bool {
		return sum("surveysync_verify_drift_responses") == 0 && sum("surveysync_verify_passes_total", `result="clean"`) > clean
	})
	t.Logf("drift peaked at %v; repaired and verified clean %v after the damage", peak, time.Since(damaged).Round(time.Second))
	exactAgainstEmulator(t, e, wh, sid)

	// The history: each count exactly, over at most two drifted passes.
	// The counters move when a pass ends; its history row is written just
	// after: wait for it (a CI run read the drifted pass before it).
	var sts []warehouse.VerifyState
	var err error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		sts, err = wh.VerifyLog().VerifyStates(context.Background())
		if err == nil && len(sts) == 1 && sts[0].Result == warehouse.VerifyClean && !sts[0].LastClean.Before(damaged) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("verification states: %+v, %v", sts, err)
		}
	}
	// Each difference counted once, whichever pass saw it (a pass may run
	// while the damage is being made).
	missing, extra, content, _ := historyTotals(t, w, dataDir, sid, damageStart)
	want := [3]int64{int64(len(lost)) + 3, int64(purged) + 1, 1}
	if got := [3]int64{missing, extra, content}; got != want {
		t.Errorf("verify_runs since the damage: missing, extra, content %v; want %v", got, want)
	}
	if _, _, _, passes := historyTotals(t, w, dataDir, sid, damaged); passes > 2 {
		t.Errorf("%d drifted passes after the damage was done; want it repaired within two", passes)
	}
	if v := sum("surveysync_verify_api_calls_total"); v <= 0 {
		t.Errorf("verify api calls %v", v)
	}

	// status: when the survey was last verified clean, and no drift.
	out, err := exec.Command(binPath, "status", "--config", cfg).CombinedOutput()
	if err != nil {
		t.Fatalf("status: %v\n%s", err, out)
	}
	line := ""
	for l := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(l, strconv.FormatInt(sid, 10)+" ") && strings.Contains(l, " clean") {
			line = l
		}
	}
	if !strings.Contains(string(out), "verification (every 2s):") || !strings.HasSuffix(strings.TrimSpace(line), "none") || !strings.Contains(line, " ago)") {
		t.Errorf("status lacks the verification of survey %d:\n%s", sid, out)
	}
}

// historyTotals sums the counts of the daemon's drifted passes (method
// counts) since t0 and counts those passes, from verify_runs or
// _state/verify_runs.jsonl.
func historyTotals(t *testing.T, w *testWarehouse, dataDir string, sid int64, t0 time.Time) (missing, extra, content int64, passes int) {
	t.Helper()
	type row struct {
		SurveyID   int64     `json:"survey_id"`
		Method     string    `json:"method"`
		PassResult string    `json:"pass_result"`
		FinishedAt time.Time `json:"finished_at"`
		Missing    int64     `json:"missing"`
		Extra      int64     `json:"extra"`
		Content    int64     `json:"content"`
	}
	var rows []row
	if w != nil {
		rs, err := w.conn.Query(context.Background(), "SELECT survey_id, method, pass_result, finished_at, missing, extra, content FROM "+w.db+".verify_runs")
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		for rs.Next() {
			var r row
			if err := rs.Scan(&r.SurveyID, &r.Method, &r.PassResult, &r.FinishedAt, &r.Missing, &r.Extra, &r.Content); err != nil {
				t.Fatal(err)
			}
			rows = append(rows, r)
		}
	} else {
		raw, err := os.ReadFile(filepath.Join(dataDir, "_state", "verify_runs.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		for l := range strings.SplitSeq(strings.TrimSpace(string(raw)), "\n") {
			var r row
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			rows = append(rows, r)
		}
	}
	ends := map[time.Time]bool{}
	for _, r := range rows {
		if r.SurveyID != sid || r.Method != warehouse.VerifyCounts || r.PassResult != warehouse.VerifyDrift || r.FinishedAt.Before(t0.Truncate(time.Second)) {
			continue
		}
		missing, extra, content = missing+r.Missing, extra+r.Extra, content+r.Content
		ends[r.FinishedAt] = true
	}
	return missing, extra, content, len(ends)
}
