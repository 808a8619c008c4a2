package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// resyncCLI runs surveysync resync and returns its output.
func resyncCLI(t *testing.T, cfg string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"resync", "--config", cfg}, args...)...)
	cmd.Env = append(os.Environ(), "SURVEYSYNC_LOG__LEVEL=info")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("surveysync resync %v: %v\n%s", args, err, tail(string(out), 40))
	}
	return string(out)
}

// changeAnswer rewrites a response's first answer text at the emulator,
// sending no webhook: only a re-read can see it.
func changeAnswer(t *testing.T, e *emulator, sid int64, r survey.Response, text string) {
	t.Helper()
	for pi := range r.Pages {
		for qi := range r.Pages[pi].Questions {
			if q := &r.Pages[pi].Questions[qi]; len(q.Answers) > 0 {
				q.Answers[0].Text = &text
				if _, err := e.sim.UpdateResponse(sid, r); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
	}
	t.Fatalf("response %s has no answer to change", r.ResponseID)
}

// deleteByHand deletes responses' rows in ClickHouse, as an operator's
// mistake (or a clean-up gone too far) would, and waits for the mutations.
func deleteByHand(t *testing.T, w *testWarehouse, ids []survey.GUID) {
	t.Helper()
	ctx := context.Background()
	quoted := make([]string, len(ids))
	for i, id := range ids {
		quoted[i] = "'" + string(id) + "'"
	}
	for _, table := range []string{"responses", "answers"} {
		if err := w.conn.Exec(ctx, fmt.Sprintf("ALTER TABLE %s.%s DELETE WHERE toString(response_id) IN (%s)", w.db, table, strings.Join(quoted, ","))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pending uint64
		if err := w.conn.QueryRow(ctx, fmt.Sprintf("SELECT count() FROM system.mutations WHERE database = '%s' AND is_done = 0", w.db)).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the hand-written deletes did not finish in 30 s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A resync of a date range, with no daemon running and then through a
// running daemon's admin endpoint, makes the range exact again: answers
// changed at the service without a webhook (which polling never re-reads:
// the responses are held as written) and rows deleted by hand come back;
// changes outside the range stay unseen, which shows the range is what
// was read.
func TestResyncRangeMatchesEmulator(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 600, 41)})
	sid := e.ids[0]
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\n")
	startDaemon(t, cfg, "--exit-when-synced").wait(t, 2*time.Minute)
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal(msg)
	}

	// The range: the middle half of the completed responses by completion.
	var done []survey.Response
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus == survey.StatusCompleted && r.DateCompleted != nil {
			done = append(done, r)
		}
	}
	slices.SortFunc(done, func(a, b survey.Response) int { return a.DateCompleted.Compare(b.DateCompleted.Time) })
	from := done[len(done)/4].DateCompleted.UTC().Truncate(time.Second)
	to := done[3*len(done)/4].DateCompleted.UTC().Truncate(time.Second)
	var inside, outside []survey.Response
	for _, r := range done {
		c := r.DateCompleted.UTC()
		switch {
		case !c.Before(from.Add(time.Second)) && c.Before(to.Add(-time.Second)):
			inside = append(inside, r)
		case c.Before(from.Add(-time.Second)) || c.After(to.Add(time.Second)):
			outside = append(outside, r)
		}
	}
	if len(inside) < 20 || len(outside) < 5 {
		t.Fatalf("range %s..%s: %d inside, %d outside", from, to, len(inside), len(outside))
	}
	for _, r := range inside[:5] {
		changeAnswer(t, e, sid, r, "changed without a webhook")
	}
	changeAnswer(t, e, sid, outside[0], "changed outside the range")
	deleteByHand(t, w, []survey.GUID{inside[10].ResponseID, inside[11].ResponseID})

	// No daemon runs (metrics.listen is off): the command runs it itself.
	out := resyncCLI(t, cfg, "--survey", fmt.Sprint(sid), "--from", from.Format(time.RFC3339), "--to", to.Format(time.RFC3339))
	if !strings.Contains(out, "done") {
		t.Fatalf("resync output:\n%s", out)
	}
	got := warehouseFingerprints(t, w)
	want := truthFingerprints(e)
	if msg := diff(want, got); !strings.HasPrefix(msg, "1 differences") || !strings.Contains(msg, string(outside[0].ResponseID)) {
		t.Fatalf("after the resync, only the change outside the range should differ: %s", msg)
	}
	st := exec.Command(binPath, "status", "--config", cfg)
	stOut, _ := st.CombinedOutput()
	if strings.Count(string(stOut), "resync done") != 4 || !strings.Contains(string(stOut), "resync/completed/"+from.Format(time.RFC3339)) {
		t.Errorf("status does not show the resync's four streams done:\n%s", stOut)
	}
	var versions uint64
	if err := w.conn.QueryRow(context.Background(), fmt.Sprintf("SELECT count() FROM %s.responses WHERE toString(response_id) = '%s'", w.db, inside[20].ResponseID)).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions < 2 {
		t.Fatalf("an unchanged response of the range has %d versions: want it written again", versions)
	}

	// Through a running daemon: the command asks its admin endpoint.
	raw, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	raw = []byte(strings.Replace(string(raw), "metrics:\n  listen: \"\"\n", fmt.Sprintf("metrics:\n  listen: 127.0.0.1:%d\n", port), 1))
	if err := os.WriteFile(cfg, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, cfg)
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(d.output(), "metrics at /metrics") })
	changeAnswer(t, e, sid, inside[30], "changed while the daemon runs")
	out = resyncCLI(t, cfg, "--survey", fmt.Sprint(sid)) // the whole survey
	if !strings.Contains(out, "queued") {
		t.Fatalf("resync output with a daemon running:\n%s", out)
	}
	waitFor(t, 60*time.Second, func() bool { return strings.Contains(d.output(), "resync done") })
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal("after the daemon's resync: " + msg)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 30*time.Second)
}

func waitFor(t *testing.T, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met in %v", timeout)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A one-shot resync killed midway (SIGKILL) leaves its job in sync_state;
// the same command again goes on from the checkpoints (the stream done
// before the kill is not read again) and the warehouse ends exact.
func TestResyncKilledThenResumed(t *testing.T) {
	w := clickhouseOrSkip(t)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 300, 43)})
	sid := e.ids[0]
	cfg := writeConfig(t, e, w, "sync:\n  poll_interval: 1s\n  settle_lag: 0s\n  reconcile_interval: 0s\n  fetch_concurrency: 1\n")
	startDaemon(t, cfg, "--exit-when-synced").wait(t, 2*time.Minute)
	var completed, others int
	n := 0
	for r := range e.sim.Responses(sid) {
		if r.ResponseStatus == survey.StatusCompleted {
			completed++
		} else if r.ResponseStatus != survey.StatusDeleted {
			others++
		}
		if n < 3 && r.ResponseStatus == survey.StatusCompleted {
			changeAnswer(t, e, sid, r, "changed before the resync")
			n++
		}
	}
	// Details answer slowly, one at a time: the completed stream (read
	// first) takes seconds, the others after it more.
	if err := e.sim.InjectFault(sim.Fault{Op: sim.OpGetResponse, Kind: sim.FaultSlow, Delay: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	args := []string{"resync", "--config", cfg, "--survey", fmt.Sprint(sid), "--from", "2000-01-01", "--to", time.Now().UTC().Format(time.RFC3339)}
	cmd := exec.Command(binPath, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := fmt.Sprintf("SELECT count() FROM (SELECT stream, argMax(last_run_at, _version) AS done FROM %s.sync_state WHERE stream LIKE 'resync/completed/%%' GROUP BY stream) WHERE toUnixTimestamp(done) > 0", w.db)
	waitFor(t, 60*time.Second, func() bool {
		var done uint64
		return w.conn.QueryRow(ctx, q).Scan(&done) == nil && done == 1
	})
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	before := e.sim.Calls()[sim.OpGetResponse]

	out := resyncCLI(t, cfg, args[3:]...)
	if !strings.Contains(out, "done") {
		t.Fatalf("second resync:\n%s", out)
	}
	fetched := e.sim.Calls()[sim.OpGetResponse] - before
	t.Logf("the resumed resync fetched %d details (%d completed, %d others in all)", fetched, completed, others)
	if fetched >= int64(completed) || fetched > int64(others) {
		t.Errorf("the resumed resync fetched %d details: want at most the %d outside the completed stream (%d completed)", fetched, others, completed)
	}
	if msg := diff(truthFingerprints(e), warehouseFingerprints(t, w)); msg != "" {
		t.Fatal("after the resumed resync: " + msg)
	}
}
