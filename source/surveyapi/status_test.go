package surveyapi

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/surveysync/surveysync/survey"
)

// One test per row of REFERENCE.md's status table.

func TestHeadersExact(t *testing.T) {
	var mu sync.Mutex
	var seen []http.Header
	var methods []string
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		methods = append(methods, r.Method+" "+r.URL.RequestURI())
		mu.Unlock()
		switch {
		case strings.HasSuffix(r.URL.Path, "/contacts"):
			writeJSON(w, 201, `{"result": {"id": 554784, "survey_url": "https://www.click4survey.cz/m4/3177/x", "created_at": "2022-08-21T11:31:12Z"}, "meta": {"requestId": "r1", "http_status": 201}}`)
		case strings.HasSuffix(r.URL.Path, "/send"):
			writeJSON(w, 200, `{"result": {"contacts_count": {"pending": 1250, "sent": 48545, "bounces": 124}}, "meta": {"request_id": "r2", "status_code": 200}}`)
		case strings.Contains(r.URL.Path, "/uploaded-files/"):
			w.Header().Set("Content-Type", "application/pdf")
			_, _ = w.Write([]byte("%PDF-1.7"))
		case strings.HasSuffix(r.URL.Path, "/responses"):
			writeJSON(w, 200, `{"result": {"per_page": 1, "page": 1, "total": 0, "data": []}, "meta": {"requestId": "r3", "http_status": 200}}`)
		default:
			w.Write(responseJSON(testRID))
		}
	})
	h := newClient(t, s.URL, nil)
	ctx := context.Background()
	if _, err := h.c.CreateContact(ctx, 7, survey.Contact{Email: "a@example.cz"}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.SendMessage(ctx, 7, 9, survey.SendRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.ListResponses(ctx, 4574, survey.ListQuery{PerPage: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
		t.Fatal(err)
	}
	f, err := h.c.DownloadFile(ctx, 4574, testRID, testFID)
	if err != nil {
		t.Fatal(err)
	}
	f.Body.Close()
	if err := h.c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"X-Api-Token":  testToken,
		"User-Agent":   testUA,
		"Accept":       "application/json",
		"Content-Type": "application/json",
	}
	if len(seen) != 6 {
		t.Fatalf("server saw %d requests, want 6", len(seen))
	}
	for i, hd := range seen {
		for k, v := range want {
			if got := hd.Values(k); len(got) != 1 || got[0] != v {
				t.Errorf("%s: header %s = %q, want exactly %q", methods[i], k, got, v)
			}
		}
		if hd.Get("Authorization") != "" || hd.Get("Cookie") != "" {
			t.Errorf("%s: unexpected credentials header", methods[i])
		}
	}
	wantPaths := []string{
		"POST /v1/distributions/7/contacts",
		"POST /v1/distributions/7/messages/9/send",
		"GET /v1/surveys/4574/responses?per_page=1",
		"GET /v1/surveys/4574/responses/" + testRID,
		"GET /v1/surveys/4574/responses/" + testRID + "/uploaded-files/" + testFID,
		"GET /v1/surveys/0/responses?per_page=1",
	}
	for i, w := range wantPaths {
		if methods[i] != w {
			t.Errorf("request %d = %q, want %q", i, methods[i], w)
		}
	}
}

// checkAPIError asserts the common shape of a final status error.
func checkAPIError(t *testing.T, err error, status int, sentinel error, permanent bool) *APIError {
	t.Helper()
	var ae *APIError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an *APIError", err, err)
	}
	if ae.Status != status {
		t.Errorf("status = %d, want %d", ae.Status, status)
	}
	if !errors.Is(err, sentinel) {
		t.Errorf("errors.Is(%v, %v) = false", err, sentinel)
	}
	if IsPermanent(err) != permanent {
		t.Errorf("IsPermanent(%v) = %v, want %v", err, !permanent, permanent)
	}
	if ae.RequestID != "req-"+http.StatusText(status)[:3] {
		t.Errorf("request id = %q", ae.RequestID)
	}
	msg := err.Error()
	for _, part := range []string{ae.Op, ae.RequestID, ae.Message} {
		if !strings.Contains(msg, part) {
			t.Errorf("error %q does not quote %q", msg, part)
		}
	}
	return ae
}

func statusServer(t *testing.T, status int, msg string) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, status, errorBody("req-"+http.StatusText(status)[:3], status, msg))
	})
}

func TestStatus400Permanent(t *testing.T) {
	s := statusServer(t, 400, "Invalid e-mail address")
	h := newClient(t, s.URL, nil)
	_, err := h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "x"})
	ae := checkAPIError(t, err, 400, ErrBadRequest, true)
	if ae.Message != "Invalid e-mail address" || ae.Op != OpCreateContact {
		t.Errorf("APIError = %+v", ae)
	}
	if s.hits.Load() != 1 {
		t.Errorf("hits = %d, want 1 (no retry)", s.hits.Load())
	}
	if h.c.Count(OpCreateContact, OutcomeBadRequest) != 1 {
		t.Error("bad_request not counted")
	}
}

func TestStatus405LikeBadRequest(t *testing.T) {
	s := statusServer(t, 405, "Required fields missing: email")
	h := newClient(t, s.URL, nil)
	_, err := h.c.CreateContact(context.Background(), 7, survey.Contact{})
	ae := checkAPIError(t, err, 405, ErrBadRequest, true)
	if ae.Message != "Required fields missing: email" {
		t.Errorf("message = %q", ae.Message)
	}
	if s.hits.Load() != 1 || h.c.Count(OpCreateContact, OutcomeBadRequest) != 1 {
		t.Errorf("hits = %d, bad_request = %d", s.hits.Load(), h.c.Count(OpCreateContact, OutcomeBadRequest))
	}
}

func TestStatus403Permanent(t *testing.T) {
	s := statusServer(t, 403, "No rights to survey 4574")
	h := newClient(t, s.URL, nil)
	_, err := h.c.ListResponses(context.Background(), 4574, survey.ListQuery{})
	checkAPIError(t, err, 403, ErrForbidden, true)
	if s.hits.Load() != 1 || h.c.Count(OpListResponses, OutcomeForbidden) != 1 {
		t.Errorf("hits = %d", s.hits.Load())
	}
}

func TestStatus404NotFound(t *testing.T) {
	s := statusServer(t, 404, "Response not found")
	h := newClient(t, s.URL, nil)
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	checkAPIError(t, err, 404, survey.ErrNotFound, true)
	if s.hits.Load() != 1 || h.c.Count(OpGetResponse, OutcomeNotFound) != 1 {
		t.Errorf("hits = %d", s.hits.Load())
	}
	if !h.c.Healthy() {
		t.Error("a 404 made the client unhealthy")
	}
}

func TestStatus401StopsAndProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fixed atomic.Bool
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			if !fixed.Load() {
				writeJSON(w, 401, errorBody("req-Una", 401, "Invalid API token"))
				return
			}
			w.Write(responseJSON(testRID))
		})
		h := newClient(t, s.URL, s.with(func(o *Options) { o.AuthProbeInterval = 300 * time.Millisecond }))
		ctx := context.Background()

		_, err := h.c.GetResponse(ctx, 4574, testRID)
		ae := checkAPIError(t, err, 401, ErrUnauthorized, false)
		if ae.Message != "Invalid API token" {
			t.Errorf("message = %q", ae.Message)
		}
		if s.hits.Load() != 1 {
			t.Fatalf("hits = %d, want 1 (401 is not retried)", s.hits.Load())
		}
		if h.c.Healthy() || h.c.LastAuthError() == nil {
			t.Fatal("client healthy after a 401")
		}
		if v := testutil.ToFloat64(h.c.m.authFailed); v != 1 {
			t.Errorf("auth_failed gauge = %v", v)
		}
		if v := testutil.ToFloat64(h.c.m.paused); v != 1 {
			t.Errorf("paused gauge = %v", v)
		}
		// Fail fast: 20 calls, no request.
		for range 20 {
			_, err := h.c.GetResponse(ctx, 4574, testRID)
			if !errors.Is(err, ErrUnauthorized) {
				t.Fatalf("err = %v, want ErrUnauthorized", err)
			}
			if IsPermanent(err) {
				t.Error("fail-fast 401 reported permanent")
			}
		}
		if err := h.c.Ping(ctx); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("Ping = %v", err)
		}
		if s.hits.Load() != 1 {
			t.Fatalf("hits = %d, want 1: the client kept calling with a rejected token", s.hits.Load())
		}
		// After the probe interval one call probes (still rejected).
		time.Sleep(310 * time.Millisecond)
		if _, err := h.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, ErrUnauthorized) {
			t.Fatalf("probe err = %v", err)
		}
		if _, err := h.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, ErrUnauthorized) {
			t.Fatal("second call after the probe was not refused")
		}
		if s.hits.Load() != 2 {
			t.Fatalf("hits = %d, want 2 (one probe)", s.hits.Load())
		}
		// The token is fixed: the next probe succeeds and everything resumes.
		fixed.Store(true)
		time.Sleep(310 * time.Millisecond)
		if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
			t.Fatalf("after fix: %v", err)
		}
		if !h.c.Healthy() || h.c.LastAuthError() != nil {
			t.Error("client still unhealthy after a successful probe")
		}
		if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
			t.Fatal(err)
		}
		if v := testutil.ToFloat64(h.c.m.authFailed) + testutil.ToFloat64(h.c.m.paused); v != 0 {
			t.Errorf("gauges not cleared: %v", v)
		}
		if n := h.c.Count(OpGetResponse, OutcomeUnauthorized); n != 2 {
			t.Errorf("unauthorized count = %d, want 2", n)
		}
		if !strings.Contains(h.logs.String(), "rejected the token") {
			t.Error("401 not logged")
		}
	})
}

func TestStatus402PausesAllThenResumes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var arrivals []time.Time
		var quotaAt time.Time
		var first atomic.Bool
		first.Store(true)
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			if first.Swap(false) {
				mu.Lock()
				quotaAt = time.Now()
				mu.Unlock()
				writeJSON(w, 402, errorBody("req-Pay", 402, "Monthly API quota exceeded"))
				return
			}
			mu.Lock()
			arrivals = append(arrivals, time.Now())
			mu.Unlock()
			time.Sleep(30 * time.Millisecond)
			w.Write(responseJSON(testRID))
		})
		h := newClient(t, s.URL, s.with(func(o *Options) { o.QuotaPause = 300 * time.Millisecond }))
		ctx := context.Background()

		_, err := h.c.GetResponse(ctx, 4574, testRID)
		checkAPIError(t, err, 402, ErrQuotaExceeded, false)
		st := h.c.Stats()
		if !st.Paused || !st.Healthy {
			t.Fatalf("stats after 402 = %+v", st)
		}
		if v := testutil.ToFloat64(h.c.m.paused); v != 1 {
			t.Errorf("paused gauge = %v", v)
		}
		// Ping does not wait out the pause.
		if err := h.c.Ping(ctx); !errors.Is(err, ErrQuotaExceeded) {
			t.Errorf("Ping during pause = %v", err)
		}
		// A caller whose context ends during the pause returns at once.
		sctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		t0 := time.Now()
		_, err = h.c.GetResponse(sctx, 4574, testRID)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) || time.Since(t0) > 150*time.Millisecond {
			t.Errorf("short ctx during pause: err = %v after %v", err, time.Since(t0))
		}
		// Callers wait for the pause, the probe goes first, then all resume.
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() {
				if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
					t.Errorf("after pause: %v", err)
				}
			})
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(arrivals) != 6 {
			t.Fatalf("arrivals = %d", len(arrivals))
		}
		for i, a := range arrivals {
			if a.Sub(quotaAt) < 290*time.Millisecond {
				t.Errorf("request %d sent %v after the 402, inside the pause", i, a.Sub(quotaAt))
			}
			if i > 0 && a.Sub(arrivals[0]) < 25*time.Millisecond {
				t.Errorf("request %d sent %v after the probe started, before the probe answered", i, a.Sub(arrivals[0]))
			}
		}
		if h.c.Stats().Paused || testutil.ToFloat64(h.c.m.paused) != 0 {
			t.Error("still paused after a successful probe")
		}
		if n := testutil.ToFloat64(h.c.m.pausesTotal.WithLabelValues("quota")); n != 1 {
			t.Errorf("pauses_total{quota} = %v", n)
		}
	})
}

func TestStatus429RetryAfterSecondsAndGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var times []time.Time
		var n atomic.Int64
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			times = append(times, time.Now())
			mu.Unlock()
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				writeJSON(w, 429, errorBody("req-Too", 429, "Too many requests"))
				return
			}
			w.Write(responseJSON(testRID))
		})
		h := newClient(t, s.URL, s.with(func(o *Options) { o.MaxConcurrency = 8 }))
		ctx := context.Background()
		t0 := time.Now()
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
				t.Error(err)
			}
		})
		// A second caller starts after the 429: it must wait at the shared gate.
		for n.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		if st := h.c.Stats(); st.ConcurrencyLimit != 4 || st.HoldUntil.IsZero() {
			t.Errorf("after 429: limit = %d (want 4), hold until %v", st.ConcurrencyLimit, st.HoldUntil)
		}
		wg.Go(func() {
			if _, err := h.c.GetResponse(ctx, 4574, testRID); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(times) != 3 {
			t.Fatalf("requests = %d, want 3", len(times))
		}
		for i, at := range times[1:] {
			if d := at.Sub(times[0]); d < 950*time.Millisecond {
				t.Errorf("request %d sent %v after the 429, before Retry-After", i+2, d)
			}
		}
		if el := time.Since(t0); el > 3*time.Second {
			t.Errorf("took %v", el)
		}
		if h.c.Count(OpGetResponse, OutcomeRateLimited) != 1 || h.c.Count(OpGetResponse, OutcomeOK) != 2 {
			t.Errorf("counts = %+v", h.c.Stats().Requests)
		}
		if v := testutil.ToFloat64(h.c.m.retries.WithLabelValues(OpGetResponse, OutcomeRateLimited)); v != 1 {
			t.Errorf("retries{rate_limited} = %v", v)
		}
		if v := testutil.ToFloat64(h.c.m.rateWait); v < 0.8 {
			t.Errorf("rate_limit_wait_seconds_total = %v, want ~0.9 (the second caller's wait)", v)
		}
	})
}

func TestStatus429RetryAfterHTTPDate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", time.Now().Add(2*time.Second).UTC().Format(http.TimeFormat))
				writeJSON(w, 429, errorBody("req-Too", 429, "slow down"))
				return
			}
			w.Write(responseJSON(testRID))
		})
		h := newClient(t, s.URL, s.with(nil))
		t0 := time.Now()
		if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
			t.Fatal(err)
		}
		// The date has second resolution: the wait is between 1 and 2 s.
		if el := time.Since(t0); el < time.Second || el > 3*time.Second {
			t.Errorf("waited %v, want 1-2 s", el)
		}
	})
}

func TestStatus429WithoutRetryAfterBacksOff(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			writeJSON(w, 429, errorBody("req-Too", 429, "slow down"))
			return
		}
		w.Write(responseJSON(testRID))
	})
	h := newClient(t, s.URL, func(o *Options) {
		o.RetryInitial = 40 * time.Millisecond
		o.RetryMax = 200 * time.Millisecond
		o.MaxConcurrency = 16
	})
	t0 := time.Now()
	if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
		t.Fatal(err)
	}
	// Equal jitter: at least 20 ms + 40 ms.
	if el := time.Since(t0); el < 60*time.Millisecond {
		t.Errorf("waited only %v", el)
	}
	// Two 429s: the second came from a request sent after the first
	// decrease, so the limit halved twice.
	if st := h.c.Stats(); st.ConcurrencyLimit != 4 {
		t.Errorf("limit = %d, want 4", st.ConcurrencyLimit)
	}
	// Successes creep back: 4→16 needs 4+…+15 = 114 successes.
	for range 120 {
		if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
			t.Fatal(err)
		}
	}
	if st := h.c.Stats(); st.ConcurrencyLimit != 16 {
		t.Errorf("limit after 120 successes = %d, want 16", st.ConcurrencyLimit)
	}
	if v := testutil.ToFloat64(h.c.m.limit); v != 16 {
		t.Errorf("concurrency_limit gauge = %v", v)
	}
}

func TestStatus429UntilGiveUp(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "0")
		writeJSON(w, 429, errorBody("req-Too", 429, "slow down"))
	})
	h := newClient(t, s.URL, nil)
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	checkAPIError(t, err, 429, ErrRateLimited, false)
	if s.hits.Load() != 4 {
		t.Errorf("hits = %d, want 1 + MaxRetries(3)", s.hits.Load())
	}
}

func TestStatus429RetryAfterBeyondDeadline(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "120")
		writeJSON(w, 429, errorBody("req-Too", 429, "slow down"))
	})
	h := newClient(t, s.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	t0 := time.Now()
	_, err := h.c.GetResponse(ctx, 4574, testRID)
	checkAPIError(t, err, 429, ErrRateLimited, false)
	if time.Since(t0) > 500*time.Millisecond {
		t.Errorf("waited %v for a retry the deadline would not allow", time.Since(t0))
	}
}

func TestStatus5xxThenSuccess(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch n.Add(1) {
		case 1:
			writeJSON(w, 500, errorBody("req-Int", 500, "Internal error"))
		case 2:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(502)
			w.Write([]byte("<html><body><h1>502 Bad Gateway</h1></body></html>"))
		case 3:
			writeJSON(w, 503, "")
		default:
			w.Write(responseJSON(testRID))
		}
	})
	h := newClient(t, s.URL, nil)
	r, err := h.c.GetResponse(context.Background(), 4574, testRID)
	if err != nil {
		t.Fatal(err)
	}
	if r.ResponseID != testRID || s.hits.Load() != 4 {
		t.Errorf("id %s, hits %d", r.ResponseID, s.hits.Load())
	}
	if h.c.Count(OpGetResponse, OutcomeServerError) != 3 || h.c.Count(OpGetResponse, OutcomeOK) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
	if v := testutil.ToFloat64(h.c.m.retries.WithLabelValues(OpGetResponse, OutcomeServerError)); v != 3 {
		t.Errorf("retries = %v", v)
	}
}

func TestStatus5xxUntilGiveUp(t *testing.T) {
	s := statusServer(t, 503, "Service unavailable")
	h := newClient(t, s.URL, nil)
	_, err := h.c.ListResponses(context.Background(), 4574, survey.ListQuery{})
	checkAPIError(t, err, 503, ErrServer, false)
	if s.hits.Load() != 4 {
		t.Errorf("hits = %d, want 4", s.hits.Load())
	}
	// POSTs are retried on 5xx too: the service answered.
	_, err = h.c.SendMessage(context.Background(), 7, 9, survey.SendRequest{})
	checkAPIError(t, err, 503, ErrServer, false)
	if s.hits.Load() != 8 {
		t.Errorf("hits = %d, want 8", s.hits.Load())
	}
}

func TestRetryBackoffBoundsAndCancel(t *testing.T) {
	s := statusServer(t, 500, "boom")
	h := newClient(t, s.URL, func(o *Options) {
		o.MaxRetries = 2
		o.RetryInitial = 20 * time.Millisecond
		o.RetryMax = 30 * time.Millisecond
	})
	t0 := time.Now()
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	el := time.Since(t0)
	checkAPIError(t, err, 500, ErrServer, false)
	if s.hits.Load() != 3 {
		t.Errorf("hits = %d, want 3", s.hits.Load())
	}
	if el > 2*time.Second { // two waits of at most 20 and 30 ms, plus slack for a loaded machine
		t.Errorf("took %v", el)
	}
	if el < 25*time.Millisecond { // equal jitter (internal/backoff): at least half of each step, 10 + 15 ms
		t.Errorf("took %v: the retries did not wait at least half of each back-off step", el)
	}

	// Cancellation stops the wait at once.
	h2 := newClient(t, s.URL, func(o *Options) {
		o.MaxRetries = 10
		o.RetryInitial = 5 * time.Second
		o.RetryMax = 5 * time.Second
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	t0 = time.Now()
	_, err = h2.c.GetResponse(ctx, 4574, testRID)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if el := time.Since(t0); el > 400*time.Millisecond {
		t.Errorf("cancel took %v", el)
	}
	if IsPermanent(err) {
		t.Error("cancelled call reported permanent")
	}
	// Cancelled before the call: nothing is sent.
	before := s.hits.Load()
	if _, err := h2.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	if s.hits.Load() != before {
		t.Error("a call with a cancelled context was sent")
	}
}

func TestTimeoutGETRetried(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			waitOrDone(r, 5*time.Second)
			return
		}
		w.Write(responseJSON(testRID))
	})
	h := newClient(t, s.URL, func(o *Options) { o.Timeout = 100 * time.Millisecond })
	if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
		t.Fatal(err)
	}
	if h.c.Count(OpGetResponse, OutcomeTimeout) < 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestTimeoutUntilGiveUp(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { waitOrDone(r, 5*time.Second) })
	h := newClient(t, s.URL, func(o *Options) { o.Timeout = 50 * time.Millisecond; o.MaxRetries = 1 })
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, ErrNetwork) || IsPermanent(err) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), OpGetResponse) || !strings.Contains(err.Error(), "no answer within 50ms") {
		t.Errorf("err text = %q", err)
	}
	if s.hits.Load() != 2 {
		t.Errorf("hits = %d", s.hits.Load())
	}
}

func TestTimeoutPOSTUncertain(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		waitOrDone(r, 5*time.Second)
	})
	h := newClient(t, s.URL, func(o *Options) { o.Timeout = 100 * time.Millisecond })
	_, err := h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@example.cz"})
	if !errors.Is(err, ErrUncertain) || !errors.Is(err, ErrTimeout) || !IsPermanent(err) {
		t.Fatalf("err = %v", err)
	}
	if s.hits.Load() != 1 {
		t.Errorf("hits = %d: an uncertain POST was retried", s.hits.Load())
	}
	if h.c.Count(OpCreateContact, OutcomeTimeout) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestConnectionResetGETRetried(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 2 {
			resetConn(t, w)
			return
		}
		w.Write(responseJSON(testRID))
	})
	h := newClient(t, s.URL, nil)
	if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
		t.Fatal(err)
	}
	if h.c.Count(OpGetResponse, OutcomeNetwork) < 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestConnectionResetPOSTUncertain(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		resetConn(t, w)
	})
	h := newClient(t, s.URL, nil)
	for _, call := range []func() error{
		func() error {
			_, err := h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@example.cz"})
			return err
		},
		func() error {
			_, err := h.c.SendMessage(context.Background(), 7, 9, survey.SendRequest{ScheduledDate: survey.TimeOf(time.Now())})
			return err
		},
	} {
		before := s.hits.Load()
		err := call()
		if !errors.Is(err, ErrUncertain) || !errors.Is(err, ErrNetwork) || !IsPermanent(err) {
			t.Fatalf("err = %v", err)
		}
		if d := s.hits.Load() - before; d != 1 {
			t.Errorf("hits = %d: an uncertain POST was retried", d)
		}
	}
}

func TestConnectionRefusedPOSTRetried(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	h := newClient(t, "http://"+addr, func(o *Options) { o.MaxRetries = 2 })
	_, err = h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@example.cz"})
	if !errors.Is(err, ErrNetwork) || errors.Is(err, ErrUncertain) {
		t.Fatalf("err = %v: a refused connection is never uncertain", err)
	}
	if n := h.c.Count(OpCreateContact, OutcomeNetwork); n != 3 {
		t.Errorf("network attempts = %d, want 3 (refused is retried)", n)
	}
}

func TestCancelAfterPOSTSentIsUncertain(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		waitOrDone(r, 5*time.Second)
	})
	h := newClient(t, s.URL, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := h.c.CreateContact(ctx, 7, survey.Contact{Email: "a@example.cz"})
	if !errors.Is(err, ErrUncertain) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v", err)
	}
	if h.c.Count(OpCreateContact, OutcomeCanceled) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestRedirectRefused(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://127.0.0.2:1/elsewhere", http.StatusFound)
	})
	h := newClient(t, s.URL, nil)
	_, err := h.c.GetResponse(context.Background(), 4574, testRID)
	if !errors.Is(err, ErrMalformed) || !IsPermanent(err) || s.hits.Load() != 1 {
		t.Fatalf("err = %v, hits %d", err, s.hits.Load())
	}
	if !strings.Contains(err.Error(), "redirect to http://127.0.0.2:1/elsewhere refused") {
		t.Errorf("err = %v", err)
	}
}

func TestPing(t *testing.T) {
	var status atomic.Int64
	status.Store(404)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("per_page") != "1" {
			t.Errorf("ping query = %q", r.URL.RawQuery)
		}
		st := int(status.Load())
		if st == 200 {
			writeJSON(w, 200, `{"result": {"per_page": 1, "page": 1, "total": 1, "data": [{"response_id": "`+testRID+`", "href": "x"}]}, "meta": {"requestId": "p"}}`)
			return
		}
		writeJSON(w, st, errorBody("req-"+http.StatusText(st)[:3], st, "x"))
	})
	h := newClient(t, s.URL, func(o *Options) { o.PingSurveyID = 4574; o.AuthProbeInterval = time.Hour })
	ctx := context.Background()
	for _, st := range []int64{404, 403, 200} {
		status.Store(st)
		if err := h.c.Ping(ctx); err != nil {
			t.Errorf("Ping with %d: %v", st, err)
		}
	}
	status.Store(500)
	if err := h.c.Ping(ctx); !errors.Is(err, ErrServer) {
		t.Errorf("Ping with 500: %v", err)
	}
	status.Store(401)
	if err := h.c.Ping(ctx); !errors.Is(err, ErrUnauthorized) {
		t.Errorf("Ping with 401: %v", err)
	}
	if h.c.Healthy() {
		t.Error("healthy after a 401 ping")
	}
	if h.c.Count(OpPing, OutcomeUnauthorized) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
}

func TestNewValidates(t *testing.T) {
	good := Options{BaseURL: "https://api.click4survey.com/v1", Token: testToken, UserAgent: testUA}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Options){
		"no v1":      func(o *Options) { o.BaseURL = "https://api.click4survey.com" },
		"bad scheme": func(o *Options) { o.BaseURL = "ftp://x/v1" },
		"no token":   func(o *Options) { o.Token = "" },
		"token ws":   func(o *Options) { o.Token = testToken + " x" },
		"no ua":      func(o *Options) { o.UserAgent = "" },
		"ua newline": func(o *Options) { o.UserAgent = "a\nb" },
		"neg rate":   func(o *Options) { o.RateLimit = -1 },
	} {
		o := good
		mod(&o)
		_, err := New(o)
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), testToken) {
			t.Errorf("%s: error quotes the token: %v", name, err)
		}
	}
	o := good
	if _, err := New(Options{BaseURL: o.BaseURL + "/", Token: o.Token, UserAgent: o.UserAgent}); err != nil {
		t.Errorf("trailing slash: %v", err)
	}
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("starting", "api", good)
	for _, s := range []string{fmtV(good), fmtSharpV(good), logged.String()} {
		if strings.Contains(s, testToken) {
			t.Errorf("printing Options shows the token: %s", s)
		}
	}
}

// A 5xx to a probe proves nothing about the token: still unhealthy.
func TestStatus401ProbeAnswered5xxStaysUnhealthy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int64
		s := newBubbleServer(t, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				writeJSON(w, 401, errorBody("req-Una", 401, "Invalid API token"))
				return
			}
			writeJSON(w, 503, errorBody("req-Ser", 503, "down"))
		})
		h := newClient(t, s.URL, s.with(func(o *Options) { o.AuthProbeInterval = 50 * time.Millisecond; o.MaxRetries = -1 }))
		ctx := context.Background()
		if _, err := h.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, ErrUnauthorized) {
			t.Fatal(err)
		}
		time.Sleep(60 * time.Millisecond)
		if _, err := h.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, ErrServer) {
			t.Fatalf("probe: %v", err)
		}
		if h.c.Healthy() {
			t.Error("a 503 to the probe made the client healthy")
		}
		if _, err := h.c.GetResponse(ctx, 4574, testRID); !errors.Is(err, ErrUnauthorized) {
			t.Errorf("after the probe: %v", err)
		}
	})
}

// A success whose body is cut short: a GET is retried; a POST is uncertain
// (the service answered 201: it acted).
func TestBodyCutShort(t *testing.T) {
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if r.Method == http.MethodGet && n.Add(1) > 1 {
			w.Write(responseJSON(testRID))
			return
		}
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		bw.WriteString("HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"result\": {\"id\": 5")
		bw.Flush()
		conn.Close()
	})
	h := newClient(t, s.URL, nil)
	if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
		t.Fatalf("GET after a cut body: %v", err)
	}
	if h.c.Count(OpGetResponse, OutcomeNetwork) != 1 {
		t.Errorf("counts = %+v", h.c.Stats().Requests)
	}
	_, err := h.c.CreateContact(context.Background(), 7, survey.Contact{Email: "a@b.cz"})
	if !errors.Is(err, ErrUncertain) || !strings.Contains(err.Error(), "HTTP 201 answered, body cut short") {
		t.Fatalf("POST: %v", err)
	}
}
