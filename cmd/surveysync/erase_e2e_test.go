package main

// Erasure through the real binary (issue 23 item 2): responses deleted at
// the source (404 and status "deleted") with sync.erase_deleted, and
// responses erased on request with surveysync erase — one of them with the
// command SIGKILLed at several points first — leave no trace but their
// audit row in erasures, and stay erased through later runs.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// runErase runs surveysync erase and returns its output.
func runErase(t *testing.T, cfgPath string, args ...string) string {
	t.Helper()
	out, err := exec.Command(binPath, append([]string{"erase", "--config", cfgPath}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("surveysync erase %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// killErase starts surveysync erase and SIGKILLs it after d.
func killErase(t *testing.T, cfgPath string, d time.Duration, args ...string) {
	t.Helper()
	cmd := exec.Command(binPath, append([]string{"erase", "--config", cfgPath}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
}

func TestEraseClickHouse(t *testing.T) {
	w := clickhouseOrSkip(t)
	cli, err := exec.LookPath("clickhouse-client")
	if err != nil {
		t.Skip("clickhouse-client is not on PATH")
	}
	host, port, _ := strings.Cut(w.addr, ":")
	query := func(q string) string {
		out, err := exec.Command(cli, "--host", host, "--port", port, "--query", q).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", q, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	const sid = 123
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 30, Seed: 9, Files: true}}})
	filesDir := filepath.Join(t.TempDir(), "files")
	cfgPath := writeConfig(t, e, w, fmt.Sprintf(`sync:
  poll_interval: 1s
  settle_lag: 0s
  reconcile_interval: 1s
  erase_deleted: true
files:
  url: file://%s
`, filesDir))
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)

	// Four responses with stored files: two deleted at the source, two
	// erased on request.
	ids := strings.Fields(query(fmt.Sprintf(`SELECT DISTINCT toString(response_id) FROM %s.uploaded_files FINAL
WHERE sha256 != '' ORDER BY response_id LIMIT 4`, w.db)))
	if len(ids) != 4 {
		t.Fatalf("responses with stored files: %v", ids)
	}
	total := query(fmt.Sprintf("SELECT count() FROM %s.responses_current", w.db))
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(filesDir, fmt.Sprintf("surveys/%d/responses/%s", sid, id))); err != nil {
			t.Fatalf("the files of %s are not in the store: %v", id, err)
		}
	}
	if err := e.sim.PurgeResponse(sid, survey.GUID(ids[0])); err != nil { // 404
		t.Fatal(err)
	}
	if err := e.sim.DeleteResponse(sid, survey.GUID(ids[1])); err != nil { // status deleted
		t.Fatal(err)
	}
	// A one-shot run ends after its first poll round, which may be before
	// the reconcile pass: the daemon runs until the erasures are done.
	d := startDaemon(t, cfgPath)
	deadline := time.Now().Add(2 * time.Minute)
	for query(fmt.Sprintf("SELECT count() FROM %s.erasures FINAL WHERE state = 'done'", w.db)) != "2" {
		if time.Now().After(deadline) {
			t.Fatalf("the deleted responses were not erased in 2 min; output:\n%s", tail(d.output(), 60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)

	// On request, the daemon stopped; the first one after SIGKILLs at
	// several points of a run.
	for _, after := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond} {
		killErase(t, cfgPath, after, "--survey", fmt.Sprint(sid), "--response", ids[2])
	}
	out := runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", strings.ToUpper(ids[2]))
	t.Logf("erase after the kills: %s", out)
	out = runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", ids[3])
	if !strings.Contains(out, "erased 1 responses; responses=") {
		t.Errorf("erase printed %q", out)
	}
	// Idempotent.
	runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", ids[3])

	// Later runs (poll, reconcile, a restart) do not bring back the two
	// still at the source.
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)

	tables := strings.Fields(query(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine NOT LIKE '%%View'", w.db)))
	for _, tbl := range tables {
		final := ""
		if tbl == "erasures" {
			final = " FINAL" // the started row and the done row, until merged
		}
		dump := strings.ToLower(query(fmt.Sprintf("SELECT * FROM %s.%s%s FORMAT TSV", w.db, tbl, final)))
		for _, id := range ids {
			n := strings.Count(dump, id)
			if tbl == "erasures" {
				if n != 1 {
					t.Errorf("erasures names %s %d times, want its one audit row", id, n)
				}
				continue
			}
			if n > 0 {
				t.Errorf("table %s still names erased response %s (%d times)", tbl, id, n)
			}
		}
	}
	audit := query(fmt.Sprintf("SELECT toString(response_id), reason, state, erased FROM %s.erasures FINAL ORDER BY response_id FORMAT TSV", w.db))
	t.Logf("erasures:\n%s", audit)
	for i, want := range []string{"deleted_at_source", "deleted_at_source", "request", "request"} {
		line := ""
		for _, l := range strings.Split(audit, "\n") {
			if strings.HasPrefix(l, ids[i]) {
				line = l
			}
		}
		if !strings.Contains(line, "\t"+want+"\tdone\t") || !strings.Contains(line, "objects=") {
			t.Errorf("audit row of %s = %q, want reason %s, state done", ids[i], line, want)
		}
	}
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(filesDir, fmt.Sprintf("surveys/%d/responses/%s", sid, id))); err == nil {
			if hits := grepTree(t, filepath.Join(filesDir, fmt.Sprintf("surveys/%d/responses/%s", sid, id)), []string{""}); len(hits) > 0 {
				t.Errorf("objects of erased response %s remain: %v", id, hits)
			}
		}
	}
	var before int
	fmt.Sscan(total, &before)
	if got := query(fmt.Sprintf("SELECT count() FROM %s.responses_current", w.db)); got != fmt.Sprint(before-4) {
		t.Errorf("responses_current has %s responses, want %d", got, before-4)
	}
}

func TestEraseParquet(t *testing.T) {
	const sid = 123
	e := newEmulator(t, sim.Options{Surveys: []sim.SurveySpec{{ID: sid, Responses: 30, Seed: 9, Files: true}}})
	filesDir := filepath.Join(t.TempDir(), "files")
	cfgPath := writeConfig(t, e, nil, fmt.Sprintf(`sync:
  poll_interval: 1s
  settle_lag: 0s
  reconcile_interval: 1s
  erase_deleted: true
files:
  url: file://%s
`, filesDir))
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)
	cfg, err := config.Load(cfgPath, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	dataDir := cfg.Parquet.Dir

	// Four responses with stored files.
	var ids []string
	entries, err := os.ReadDir(filepath.Join(filesDir, fmt.Sprintf("surveys/%d/responses", sid)))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range entries {
		if len(ids) < 4 {
			ids = append(ids, strings.ToLower(de.Name()))
		}
	}
	if len(ids) != 4 {
		t.Fatalf("responses with stored files: %v", ids)
	}
	if err := e.sim.PurgeResponse(sid, survey.GUID(ids[0])); err != nil { // 404
		t.Fatal(err)
	}
	if err := e.sim.DeleteResponse(sid, survey.GUID(ids[1])); err != nil { // status deleted
		t.Fatal(err)
	}
	d := startDaemon(t, cfgPath)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		raw, _ := os.ReadFile(filepath.Join(dataDir, "_state", "erasures.jsonl"))
		if strings.Count(string(raw), `"state":"done"`) >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deleted responses were not erased in 2 min; output:\n%s", tail(d.output(), 60))
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, time.Minute)

	for _, after := range []time.Duration{20 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond} {
		killErase(t, cfgPath, after, "--survey", fmt.Sprint(sid), "--response", ids[2])
	}
	runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", ids[2])
	runErase(t, cfgPath, "--survey", fmt.Sprint(sid), "--response", ids[3])
	startDaemon(t, cfgPath, "--exit-when-synced").wait(t, 3*time.Minute)

	// No trace under the data directory (every value of every Parquet file
	// and its statistics, the uploaded-files index) but the audit log.
	for _, h := range grepTree(t, dataDir, ids) {
		if strings.Contains(h, filepath.Join("_state", "erasures.jsonl")) {
			continue
		}
		t.Errorf("erased response left a trace: %s", h)
	}
	for _, id := range ids {
		if hits := grepTree(t, filepath.Join(filesDir, fmt.Sprintf("surveys/%d/responses/%s", sid, id)), []string{""}); len(hits) > 0 {
			t.Errorf("objects of erased response %s remain: %v", id, hits)
		}
	}
	out, err := exec.Command(binPath, "query", "--config", cfgPath, "--sample", "0").CombinedOutput()
	if err != nil {
		t.Fatalf("query: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "26") {
		t.Errorf("query does not show 26 current responses:\n%s", out)
	}
	raw, _ := os.ReadFile(filepath.Join(dataDir, "_state", "erasures.jsonl"))
	t.Logf("erasures.jsonl:\n%s", raw)
}
