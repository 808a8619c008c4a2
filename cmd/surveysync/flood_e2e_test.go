package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// floodEnv is a daemon with webhooks on, at the API's default pace
// (api.rate_limit 10/s, api.max_concurrency 8), against an emulator whose
// clock stands still at clock, synced once.
type floodEnv struct {
	e     *emulator
	w     *testWarehouse
	d     *daemonProc
	url   string
	clock time.Time
}

func startFloodEnv(t *testing.T, seed int64) *floodEnv {
	t.Helper()
	w := clickhouseOrSkip(t)
	port := freePort(t)
	path := "/hooks/e2e-" + randHex(12)
	clock := time.Now().UTC().Add(-time.Minute).Truncate(time.Second)
	e := newEmulator(t, sim.Options{Surveys: specs(1, 50, seed), Now: func() time.Time { return clock },
		WebhookURL: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), WebhookSchedule: []time.Duration{0, 200 * time.Millisecond, time.Second}})
	cfg := writeConfig(t, e, w, fmt.Sprintf("sync:\n  poll_interval: 1h\n  reconcile_interval: 0s\n  partial_lookback: 2h\n  batch:\n    max_delay: 100ms\nwebhooks:\n  enabled: true\n  listen: 127.0.0.1:%d\n  path: %s\n  spool_dir: %s\n", port, path, t.TempDir()))
	// The API's defaults, not the harness's unlimited pace: a junk event
	// that cost a call would show here.
	t.Setenv("SURVEYSYNC_API__RATE_LIMIT", "10")
	t.Setenv("SURVEYSYNC_API__MAX_CONCURRENCY", "8")
	d := startDaemon(t, cfg)
	waitConverged(t, e, w, 90*time.Second)
	return &floodEnv{e: e, w: w, d: d, url: fmt.Sprintf("http://127.0.0.1:%d%s", port, path), clock: clock}
}

// post sends bodies from clients concurrent senders; every one must be
// answered 200.
func (f *floodEnv) post(t *testing.T, clients int, bodies [][]byte) {
	t.Helper()
	if err := f.postCounting(clients, bodies, nil); err != nil {
		t.Fatalf("posting webhooks: %v", err)
	}
}

// postCounting is post, counting the answered requests in sent (may be nil).
func (f *floodEnv) postCounting(clients int, bodies [][]byte, sent *atomic.Int64) error {
	var next atomic.Int64
	var failed atomic.Value
	tr := &http.Transport{MaxIdleConnsPerHost: clients}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bodies) {
					return
				}
				resp, err := hc.Post(f.url, "application/json", bytes.NewReader(bodies[i]))
				if err != nil {
					failed.Store(err.Error())
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Store(fmt.Sprintf("status %d", resp.StatusCode))
					return
				}
				if sent != nil {
					sent.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if v := failed.Load(); v != nil {
		return fmt.Errorf("%v", v)
	}
	return nil
}

// addReal adds n completed responses to the emulator (it sends their
// webhooks) and returns their ids and when each was added.
func (f *floodEnv) addReal(t *testing.T, surveyID int64, n int) ([]survey.GUID, []time.Time) {
	t.Helper()
	var ids []survey.GUID
	var added []time.Time
	for range n {
		r, err := f.e.sim.AddResponse(surveyID, survey.Response{ResponseStatus: survey.StatusCompleted,
			DateCreated: survey.Time{Time: f.clock.Add(-10 * time.Minute)}, DateCompleted: survey.TimeOf(f.clock.Add(-30 * time.Second))})
		if err != nil {
			t.Fatal(err)
		}
		added = append(added, time.Now())
		ids = append(ids, r.ResponseID)
	}
	return ids, added
}

// latencies waits for each response in responses_current and returns the
// time from its addition (30 s at most).
func (f *floodEnv) latencies(t *testing.T, ids []survey.GUID, added []time.Time) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, len(ids))
	for pending := len(ids); pending > 0; time.Sleep(10 * time.Millisecond) {
		for i, id := range ids {
			if lat[i] != 0 {
				continue
			}
			q := fmt.Sprintf("SELECT count() FROM %%s.responses_current WHERE response_id = toUUID('%s')", id)
			if f.count(t, q) == 1 {
				lat[i] = time.Since(added[i])
				pending--
			}
		}
		if time.Since(added[0]) > 30*time.Second {
			t.Fatalf("real webhooks not written 30 s after they were sent (latencies %v); output:\n%s", lat, tail(f.d.output(), 40))
		}
	}
	return lat
}

func (f *floodEnv) count(t *testing.T, q string) uint64 {
	t.Helper()
	var n uint64
	if err := f.w.conn.QueryRow(context.Background(), fmt.Sprintf(q, f.w.db)).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (f *floodEnv) waitCount(t *testing.T, what, q string, want uint64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		n := f.count(t, q)
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after %v, want %d; output:\n%s", what, n, timeout, want, tail(f.d.output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func warnLines(out string) int {
	return strings.Count(out, "level=WARN") + strings.Count(out, `"level":"WARN"`)
}

func junkBody(surveyID int64, completedAt time.Time) []byte {
	id := strings.ToUpper(fmt.Sprintf("%s-%s-4%s-8%s-%s", randHex(4), randHex(2), randHex(2)[1:], randHex(2)[1:], randHex(6)))
	return fmt.Appendf(nil, `{"event_name":"response_received","survey_id":%d,"response_id":%q,"distribution_type":"link","completed":true,"disqualified":false,"quota_full":false,"completed_at":%q}`,
		surveyID, id, completedAt.UTC().Format(time.RFC3339))
}

// 5,000 webhooks naming responses that do not exist (random ids of a known
// survey, from 32 senders), then 5 real ones (the emulator's own webhooks):
// the real ones are in responses_current within 2 s each, the flood costs a
// bounded number of API calls (not one detail per junk event), the log
// has fewer than 100 warnings, every junk event is logged rejected. Five
// more real ones sent while another 5,000 junk events come in are written
// within 2 s too, and a junk id whose response appears afterwards is
// synced by its webhook.
func TestJunkWebhookFloodDoesNotStarveRealOnes(t *testing.T) {
	f := startFloodEnv(t, 81)
	sid := f.e.ids[0]
	callsBefore := f.e.sim.Calls()
	warnBefore := warnLines(f.d.output())

	const junk = 5000
	bodies := make([][]byte, junk)
	for i := range bodies {
		bodies[i] = junkBody(sid, time.Now())
	}
	start := time.Now()
	f.post(t, 32, bodies)
	intake := time.Since(start)

	// Five real responses: the emulator sends their webhooks.
	ids, added := f.addReal(t, sid, 5)
	lat := f.latencies(t, ids, added)
	f.waitCount(t, "junk events logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE outcome = 'rejected'", junk, 60*time.Second)
	drained := time.Since(start)
	calls := f.e.sim.Calls()
	details := calls[sim.OpGetResponse] - callsBefore[sim.OpGetResponse]
	lists := calls[sim.OpListResponses] - callsBefore[sim.OpListResponses]
	warns := warnLines(f.d.output()) - warnBefore
	t.Logf("intake of %d junk webhooks from 32 senders: %v (%.0f/s); real webhook → row: %v; all junk processed %v after the first; API calls during the flood: %d details, %d lists; WARN lines: %d",
		junk, intake.Round(time.Millisecond), junk/intake.Seconds(), lat, drained.Round(time.Millisecond), details, lists, warns)
	for i, l := range lat {
		if l > 2*time.Second {
			t.Errorf("real webhook %d written %v after the flood, want < 2 s", i, l)
		}
	}
	if warns >= 100 {
		t.Errorf("%d WARN lines for the flood, want < 100:\n%s", warns, tail(f.d.output(), 60))
	}
	if details > 5+50 || lists > 100 {
		t.Errorf("the flood cost %d detail and %d list calls: not bounded", details, lists)
	}

	// Five more while another 5,000 junk events are coming in.
	more := make([][]byte, junk)
	for i := range more {
		more[i] = junkBody(sid, time.Now())
	}
	var sent atomic.Int64
	posted := make(chan error, 1)
	go func() { posted <- f.postCounting(32, more, &sent) }()
	for sent.Load() < junk/5 {
		time.Sleep(time.Millisecond)
	}
	ids, added = f.addReal(t, sid, 5)
	during := f.latencies(t, ids, added)
	inFlood := sent.Load() < junk
	if err := <-posted; err != nil {
		t.Fatalf("posting the second flood: %v", err)
	}
	t.Logf("real webhook → row while the second flood came in (still coming in when the last was written: %v): %v", inFlood, during)
	for i, l := range during {
		if l > 2*time.Second {
			t.Errorf("real webhook %d written %v after it was sent amid a flood, want < 2 s", i, l)
		}
	}
	f.waitCount(t, "all junk events logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE outcome = 'rejected'", 2*junk, 60*time.Second)

	// 2,000 naming random surveys (which cannot be checked against one
	// listing), then 5 real ones: written within 2 s, and the unknown
	// surveys cost calls only at a bounded rate.
	callsBefore = f.e.sim.Calls()
	strangers := make([][]byte, 2000)
	for i := range strangers {
		strangers[i] = junkBody(int64(1_000_000+i), time.Now())
	}
	start = time.Now()
	f.post(t, 32, strangers)
	ids, added = f.addReal(t, sid, 5)
	lat = f.latencies(t, ids, added)
	f.waitCount(t, "all junk events logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE outcome = 'rejected'", 2*junk+2000, 60*time.Second)
	calls = f.e.sim.Calls()
	details = calls[sim.OpGetResponse] - callsBefore[sim.OpGetResponse]
	lists = calls[sim.OpListResponses] - callsBefore[sim.OpListResponses]
	t.Logf("2,000 junk webhooks for random surveys, then 5 real: real webhook → row %v; API calls %d details, %d lists over %v", lat, details, lists, time.Since(start).Round(time.Millisecond))
	for i, l := range lat {
		if l > 2*time.Second {
			t.Errorf("real webhook %d written %v after a flood of unknown surveys, want < 2 s", i, l)
		}
	}
	// 3 unknown surveys at once, then 1 a second (a token for every
	// second begun), 2 calls each (a detail, and a list call when it
	// answers 404); the 5 real details, and one listing round (a call per
	// status) that checks them, their survey being flooded since the
	// first phase.
	if budget := int64(5 + 4 + 2*(3+math.Ceil(time.Since(start).Seconds()))); details+lists > budget {
		t.Errorf("2,000 events of unknown surveys cost %d calls, want at most %d", details+lists, budget)
	}

	// A response that did not exist when the flood named it, and appears
	// afterwards: its own webhook brings it (checked against a listing,
	// since its id is known to be absent).
	late := strings.ToLower(string(bodies[17][strings.Index(string(bodies[17]), `"response_id":"`)+15:][:36]))
	if _, err := f.e.sim.AddResponse(sid, survey.Response{ResponseID: survey.GUID(late), ResponseStatus: survey.StatusCompleted,
		DateCreated: survey.Time{Time: f.clock.Add(-5 * time.Minute)}, DateCompleted: survey.TimeOf(f.clock.Add(-20 * time.Second))}); err != nil {
		t.Fatal(err)
	}
	f.waitCount(t, "the junk id that appeared later", fmt.Sprintf("SELECT count() FROM %%s.responses_current WHERE response_id = toUUID('%s')", late), 1, 10*time.Second)
	waitConverged(t, f.e, f.w, 30*time.Second)
	_ = f.d.cmd.Process.Signal(syscall.SIGTERM)
	f.d.wait(t, 60*time.Second)
}

// A forged survey_ended for a live survey (responses started after the end
// it claims) is rejected after one list call, and 500 more of it without a
// call: the survey keeps its cadence and ended_at stays empty. One dated in
// the future is rejected without a call. The emulator's own survey_ended
// (nothing started since) is acted on.
func TestForgedSurveyEndedLeavesLiveSurveyPolled(t *testing.T) {
	f := startFloodEnv(t, 83)
	sid := f.e.ids[0]
	before := f.e.sim.Calls()
	forged := fmt.Sprintf(`{"event_name":"survey_ended","survey_id":%d,"ended_at":%q`, sid, f.clock.Add(-30*time.Minute).Format(time.RFC3339))
	f.post(t, 1, [][]byte{[]byte(forged + "}")})
	f.waitCount(t, "the forged survey_ended logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE event_name = 'survey_ended' AND outcome = 'rejected' AND error LIKE '%%the survey is live%%'", 1, 10*time.Second)
	// 500 more of them (bodies made distinct, so none is a duplicate):
	// known false, they cost no call.
	var flood [][]byte
	for i := range 500 {
		flood = append(flood, fmt.Appendf(nil, `%s,"n":%d}`, forged, i))
	}
	f.post(t, 8, flood)
	f.waitCount(t, "the forged survey_ended flood logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE event_name = 'survey_ended' AND outcome = 'rejected' AND error LIKE '%%the survey is live%%'", 501, 20*time.Second)
	lists := f.e.sim.Calls()[sim.OpListResponses] - before[sim.OpListResponses]
	if lists != 1 {
		t.Errorf("501 forged survey_ended events cost %d list calls, want 1", lists)
	}
	// A future end is refused without a call.
	f.post(t, 1, [][]byte{fmt.Appendf(nil, `{"event_name":"survey_ended","survey_id":%d,"ended_at":%q}`, sid, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))})
	f.waitCount(t, "the future survey_ended logged rejected", "SELECT count() FROM %s.webhook_events FINAL WHERE event_name = 'survey_ended' AND outcome = 'rejected' AND error LIKE '%%in the future%%'", 1, 10*time.Second)
	time.Sleep(time.Second) // a final sync would start at once
	if strings.Contains(f.d.output(), "survey ended: final sync done") {
		t.Fatalf("a forged survey_ended ended the survey:\n%s", tail(f.d.output(), 30))
	}
	q := fmt.Sprintf("SELECT count() FROM %%s.surveys FINAL WHERE survey_id = %d AND ended_at IS NOT NULL", sid)
	if n := f.count(t, q); n != 0 {
		t.Fatalf("surveys.ended_at set by a forged survey_ended")
	}
	// The service's own survey_ended is confirmed and acted on.
	if err := f.e.sim.EndSurvey(sid); err != nil {
		t.Fatal(err)
	}
	f.waitCount(t, "the real survey_ended", q, 1, 10*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(f.d.output(), "survey ended: final sync done") {
		if time.Now().After(deadline) {
			t.Fatalf("the real survey_ended did not end the survey:\n%s", tail(f.d.output(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = f.d.cmd.Process.Signal(syscall.SIGTERM)
	f.d.wait(t, 60*time.Second)
}
