package webhookrx

import (
	"bytes"
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/surveysync/surveysync/sim"
	"github.com/surveysync/surveysync/survey"
)

// flakyFront stands for the network and load balancer in front of the
// receiver: per distinct body, the first attempt gets a 503 without
// reaching the receiver, the second reaches it but its answer is lost (the
// sender sees a 502), later ones pass. So every event is kept on the
// second attempt and acknowledged on the third, as a duplicate.
type flakyFront struct {
	next     http.Handler
	mu       sync.Mutex
	attempts map[[32]byte]int
}

func (f *flakyFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	f.mu.Lock()
	f.attempts[sha256.Sum256(body)]++
	n := f.attempts[sha256.Sum256(body)]
	f.mu.Unlock()
	switch n {
	case 1:
		http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
	case 2:
		rec := httptest.NewRecorder()
		f.next.ServeHTTP(rec, r)
		http.Error(w, "bad gateway", http.StatusBadGateway)
	default:
		f.next.ServeHTTP(w, r)
	}
}

// The emulator sends real webhooks with the service's six-attempt schedule
// (scaled 1:100) through a front that fails the first attempts: every event
// is processed exactly once, and the emulator gives up on none.
func TestEmulatorWebhooksWithFailingFirstAttempts(t *testing.T) {
	p := newRecorder()
	log := &memLog{}
	o := testOptions(t, "")
	o.Listen = "" // embedded: Handler() behind our own server
	rx := start(t, o, p, log)
	front := &flakyFront{next: rx.r.Handler(), attempts: map[[32]byte]int{}}
	srv := httptest.NewServer(front)
	defer srv.Close()

	schedule := []time.Duration{0, 30 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, 36 * time.Second, 864 * time.Second}
	s, err := sim.New(sim.Options{
		Surveys:         []sim.SurveySpec{{ID: 4574, Responses: 10}},
		WebhookURL:      srv.URL + testPath,
		WebhookSchedule: schedule,
		WebhookTimeout:  5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	if err := s.LaunchSurvey(4575, "Spokojenost zákazníků – pobočka Brno"); err != nil {
		t.Fatal(err)
	}
	const n = 25
	want := map[survey.GUID]bool{}
	for range n {
		r, err := s.AddResponse(4575, survey.Response{})
		if err != nil {
			t.Fatal(err)
		}
		want[r.ResponseID] = true
	}
	if err := s.EndSurvey(4575); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "all events processed", func() bool { return len(p.processed()) == n+2 })
	waitFor(t, "emulator done", func() bool { return s.WebhooksPending() == 0 })
	time.Sleep(100 * time.Millisecond) // room for a stray extra processing

	got := p.processed()
	if len(got) != n+2 {
		t.Fatalf("processed %d events, want %d", len(got), n+2)
	}
	kinds := map[string]int{}
	for _, ev := range got {
		kinds[ev.Kind()]++
		if ev.Kind() == KindResponseReceived {
			if !want[ev.Parsed.ResponseID] {
				t.Errorf("unexpected response id %s (want the emulator's, lower case)", ev.Parsed.ResponseID)
			}
			delete(want, ev.Parsed.ResponseID)
		}
	}
	if kinds[KindSurveyLaunched] != 1 || kinds[KindSurveyEnded] != 1 || kinds[KindResponseReceived] != n || len(want) != 0 {
		t.Errorf("kinds = %v, missing responses %v", kinds, want)
	}
	for _, d := range s.WebhookDeliveries() {
		if d.GaveUp {
			t.Errorf("emulator gave up on event %d (%s)", d.Event, d.EventName)
		}
		if d.Delivered && d.Attempt != 3 {
			t.Errorf("event %d delivered on attempt %d, want 3", d.Event, d.Attempt)
		}
	}
	if v := counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", "duplicate"); v != n+2 {
		t.Errorf("duplicates = %v, want %d (each third attempt)", v, n+2)
	}
	waitFor(t, "logged", func() bool { return len(log.all()) == n+2 })
}

// The emulator's retries carry events over a full spool: 503 while it is
// full, accepted on a later attempt once the processor has caught up.
func TestEmulatorWebhooksThroughFullSpool(t *testing.T) {
	p := newRecorder()
	p.block = make(chan struct{})
	o := testOptions(t, "")
	o.SpoolMaxEvents = 5
	rx := start(t, o, p, nil)
	schedule := []time.Duration{0, 30 * time.Millisecond, 300 * time.Millisecond, 3 * time.Second, 36 * time.Second, 864 * time.Second}
	s, err := sim.New(sim.Options{
		Surveys:         []sim.SurveySpec{{ID: 4574, Responses: 10}},
		WebhookURL:      rx.url,
		WebhookSchedule: schedule,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n = 15
	for range n {
		if _, err := s.AddResponse(4574, survey.Response{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "503s", func() bool {
		return counter(t, rx.reg, "surveysync_webhook_requests_total", "outcome", "spool_full") >= n-5
	})
	close(p.block)
	waitFor(t, "all processed", func() bool { return len(p.processed()) == n })
	waitFor(t, "emulator done", func() bool { return s.WebhooksPending() == 0 })
	assertOnce(t, p.processed(), n)
	late := 0
	for _, d := range s.WebhookDeliveries() {
		if d.GaveUp {
			t.Errorf("emulator gave up on event %d", d.Event)
		}
		if d.Delivered && d.Attempt > 1 {
			late++
		}
		if !d.Delivered && d.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("failed attempt with status %d %s, want 503", d.StatusCode, d.Err)
		}
	}
	if late < n-5 {
		t.Errorf("%d events delivered on a retry, want at least %d", late, n-5)
	}
}

// With a Standard Webhooks secret the receiver requires signatures: the
// emulator configured with the same secret signs every delivery and all its
// events are processed; one without it gets only 401s (its events are
// never processed).
func TestEmulatorSignedWebhooks(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	p := newRecorder()
	o := testOptions(t, "")
	o.StandardWebhooksSecret = secret
	rx := start(t, o, p, nil)
	schedule := []time.Duration{0, time.Hour} // one attempt in the test's time
	newSim := func(secret string) *sim.Sim {
		s, err := sim.New(sim.Options{
			Surveys:         []sim.SurveySpec{{ID: 4574, Responses: 1}},
			WebhookURL:      rx.url,
			WebhookSchedule: schedule,
			WebhookSecret:   secret,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	unsigned := newSim("")
	if _, err := unsigned.AddResponse(4574, survey.Response{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the unsigned delivery answered", func() bool { return len(unsigned.WebhookDeliveries()) == 1 })
	if d := unsigned.WebhookDeliveries()[0]; d.Delivered || d.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned delivery: %+v, want a 401", d)
	}

	signed := newSim(secret)
	const n = 5
	for range n {
		if _, err := signed.AddResponse(4574, survey.Response{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the signed events processed", func() bool { return len(p.processed()) == n })
	for _, d := range signed.WebhookDeliveries() {
		if !d.Delivered || d.Attempt != 1 {
			t.Errorf("signed delivery %+v, want delivered at once", d)
		}
	}
	if _, err := sim.New(sim.Options{WebhookSecret: "whsec_!!!"}); err == nil || strings.Contains(err.Error(), "!!!") {
		t.Errorf("a bad emulator secret: %v", err)
	}
}
