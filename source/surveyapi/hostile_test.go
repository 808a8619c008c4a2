package surveyapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/surveysync/surveysync/internal/permanent"
	"github.com/surveysync/surveysync/survey"
)

// Hostile service data (issue 12.3): what the service sends must not
// exhaust the client's memory, and data the client cannot use is a
// permanent error naming the survey and the response, with a reason.

// allocated returns the bytes f allocated (the whole process: the
// in-process server's too).
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// checkPermanent checks err is a permanent malformed answer with reason,
// naming what was asked for, and that the server was asked once.
func checkPermanent(t *testing.T, err error, reason, subject string, s *server) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	if !permanent.Is(err) || permanent.Reason(err) != reason {
		t.Errorf("err %v: permanent %v reason %q, want %q", err, permanent.Is(err), permanent.Reason(err), reason)
	}
	if !errors.Is(err, ErrMalformed) || !IsPermanent(err) {
		t.Errorf("err %v: want ErrMalformed and IsPermanent", err)
	}
	if !strings.Contains(err.Error(), subject) {
		t.Errorf("err %q does not name %q", err, subject)
	}
	if s != nil && s.hits.Load() != 1 {
		t.Errorf("server asked %d times: a permanent error was retried", s.hits.Load())
	}
}

// A list page's total and per_page are only numbers: 10^9 (or 10^18) sizes
// nothing.
func TestHostileListTotal(t *testing.T) {
	for _, tc := range []struct{ page, perPage, total string }{
		{"1", "1000000000", "1000000000"},
		{"1000000000", "1000000000", "1000000000000000000"},
		{"2", "9223372036854775807", "9223372036854775807"},
	} {
		body := `{"meta": {"requestId": "big"}, "result": {"page": ` + tc.page + `, "per_page": ` + tc.perPage + `, "total": ` + tc.total +
			`, "data": [{"response_id": "` + testRID + `", "href": "x"}]}}`
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, body) })
		h := newClient(t, s.URL, nil)
		var l *survey.ResponseList
		var err error
		n := allocated(func() { l, err = h.c.ListResponses(context.Background(), 4574, survey.ListQuery{}) })
		if err != nil || len(l.Data) != 1 || strconv.Itoa(l.Total) != tc.total {
			t.Fatalf("total %s: %+v, %v", tc.total, l, err)
		}
		if n > 1<<20 {
			t.Errorf("total %s: one list call allocated %d bytes", tc.total, n)
		}
	}
	// A page claiming items it does not carry is malformed, whatever the numbers.
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, `{"result": {"page": 3, "per_page": 1000000000, "total": 9223372036854775807}}`)
	})
	h := newClient(t, s.URL, nil)
	_, err := h.c.ListResponses(context.Background(), 4574, survey.ListQuery{Page: 3})
	checkPermanent(t, err, "decode", "survey 4574 page 3", s)
}

// genReader yields n bytes of a JSON-looking string without holding them.
type genReader struct{ n int64 }

func (g *genReader) Read(p []byte) (int, error) {
	if g.n <= 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), g.n))
	for i := range p[:k] {
		p[i] = 'a'
	}
	g.n -= int64(k)
	return k, nil
}

// A detail over 64 MiB is refused, permanently. Announced by its length,
// it is refused before a byte of it is read; of unknown length (chunked),
// the client stops reading at the limit. Either way its reservation in the
// budget is given back.
func TestHostileBodyTooLarge(t *testing.T) {
	const size = DefaultMaxBody + 1<<20
	for _, announced := range []bool{true, false} {
		t.Run(fmt.Sprintf("announced=%v", announced), func(t *testing.T) {
			var written sync.WaitGroup
			var sent int64
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				written.Add(1)
				defer written.Done()
				w.Header().Set("Content-Type", "application/json")
				if announced {
					w.Header().Set("Content-Length", strconv.Itoa(size))
				}
				w.WriteHeader(200)
				n, _ := io.Copy(w, io.MultiReader(strings.NewReader(`{"result": {"survey_name": "`), &genReader{n: size}))
				sent = n
			})
			// Reading 64 MiB under -race on a loaded machine can take seconds:
			// the attempt must not time out (and be retried) before the limit.
			h := newClient(t, s.URL, func(o *Options) { o.Timeout = time.Minute })
			var err error
			n := allocated(func() { _, err = h.c.GetResponse(context.Background(), 4574, testRID) })
			checkPermanent(t, err, "too_large", "survey 4574 response "+testRID, s)
			if !strings.Contains(err.Error(), "larger than 67108864 bytes") {
				t.Errorf("err %v", err)
			}
			h.c.Close()
			written.Wait()
			if announced {
				if n > 8<<20 {
					t.Errorf("refusing an announced 65 MiB body allocated %d bytes", n)
				}
				if sent >= size {
					t.Errorf("the server sent all %d bytes of a body refused by its length", sent)
				}
			} else if peak := h.c.budget.peak.Load(); peak > DefaultMaxBody+1 {
				t.Errorf("reading a chunked body up to the limit reserved %d bytes", peak)
			}
			if got := h.c.budget.inUse.Load(); got != 0 {
				t.Errorf("%d bytes still reserved in the budget", got)
			}
		})
	}
}

// Details the client cannot use: not JSON, wrong types, a date that does
// not parse, an id that is not a GUID. Each is permanent, with its reason,
// and names the survey and the response.
func TestHostileDetails(t *testing.T) {
	detail := func(fields string) string {
		return `{"meta": {"requestId": "h1"}, "result": {"response_id": "` + testRID + `", "survey_id": 4574, "response_status": "completed", ` + fields + `}}`
	}
	cases := []struct{ name, body, reason, text string }{
		{"garbage", "\x00\xff{{{ not json", "decode", "not JSON"},
		{"truncated", `{"result": {"response_id": "` + testRID, "decode", "not JSON"},
		{"wrong type", detail(`"pages": {"id": 1}`), "decode", "cannot decode result"},
		{"survey id as text", detail(`"contact_id": "abc"`), "decode", "cannot decode result"},
		{"bad date", detail(`"date_created": "12.9.2022 16:24"`), "bad_date", "invalid timestamp"},
		{"bad completion date", detail(`"date_completed": "2022-13-45T99:00:00Z"`), "bad_date", "invalid timestamp"},
		{"date of the wrong type", detail(`"date_created": 1662999849`), "decode", "cannot decode result"},
		{"response id not a guid", `{"result": {"response_id": "DROP TABLE", "response_status": "completed"}}`, "bad_guid", "invalid guid"},
		{"file id not a guid", detail(`"pages": [{"id": 1, "questions": [{"id": 2, "type": "file", "answers": [{"file_id": "../../etc/passwd"}]}]}]`), "bad_guid", "invalid guid"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, tc.body) })
			h := newClient(t, s.URL, nil)
			_, err := h.c.GetResponse(context.Background(), 4574, testRID)
			checkPermanent(t, err, tc.reason, "survey 4574 response "+testRID, s)
			if !strings.Contains(err.Error(), tc.text) {
				t.Errorf("err %v: want %q", err, tc.text)
			}
			if h.c.Count(OpGetResponse, OutcomeMalformed) != 1 {
				t.Errorf("counts %+v", h.c.Stats().Requests)
			}
		})
	}
}

// Many concurrent large bodies stay within the total budget: 32 callers
// (64 calls), 16 in flight, 1.5 MiB details (half announced by length, half chunked)
// under a 6 MiB budget. Every call succeeds, the bytes reserved never pass
// the budget, and all of them are given back.
func TestHostileConcurrentBodiesWithinBudget(t *testing.T) {
	const (
		maxBody = 2 << 20
		total   = 6 << 20
	)
	big := strings.Repeat("x", 3<<19)
	body := `{"meta": {"requestId": "big"}, "result": {"response_id": "` + testRID + `", "survey_id": 4574, "survey_name": "` + big +
		`", "date_created": "2022-09-12T16:24:09Z", "response_status": "completed"}}`
	var n atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if n.Add(1)%2 == 0 {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		io.Copy(w, strings.NewReader(body)) // without a length: chunked
	})
	h := newClient(t, s.URL, func(o *Options) {
		o.MaxConcurrency = 16
		o.MaxBody = maxBody
		o.BodyBudget = total
		o.Timeout = time.Minute
	})
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for range 2 {
				r, err := h.c.GetResponse(context.Background(), 4574, testRID)
				if err != nil {
					t.Error(err)
					return
				}
				if len(r.SurveyName) != len(big) {
					t.Errorf("survey name of %d bytes", len(r.SurveyName))
				}
			}
		})
	}
	wg.Wait()
	peak := h.c.budget.peak.Load()
	if peak > total {
		t.Errorf("%d bytes of bodies held at once, over the %d-byte budget", peak, total)
	}
	if peak < 2*int64(len(body)) {
		t.Errorf("peak %d: the bodies were never read concurrently; the test proves nothing", peak)
	}
	if got := h.c.budget.inUse.Load(); got != 0 {
		t.Errorf("%d bytes still reserved", got)
	}
	t.Logf("peak reserved %d bytes of %d (16 × %d would be %d)", peak, total, len(body), 16*len(body))
}

// The budget's options are checked: one body cannot be bigger than the
// budget, and the budget must leave room for every request in flight.
func TestBodyBudgetOptions(t *testing.T) {
	for _, o := range []Options{
		{MaxBody: 10 << 20, BodyBudget: 8 << 20},
		{MaxBody: 8 << 20, BodyBudget: 8 << 20, MaxConcurrency: 16},
		{MaxBody: -1},
	} {
		o.BaseURL, o.Token, o.UserAgent = "http://127.0.0.1:1/v1", testToken, testUA
		if c, err := New(o); err == nil {
			c.Close()
			t.Errorf("%+v accepted", o)
		}
	}
}
