package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testToken = "test-token-123"

// clock is a settable data clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type env struct {
	t   *testing.T
	sim *Sim
	srv *httptest.Server
	clk *clock
}

// newEnv starts a Sim with one survey (4574) on a fixed clock behind a real
// loopback server. mod may change the options.
func newEnv(t *testing.T, mod func(*Options)) *env {
	t.Helper()
	clk := newClock()
	o := Options{
		Token: testToken,
		Now:   clk.Now,
		Seed:  42,
		Surveys: []SurveySpec{
			{ID: 4574, Name: "Spokojenost zákazníků – jaro", Responses: 2000, Seed: 7, Files: true, FileSize: 10_000},
		},
	}
	if mod != nil {
		mod(&o)
	}
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		s.Close()
	})
	return &env{t: t, sim: s, srv: srv, clk: clk}
}

type answer struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(method, path string, body any) answer {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("X-API-TOKEN", testToken)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "surveysync-test (test@example.com)")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return answer{resp.StatusCode, resp.Header, b}
}

func (e *env) get(path string) answer { return e.do(http.MethodGet, path, nil) }

// envelope decodes a success envelope into result and checks meta.
func (e *env) envelope(a answer, wantStatus int, result any) {
	e.t.Helper()
	if a.status != wantStatus {
		e.t.Fatalf("status %d, want %d: %s", a.status, wantStatus, a.body)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Meta   map[string]any  `json:"meta"`
	}
	if err := json.Unmarshal(a.body, &env); err != nil {
		e.t.Fatalf("envelope: %v: %s", err, a.body)
	}
	st, ok := env.Meta["http_status"]
	if !ok {
		st = env.Meta["status_code"]
	}
	if st != float64(wantStatus) {
		e.t.Fatalf("meta status %v, want %d: %s", st, wantStatus, a.body)
	}
	rid, ok := env.Meta["request_id"]
	if !ok {
		rid = env.Meta["requestId"]
	}
	if _, err := survey.ParseGUID(rid.(string)); err != nil {
		e.t.Fatalf("meta request id: %v", err)
	}
	if result != nil {
		if err := json.Unmarshal(env.Result, result); err != nil {
			e.t.Fatalf("result: %v: %s", err, env.Result)
		}
	}
}

// errorBody checks the service's error body and returns its message.
func (e *env) errorBody(a answer, wantStatus int) string {
	e.t.Helper()
	if a.status != wantStatus {
		e.t.Fatalf("status %d, want %d: %s", a.status, wantStatus, a.body)
	}
	var body struct {
		Meta struct {
			RequestID  string `json:"requestId"`
			HTTPStatus int    `json:"http_status"`
			Errors     []struct {
				ErrorMessage string `json:"error_message"`
			} `json:"errors"`
		} `json:"meta"`
	}
	if err := json.Unmarshal(a.body, &body); err != nil {
		e.t.Fatalf("error body: %v: %s", err, a.body)
	}
	if body.Meta.HTTPStatus != wantStatus || body.Meta.RequestID == "" || len(body.Meta.Errors) != 1 || body.Meta.Errors[0].ErrorMessage == "" {
		e.t.Fatalf("error body not in the service's shape: %s", a.body)
	}
	return body.Meta.Errors[0].ErrorMessage
}

func (e *env) list(query string) survey.ResponseList {
	e.t.Helper()
	var l survey.ResponseList
	e.envelope(e.get("/v1/surveys/4574/responses?"+query), 200, &l)
	return l
}

// listAll pages through a query with per_page pp.
func (e *env) listAll(query string, pp int) []survey.GUID {
	e.t.Helper()
	var out []survey.GUID
	for page := 1; ; page++ {
		l := e.list(query + "&per_page=" + itoa(pp) + "&page=" + itoa(page))
		for _, d := range l.Data {
			out = append(out, d.ResponseID)
		}
		if len(l.Data) < pp {
			if len(out) != l.Total {
				e.t.Fatalf("paged %d ids, total says %d", len(out), l.Total)
			}
			return out
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
