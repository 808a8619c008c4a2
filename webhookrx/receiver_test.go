package webhookrx

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

// Good events of each kind are spooled (on disk before the 200), then
// processed and removed; the unknown one is kept and logged, not processed.
func TestEventsOfEachKindSpooledThenProcessed(t *testing.T) {
	p := newRecorder()
	p.block = make(chan struct{})
	log := &memLog{}
	o := testOptions(t, "")
	o.ProcessConcurrency = 1
	rx := start(t, o, p, log)

	bodies := []string{
		`{"event_name": "survey_launched", "survey_id": 4574, "launched_at": "2022-08-21T10:30:00Z"}`,
		`{"event_name": "response_received", "survey_id": 4574, "response_id": "DA453B67-791E-4D4D-9009-75B1ED8A33C1", "distribution_id": 14457, "distribution_type": "email", "contact_id": 4998745, "completed": true, "disqualified": true, "quota_full": false, "completed_at": "2022-08-21T10:30:00Z"}`,
		`{"event_name": "survey_ended", "survey_id": 4574, "ended_at": "2022-09-01T08:00:00Z"}`,
		`{"event_name": "survey_finished", "survey_id": "4575", "finished_at": "2022-09-01T08:00:00.4885133Z"}`,
		`{"event_name": "survey_closed", "survey_id": 4576}`,
		`{"event_name": "contact_bounced", "whatever": [1, 2]}`,
	}
	for _, b := range bodies {
		if st, body, _ := post(t, rx.url, b, nil); st != http.StatusOK || !strings.Contains(body, `"accepted"`) {
			t.Fatalf("POST %s: %d %s", b, st, body)
		}
	}
	// All six are on disk before any is processed.
	if got := counter(t, rx.reg, "surveysync_webhook_spool_events"); got != 6 {
		t.Errorf("spool_events = %v, want 6", got)
	}
	if n := eventsOnDisk(t, o.SpoolDir); n != 6 {
		t.Errorf("%d events in the spool's database, want 6", n)
	}
	waitFor(t, "the first Process call", func() bool { return p.callCount() == 1 })
	close(p.block)
	waitFor(t, "5 events processed and 6 logged", func() bool { return len(p.processed()) == 5 && len(log.all()) == 6 })
	waitFor(t, "spool emptied", func() bool {
		return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 && eventsOnDisk(t, o.SpoolDir) == 0
	})

	got := p.processed()
	wantNames := []string{"survey_launched", "response_received", "survey_ended", "survey_finished", "survey_closed"}
	for i, ev := range got {
		if ev.Name != wantNames[i] {
			t.Errorf("processed[%d] = %s, want %s (in spool order)", i, ev.Name, wantNames[i])
		}
		if i > 0 && ev.Seq <= got[i-1].Seq {
			t.Errorf("seq not increasing: %d after %d", ev.Seq, got[i-1].Seq)
		}
	}
	rr := got[1].Parsed
	if rr.ResponseID != "da453b67-791e-4d4d-9009-75b1ed8a33c1" {
		t.Errorf("response id %q not lower-cased", rr.ResponseID)
	}
	if rr.SurveyID != 4574 || *rr.DistributionID != 14457 || *rr.ContactID != 4998745 || rr.DistributionType != "email" {
		t.Errorf("parsed response_received = %+v", rr)
	}
	if !*rr.Completed || !*rr.Disqualified || *rr.QuotaFull {
		t.Errorf("flags not recorded as sent: %+v", rr)
	}
	if got[0].Parsed.LaunchedAt == nil || got[2].Parsed.EndedAt == nil || got[3].Parsed.EndedAt == nil {
		t.Errorf("times not parsed: launched %v ended %v finished %v", got[0].Parsed.LaunchedAt, got[2].Parsed.EndedAt, got[3].Parsed.EndedAt)
	}
	if got[3].Parsed.SurveyID != 4575 {
		t.Errorf("survey_id given as text: got %d", got[3].Parsed.SurveyID)
	}
	for _, ev := range got {
		if ev.Kind() == KindUnknown {
			t.Errorf("unknown event %s was processed", ev.Name)
		}
	}
	outcomes := map[string]string{}
	for _, e := range log.all() {
		outcomes[e.EventName] = e.Outcome
		if e.Body == "" || e.EventID == "" || e.ReceivedAt.IsZero() {
			t.Errorf("log entry incomplete: %+v", e)
		}
	}
	if outcomes["contact_bounced"] != OutcomeIgnored || outcomes["response_received"] != OutcomeProcessed {
		t.Errorf("log outcomes = %v", outcomes)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_events_total", "event", "survey_ended", "outcome", "processed"); v != 3 {
		t.Errorf("survey_ended processed = %v, want 3", v)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_events_total", "event", "unknown", "outcome", "ignored"); v != 1 {
		t.Errorf("unknown ignored = %v, want 1", v)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", "accepted"); v != 6 {
		t.Errorf("requests accepted = %v, want 6", v)
	}
	lint(t, rx.reg)
}

// Past the cap the receiver answers 503 with Retry-After; the event is
// accepted once there is room again.
func TestSpoolFullAnswers503ThenAccepts(t *testing.T) {
	p := newRecorder()
	p.block = make(chan struct{})
	o := testOptions(t, "")
	o.SpoolMaxEvents = 3
	o.RetryAfter = 7 * time.Second
	rx := start(t, o, p, nil)
	for i := range 3 {
		if st, body, _ := post(t, rx.url, responseBody(i), nil); st != http.StatusOK {
			t.Fatalf("event %d: %d %s", i, st, body)
		}
	}
	st, body, hdr := post(t, rx.url, responseBody(3), nil)
	if st != http.StatusServiceUnavailable || hdr.Get("Retry-After") != "7" {
		t.Fatalf("over the cap: %d %s Retry-After=%q, want 503 with Retry-After 7", st, body, hdr.Get("Retry-After"))
	}
	if err := rx.r.Ready(); err == nil || !strings.Contains(err.Error(), "spool full") {
		t.Errorf("Ready with a full spool: %v", err)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", "spool_full"); v != 1 {
		t.Errorf("spool_full = %v", v)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_spool_max_events"); v != 3 {
		t.Errorf("spool_max_events = %v", v)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_spool_oldest_age_seconds"); v < 0 {
		t.Errorf("oldest age = %v", v)
	}
	close(p.block)
	waitFor(t, "3 processed", func() bool { return len(p.processed()) == 3 })
	waitFor(t, "room in the spool", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
	// The service's next attempt gets in.
	if st, body, _ := post(t, rx.url, responseBody(3), nil); st != http.StatusOK {
		t.Fatalf("retry after room: %d %s", st, body)
	}
	waitFor(t, "4 processed", func() bool { return len(p.processed()) == 4 })
}

func TestSpoolByteCap(t *testing.T) {
	p := newRecorder()
	p.block = make(chan struct{})
	defer close(p.block)
	o := testOptions(t, "")
	o.SpoolMaxBytes = 1000
	rx := start(t, o, p, nil)
	n := 0
	for i := range 10 {
		st, _, _ := post(t, rx.url, responseBody(i), nil)
		if st == http.StatusServiceUnavailable {
			break
		}
		n++
	}
	if n == 0 || n == 10 {
		t.Fatalf("accepted %d events under a 1000-byte cap", n)
	}
	if b := counter(t, rx.reg, "surveysync_webhook_spool_bytes"); b > 1000 || b == 0 {
		t.Errorf("spool_bytes = %v", b)
	}
}

// A Processor that fails (as when ClickHouse is down) leaves the events in
// the spool; once it recovers each is processed exactly once.
func TestProcessorFailingKeepsEventsUntilRecovery(t *testing.T) {
	p := newRecorder()
	p.setFail(errors.New("clickhouse: dial tcp 127.0.0.1:9000: connection refused"))
	o := testOptions(t, "")
	rx := start(t, o, p, &memLog{})
	const n = 50
	for i := range n {
		if st, body, _ := post(t, rx.url, responseBody(i), nil); st != http.StatusOK {
			t.Fatalf("event %d: %d %s", i, st, body)
		}
	}
	waitFor(t, "retries", func() bool {
		return counter(t, rx.reg, "surveysync_webhook_events_total", "event", "response_received", "outcome", "retried") >= 8
	})
	if v := counter(t, rx.reg, "surveysync_webhook_spool_events"); v != n {
		t.Errorf("spool_events while failing = %v, want %d", v, n)
	}
	if eventsOnDisk(t, o.SpoolDir) != n {
		t.Error("spooled events gone while processing fails")
	}
	p.setFail(nil)
	waitFor(t, "all processed", func() bool { return len(p.processed()) == n })
	waitFor(t, "spool emptied", func() bool { return eventsOnDisk(t, o.SpoolDir) == 0 })
	assertOnce(t, p.processed(), n)
}

// The event log failing (ClickHouse down for webhook_events) also keeps the
// events in the spool; restarting while it is down processes them again
// (at least once) and logs them once it is back.
func TestEventLogFailingKeepsEvents(t *testing.T) {
	p := newRecorder()
	log := &memLog{}
	log.setFail(errors.New("clickhouse down"))
	o := testOptions(t, "")
	rx := start(t, o, p, log)
	for i := range 5 {
		post(t, rx.url, responseBody(i), nil)
	}
	waitFor(t, "processed", func() bool { return len(p.processed()) == 5 })
	time.Sleep(50 * time.Millisecond)
	if v := counter(t, rx.reg, "surveysync_webhook_spool_events"); v != 5 {
		t.Errorf("spool_events while the log fails = %v, want 5", v)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_log_failures_total"); v == 0 {
		t.Error("log failures not counted")
	}
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	log.setFail(nil)
	p2 := newRecorder()
	rx2 := start(t, o, p2, log)
	waitFor(t, "logged after restart", func() bool { return len(log.all()) == 5 })
	waitFor(t, "spool emptied", func() bool { return counter(t, rx2.reg, "surveysync_webhook_spool_events") == 0 })
	if len(p2.processed()) != 5 {
		t.Errorf("reprocessed %d after restart, want 5 (not done before the crash)", len(p2.processed()))
	}
}

func assertOnce(t *testing.T, got []Event, n int) {
	t.Helper()
	seen := map[string]int{}
	for _, ev := range got {
		seen[ev.ID]++
	}
	if len(got) != n || len(seen) != n {
		t.Fatalf("processed %d events, %d distinct, want %d exactly once", len(got), len(seen), n)
	}
}

// Stop with 1 000 events spooled and none processed (the Processor blocks),
// start a new Receiver on the same dir: all are processed, in order, once.
func TestStopWithSpooledEventsThenReplay(t *testing.T) {
	dir := t.TempDir()
	p := newRecorder()
	p.block = make(chan struct{}) // never released: Process returns on ctx cancel
	o := testOptions(t, dir)
	o.ShutdownTimeout = 200 * time.Millisecond
	rx := start(t, o, p, nil)
	const n = 1000
	sendConcurrently(t, rx.url, n, 16)
	if v := counter(t, rx.reg, "surveysync_webhook_spool_events"); v != n {
		t.Fatalf("spool_events = %v, want %d", v, n)
	}
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	if len(p.processed()) != 0 {
		t.Fatalf("first receiver processed %d", len(p.processed()))
	}

	p2 := newRecorder()
	o.ProcessConcurrency = 1
	rx2 := start(t, o, p2, nil)
	waitFor(t, "all replayed", func() bool { return len(p2.processed()) == n })
	waitFor(t, "spool emptied", func() bool { return eventsOnDisk(t, dir) == 0 })
	got := p2.processed()
	assertOnce(t, got, n)
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("replay out of order at %d: seq %d after %d", i, got[i].Seq, got[i-1].Seq)
		}
	}
	if v := counter(t, rx2.reg, "surveysync_webhook_events_total", "event", "response_received", "outcome", "replayed"); v != n {
		t.Errorf("replayed = %v", v)
	}
	if err := rx2.stop(); err != nil {
		t.Fatal(err)
	}
	// A third start finds nothing to do, and sequences keep increasing.
	p3 := newRecorder()
	rx3 := start(t, o, p3, nil)
	post(t, rx3.url, responseBody(n+1), nil)
	waitFor(t, "new event", func() bool { return len(p3.processed()) == 1 })
	if s := p3.processed()[0].Seq; s <= got[len(got)-1].Seq {
		t.Errorf("seq after restart %d, not above %d", s, got[len(got)-1].Seq)
	}
}

func sendConcurrently(t testing.TB, url string, n, clients int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				resp, err := client.Post(url, "application/json", strings.NewReader(responseBody(i)))
				if err != nil {
					errs <- err
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("event %d: status %d", i, resp.StatusCode)
				}
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Bad requests get the right status and nothing is spooled or processed.
func TestRejectedRequests(t *testing.T) {
	p := newRecorder()
	log := &memLog{}
	o := testOptions(t, "")
	o.BasicAuthUser, o.BasicAuthPassword = "c4s", "hunter2"
	o.StandardWebhooksSecret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	rx := start(t, o, p, log)
	base := strings.TrimSuffix(rx.url, testPath)
	auth := map[string]string{"Authorization": basic("c4s", "hunter2")}
	good := responseBody(1)
	now := time.Now()
	sig, _ := Sign(o.StandardWebhooksSecret, "msg_1", now, []byte(good))
	oldSig, _ := Sign(o.StandardWebhooksSecret, "msg_2", now.Add(-6*time.Minute), []byte(good))
	// signed is auth plus valid signature headers for body under id: the
	// body checks below run after the signature's.
	signed := func(id, body string) map[string]string {
		sg, err := Sign(o.StandardWebhooksSecret, id, now, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return merge(auth, map[string]string{"webhook-id": id, "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": sg})
	}

	cases := []struct {
		name, method, url, body string
		hdr                     map[string]string
		status                  int
		outcome, contains       string
	}{
		{"wrong path", "POST", base + "/webhooks/guess", good, auth, 404, "bad_path", "not found"},
		{"path prefix", "POST", rx.url + "x", good, auth, 404, "bad_path", ""},
		{"GET", "GET", rx.url, "", auth, 405, "method", "POST"},
		{"no auth", "POST", rx.url, good, nil, 401, "unauthorized", "basic auth"},
		{"bad password", "POST", rx.url, good, map[string]string{"Authorization": basic("c4s", "hunter3")}, 401, "unauthorized", ""},
		{"10 MB body", "POST", rx.url, `{"event_name":"x","pad":"` + strings.Repeat("a", 10<<20) + `"}`, auth, 413, "too_large", "larger than"},
		{"invalid JSON", "POST", rx.url, `{"event_name": "response_received",`, signed("msg_x", `{"event_name": "response_received",`), 400, "bad_json", "invalid JSON"},
		{"array", "POST", rx.url, `[1,2]`, signed("msg_x", `[1,2]`), 400, "bad_json", "JSON object"},
		{"trailing data", "POST", rx.url, `{"event_name":"survey_closed","survey_id":1} {}`, signed("msg_x", `{"event_name":"survey_closed","survey_id":1} {}`), 400, "bad_json", "after the object"},
		{"no event_name", "POST", rx.url, `{"survey_id": 4574}`, signed("msg_x", `{"survey_id": 4574}`), 400, "bad_json", "missing event_name"},
		{"no response_id", "POST", rx.url, `{"event_name":"response_received","survey_id":4574}`, signed("msg_x", `{"event_name":"response_received","survey_id":4574}`), 400, "bad_json", "missing response_id"},
		{"bad response_id", "POST", rx.url, `{"event_name":"response_received","survey_id":4574,"response_id":"nope"}`, signed("msg_x", `{"event_name":"response_received","survey_id":4574,"response_id":"nope"}`), 400, "bad_json", "invalid guid"},
		{"no survey_id", "POST", rx.url, `{"event_name":"survey_launched"}`, signed("msg_x", `{"event_name":"survey_launched"}`), 400, "bad_json", "missing survey_id"},
		{"bad signature", "POST", rx.url, good, merge(auth, map[string]string{"webhook-id": "msg_1", "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": "v1,AAAA"}), 401, "unauthorized", "signature"},
		{"signature of other body", "POST", rx.url, responseBody(2), merge(auth, map[string]string{"webhook-id": "msg_1", "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": sig}), 401, "unauthorized", "signature"},
		{"stale timestamp", "POST", rx.url, good, merge(auth, map[string]string{"webhook-id": "msg_2", "webhook-timestamp": fmt.Sprint(now.Add(-6 * time.Minute).Unix()), "webhook-signature": oldSig}), 401, "unauthorized", "tolerance"},
		{"incomplete signature headers", "POST", rx.url, good, merge(auth, map[string]string{"webhook-signature": sig}), 401, "unauthorized", "incomplete"},
		{"bad webhook-id", "POST", rx.url, good, signed("a b", good), 400, "bad_json", "webhook-id"},
		{"no signature headers", "POST", rx.url, good, auth, 401, "unauthorized", "signature required"},
		{"signed request replayed without its headers", "POST", rx.url, good, merge(auth, map[string]string{"webhook-id": "msg_1"}), 401, "unauthorized", "signature required"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", c.outcome)
			req, _ := http.NewRequest(c.method, c.url, strings.NewReader(c.body))
			for k, v := range c.hdr {
				req.Header.Set(k, v)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var sb strings.Builder
			_, _ = fmt.Fprint(&sb, readAll(resp))
			if resp.StatusCode != c.status || !strings.Contains(sb.String(), c.contains) {
				t.Errorf("got %d %s, want %d containing %q", resp.StatusCode, sb.String(), c.status, c.contains)
			}
			if strings.Contains(sb.String(), "hunter2") || strings.Contains(sb.String(), "MfKQ9r8") {
				t.Errorf("a secret leaked into the answer: %s", sb.String())
			}
			if after := counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", c.outcome); after != before+1 {
				t.Errorf("requests_total{outcome=%q} went %v → %v", c.outcome, before, after)
			}
		})
	}
	if v := counter(t, rx.reg, "surveysync_webhook_spool_events"); v != 0 {
		t.Errorf("spool_events = %v after rejected requests", v)
	}

	// A correctly signed event, and an unknown one, go through.
	st, body, _ := post(t, rx.url, good, merge(auth, map[string]string{"webhook-id": "msg_1", "webhook-timestamp": fmt.Sprint(now.Unix()), "webhook-signature": "v1,bm9wZQ== " + sig}))
	if st != 200 {
		t.Fatalf("signed event: %d %s", st, body)
	}
	paused := `{"event_name":"survey_paused","survey_id":"x"}`
	if st, body, _ := post(t, rx.url, paused, signed("msg_paused", paused)); st != 200 {
		t.Fatalf("unknown event: %d %s", st, body)
	}
	waitFor(t, "both logged", func() bool { return len(log.all()) == 2 })
	if got := p.processed(); len(got) != 1 || got[0].ID != "msg_1" {
		t.Fatalf("processed %v, want only msg_1", got)
	}
	if p.callCount() != 1 {
		t.Errorf("Process called %d times", p.callCount())
	}
}

// AllowUnsigned (webhooks.require_signature: false with a secret) keeps the
// former behaviour: a request without signature headers passes, one that
// carries them is still verified.
func TestAllowUnsignedWithSecret(t *testing.T) {
	p := newRecorder()
	o := testOptions(t, "")
	o.StandardWebhooksSecret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	o.AllowUnsigned = true
	rx := start(t, o, p, &memLog{})
	good := responseBody(1)
	if st, body, _ := post(t, rx.url, good, nil); st != 200 {
		t.Fatalf("unsigned request with AllowUnsigned: %d %s", st, body)
	}
	bad := map[string]string{"webhook-id": "msg_9", "webhook-timestamp": fmt.Sprint(time.Now().Unix()), "webhook-signature": "v1,AAAA"}
	if st, body, _ := post(t, rx.url, responseBody(2), bad); st != 401 {
		t.Fatalf("wrongly signed request with AllowUnsigned: %d %s, want 401", st, body)
	}
}

func readAll(resp *http.Response) string {
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			return b.String()
		}
	}
}

func basic(u, p string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(u, p)
	return r.Header.Get("Authorization")
}

func merge(a, b map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}

func TestAllowCIDRs(t *testing.T) {
	p := newRecorder()
	o := testOptions(t, "")
	o.AllowCIDRs = []string{"10.0.0.0/8"}
	rx := start(t, o, p, nil)
	if st, _, _ := post(t, rx.url, responseBody(1), nil); st != http.StatusForbidden {
		t.Fatalf("from 127.0.0.1 with allow 10/8: %d, want 403", st)
	}
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	o.AllowCIDRs = []string{"10.0.0.0/8", "127.0.0.1"}
	rx2 := start(t, o, p, nil)
	if st, body, _ := post(t, rx2.url, responseBody(1), nil); st != http.StatusOK {
		t.Fatalf("from an allowed address: %d %s", st, body)
	}
}

// The same webhook-id, or the same body, is processed once: while spooled,
// after processing, and after a restart.
func TestDuplicatesProcessedOnce(t *testing.T) {
	p := newRecorder()
	p.block = make(chan struct{})
	o := testOptions(t, "")
	o.ProcessConcurrency = 1
	rx := start(t, o, p, nil)
	idHdr := map[string]string{"webhook-id": "msg_2ZxS"}
	send := func(body string, hdr map[string]string, want string) {
		t.Helper()
		st, b, _ := post(t, rx.url, body, hdr)
		if st != 200 || !strings.Contains(b, want) {
			t.Fatalf("got %d %s, want 200 %s", st, b, want)
		}
	}
	send(responseBody(1), idHdr, "accepted")
	send(responseBody(1), idHdr, "duplicate")
	send(responseBody(9), idHdr, "duplicate") // same id, re-rendered body
	send(responseBody(2), nil, "accepted")
	send(responseBody(2), nil, "duplicate") // same body
	close(p.block)
	waitFor(t, "processed", func() bool { return len(p.processed()) == 2 })
	waitFor(t, "done", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
	send(responseBody(1), idHdr, "duplicate") // after processing
	send(responseBody(2), nil, "duplicate")
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	p2 := newRecorder()
	rx2 := start(t, o, p2, nil)
	rx = rx2
	send(responseBody(1), idHdr, "duplicate") // after a restart (the done window)
	send(responseBody(2), nil, "duplicate")
	send(responseBody(3), nil, "accepted")
	waitFor(t, "new one processed", func() bool { return len(p2.processed()) == 1 })
	if len(p.processed()) != 2 {
		t.Errorf("first receiver processed %d", len(p.processed()))
	}
	if v := counter(t, rx2.reg, "surveysync_webhook_requests_total", "outcome", "duplicate"); v != 2 {
		t.Errorf("duplicates counted %v, want 2", v)
	}
}

// Concurrent deliveries of one event while it waits: exactly one is spooled.
func TestConcurrentDuplicates(t *testing.T) {
	p := newRecorder()
	o := testOptions(t, "")
	rx := start(t, o, p, nil)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(rx.url, "application/json", strings.NewReader(responseBody(7)))
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	waitFor(t, "processed", func() bool { return len(p.processed()) >= 1 })
	time.Sleep(50 * time.Millisecond)
	if n := len(p.processed()); n != 1 {
		t.Fatalf("processed %d times", n)
	}
}

func TestPermanentErrorRejectsEvent(t *testing.T) {
	log := &memLog{}
	var calls int
	var mu sync.Mutex
	p := ProcessorFunc(func(_ context.Context, ev Event) error {
		mu.Lock()
		calls++
		mu.Unlock()
		return permanent.New("webhook", fmt.Errorf("survey %d: 403 no rights", ev.Parsed.SurveyID))
	})
	o := testOptions(t, "")
	rx := start(t, o, p, log)
	post(t, rx.url, responseBody(1), nil)
	waitFor(t, "logged", func() bool { return len(log.all()) == 1 })
	e := log.all()[0]
	if e.Outcome != OutcomeRejected || !strings.Contains(e.Error, "403") || e.Attempts != 1 {
		t.Errorf("log entry = %+v", e)
	}
	waitFor(t, "removed", func() bool { return counter(t, rx.reg, "surveysync_webhook_spool_events") == 0 })
	mu.Lock()
	defer mu.Unlock()
	if calls != 1 {
		t.Errorf("Process called %d times for a permanent error", calls)
	}
}

func TestSecondReceiverOnSameDirFails(t *testing.T) {
	o := testOptions(t, "")
	start(t, o, newRecorder(), nil)
	r2, err := New(o, newRecorder(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second Run on the same spool dir: %v, want an 'in use' error", err)
	}
}

func TestHandlerBeforeRunAnswers503(t *testing.T) {
	r, err := New(testOptions(t, ""), newRecorder(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready() == nil {
		t.Error("Ready before Run")
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", testPath, strings.NewReader(responseBody(1)))
	r.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("before Run: %d", rec.Code)
	}
}

func TestOptionsValidation(t *testing.T) {
	bad := []Options{
		{SpoolDir: "x"},
		{Path: "nosl", SpoolDir: "x"},
		{Path: "/p"},
		{Path: "/p", SpoolDir: "x", AllowCIDRs: []string{"10.0.0.0/33"}},
		{Path: "/p", SpoolDir: "x", StandardWebhooksSecret: "whsec_!!!"},
		{Path: "/p", SpoolDir: "x", StandardWebhooksSecret: "short-raw-key"},
		{Path: "/p", SpoolDir: "x", StandardWebhooksSecret: "whsec_" + base64.StdEncoding.EncodeToString([]byte("fifteen bytes!!"))},
		{Path: "/p", SpoolDir: "x", BasicAuthPassword: "pw"},
	}
	for _, o := range bad {
		if _, err := New(o, newRecorder(), nil); err == nil {
			t.Errorf("New(%+v) accepted", o)
		} else if strings.Contains(err.Error(), "!!!") {
			t.Errorf("error leaks the secret: %v", err)
		}
	}
	if _, err := New(Options{Path: "/p", SpoolDir: "x", AllowCIDRs: []string{"::ffff:10.1.2.3", "192.168.0.0/16"}}, newRecorder(), nil); err != nil {
		t.Error(err)
	}
}

func TestParseEventLenient(t *testing.T) {
	ev, err := parseEvent([]byte(`{"event_name":"response_received","survey_id":"12","response_id":"DA453B67-791E-4D4D-9009-75B1ED8A33C1","contact_id":"55","completed":"true","quota_full":null,"completed_at":"2022-09-12T16:24:09.4885133Z","distribution_id":"n/a"}`))
	if err != nil {
		t.Fatal(err)
	}
	if ev.SurveyID != 12 || *ev.ContactID != 55 || !*ev.Completed || ev.QuotaFull != nil || ev.DistributionID != nil {
		t.Errorf("parsed %+v", ev)
	}
	if ev.CompletedAt.Time != time.Date(2022, 9, 12, 16, 24, 9, 488513300, time.UTC) {
		t.Errorf("completed_at %v", ev.CompletedAt)
	}
	if ev.ResponseID != survey.MustGUID("da453b67-791e-4d4d-9009-75b1ed8a33c1") {
		t.Errorf("guid %s", ev.ResponseID)
	}
}

// A Permanent error from the event log gives up on the log rows but not on
// the events: they are marked done rather than filling the spool.
func TestEventLogPermanentErrorMarksDone(t *testing.T) {
	p := newRecorder()
	log := EventLogFunc(func(context.Context, []LogEntry) error {
		return permanent.New("webhook", errors.New("table webhook_events: no such column"))
	})
	rx := start(t, testOptions(t, ""), p, log)
	post(t, rx.url, responseBody(1), nil)
	waitFor(t, "processed and done", func() bool {
		return len(p.processed()) == 1 && counter(t, rx.reg, "surveysync_webhook_spool_events") == 0
	})
}

// A chunked body (no Content-Length) is bounded while it is read.
func TestChunkedBodyTooLarge(t *testing.T) {
	p := newRecorder()
	o := testOptions(t, "")
	o.MaxBodyBytes = 4096
	rx := start(t, o, p, nil)
	body := io.MultiReader(strings.NewReader(`{"event_name":"survey_closed","survey_id":1,"pad":"`), strings.NewReader(strings.Repeat("x", 8192)), strings.NewReader(`"}`))
	req, _ := http.NewRequest(http.MethodPost, rx.url, body)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if req.ContentLength != 0 || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversize body: %d (content length %d), want 413", resp.StatusCode, req.ContentLength)
	}
	if v := counter(t, rx.reg, "surveysync_webhook_spool_events"); v != 0 {
		t.Errorf("spooled %v", v)
	}
}

// A Processor that ignores cancellation does not hang the shutdown: it is
// abandoned and its event stays in the spool.
func TestShutdownAbandonsStuckProcessor(t *testing.T) {
	release := make(chan struct{})
	var started atomic.Bool
	p := ProcessorFunc(func(context.Context, Event) error {
		started.Store(true)
		<-release // ignores ctx
		return nil
	})
	o := testOptions(t, "")
	o.ShutdownTimeout = 100 * time.Millisecond
	rx := start(t, o, p, nil)
	post(t, rx.url, responseBody(1), nil)
	waitFor(t, "processing", started.Load)
	t0 := time.Now()
	if err := rx.stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("shutdown took %s", d)
	}
	close(release) // let the abandoned worker finish before goleak looks
	time.Sleep(50 * time.Millisecond)
	p2 := newRecorder()
	rx2 := start(t, o, p2, nil)
	waitFor(t, "replayed", func() bool { return len(p2.processed()) == 1 })
	_ = rx2
}
