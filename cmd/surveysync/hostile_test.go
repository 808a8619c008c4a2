package main

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
)

// Issue 19, through the real binary: a survey whose list answers the same
// page for ever claiming 10^9 responses, and one whose totals claim 10^9
// with normal pages, at a 2 s poll interval. Before, the first cost about
// 720 list calls and 244 warnings a minute; now each stream backs off and
// logs once per back-off step, while a healthy survey beside them keeps
// its schedule.
func TestHostileListsBackOffInTheBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 40 s")
	}
	tok := "e2e-secret-token-" + randHex(8)
	s, err := sim.New(sim.Options{Token: tok, Surveys: []sim.SurveySpec{
		{ID: 100, Responses: 200, Seed: 1}, {ID: 101, Responses: 200, Seed: 2}, {ID: 102, Responses: 200, Seed: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, kind := range map[int64]string{101: sim.FaultRepeatPage, 102: sim.FaultImplausibleTotal} {
		if err := s.InjectFault(sim.Fault{Op: sim.OpListResponses, Kind: kind, Survey: id}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	lists := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
		if len(parts) == 4 && parts[1] == "surveys" {
			mu.Lock()
			lists[parts[2]]++
			mu.Unlock()
		}
		s.Handler().ServeHTTP(w, r)
	}))
	defer srv.Close()
	e := &emulator{sim: s, srv: srv, ids: []int64{100, 101, 102}}
	tokens.Store(e, tok)
	cfg := writeConfig(t, e, nil, "sync:\n  poll_interval: 2s\n")
	d := startDaemon(t, cfg)
	const run = 40 * time.Second
	time.Sleep(run)
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	d.wait(t, 60*time.Second)
	out := d.output()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range []int64{101, 102} {
		sid := strconv.FormatInt(id, 10)
		warnings := 0
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "survey_id="+sid) {
				warnings++
			}
		}
		t.Logf("hostile survey %d: %d list calls, %d warnings in %v", id, lists[sid], warnings, run)
		// Four streams: a first pass each (backfill), then at most one
		// pass each after the back-off and the call budget (about 20 calls).
		if lists[sid] > 60 {
			t.Errorf("survey %d: %d list calls in %v at a 2 s poll interval", id, lists[sid], run)
		}
		if warnings > 10 {
			t.Errorf("survey %d: %d warnings in %v", id, warnings, run)
		}
	}
	t.Logf("healthy survey 100: %d list calls", lists["100"])
	if lists["100"] < 4*int(run/(4*time.Second)) {
		t.Errorf("the healthy survey was listed %d times in %v: its polling suffered", lists["100"], run)
	}
	if !strings.Contains(out, "list answers not believed; the stream backs off") {
		t.Errorf("no back-off warning:\n%s", tail(out, 30))
	}
}
