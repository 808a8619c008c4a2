package surveyapi

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/survey"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var _ pipeline.Fetcher = (*Client)(nil)

const (
	testToken = "tok-S3CRET-4f1c9a7e"
	testUA    = "surveysync-test (ops@example.com)"
	testRID   = "da453b67-791e-4d4d-9009-75b1ed8a33c1"
	testFID   = "0b8e6a8c-1d2f-4e3a-9b4c-5d6e7f8a9b0c"
)

// lockedBuffer collects log output from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type harness struct {
	c    *Client
	reg  *prometheus.Registry
	logs *lockedBuffer
}

// newClient builds a client against base (a server URL without /v1) with
// fast retries; mod adjusts the options.
func newClient(t testing.TB, serverURL string, mod func(*Options)) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), logs: &lockedBuffer{}}
	o := Options{
		BaseURL:      serverURL + "/v1",
		Token:        testToken,
		UserAgent:    testUA,
		Timeout:      2 * time.Second,
		MaxRetries:   3,
		RetryInitial: time.Millisecond,
		RetryMax:     5 * time.Millisecond,
		QuotaPause:   200 * time.Millisecond,
		Logger:       slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Registerer:   h.reg,
	}
	if mod != nil {
		mod(&o)
	}
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	h.c = c
	return h
}

// server starts an httptest server on 127.0.0.1 that counts requests.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t testing.TB, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// writeJSON answers status with body.
func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func errorBody(reqID string, status int, msg string) string {
	return fmt.Sprintf(`{"meta": {"requestId": %q, "http_status": %d, "errors": [{"error_message": %q}]}}`, reqID, status, msg)
}

// resetConn hijacks the connection and closes it with a TCP RST.
func resetConn(t testing.TB, w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

// waitOrDone blocks a handler for d or until the client goes away.
func waitOrDone(r *http.Request, d time.Duration) {
	select {
	case <-time.After(d):
	case <-r.Context().Done():
	}
}

// responseJSON renders a realistic response detail envelope: 8 pages, 20
// questions, 40 answers, Czech text, every answer field kind.
func responseJSON(rid string) []byte {
	var b strings.Builder
	b.WriteString(`{"result": {"response_id": "` + rid + `", "survey_id": 4574, "contact_id": 4998745, "distribution_id": 14457,`)
	b.WriteString(`"survey_name": "Spokojenost zákazníků 2026 – Praha a Brno", "ip_address": "185.12.64.211",`)
	b.WriteString(`"date_created": "2026-11-02T09:14:33.4885133Z", "date_completed": "2026-11-02T09:21:05.12Z", "total_time": 392,`)
	b.WriteString(`"response_status": "completed", "url_parameters": [{"name": "utm_source", "value": "newsletter"}, {"name": "segment", "value": "B2B"}],`)
	b.WriteString(`"pages": [`)
	qid, answers := 1000, 0
	for p := 0; p < 8; p++ {
		if p > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"id": %d, "questions": [`, 500+p)
		for q := 0; q < 3 && answers < 40; q++ {
			if q > 0 {
				b.WriteString(",")
			}
			qid++
			switch (p*3 + q) % 4 {
			case 0: // single choice
				fmt.Fprintf(&b, `{"id": %d, "type": "single", "title": "Jak jste spokojen(a) s naší službou? Otázka č. %d", "variable": "Q%d", "answers": [`, qid, qid, qid)
				fmt.Fprintf(&b, `{"choice_id": %d, "choice_label": "Velmi spokojen(a) – žluťoučký kůň", "value": 5}]}`, qid*10+1)
				answers++
			case 1: // matrix: 3 cells
				fmt.Fprintf(&b, `{"id": %d, "type": "matrix", "title": "Ohodnoťte jednotlivé oblasti", "variable": "M%d", "answers": [`, qid, qid)
				for r := 0; r < 3; r++ {
					if r > 0 {
						b.WriteString(",")
					}
					fmt.Fprintf(&b, `{"row_id": %d, "row_label": "Oblast %d: rychlost a ochota personálu", "column_id": %d, "column_label": "Spíše souhlasím", "value": %d}`, qid*10+r, r+1, 77+r, r+2)
					answers++
				}
				b.WriteString("]}")
			case 2: // essay
				fmt.Fprintf(&b, `{"id": %d, "type": "essay", "title": "Co bychom měli zlepšit?", "answers": [`, qid)
				b.WriteString(`{"text": "Příště bych ocenil rychlejší odpověď na e-mail a přehlednější fakturaci. Děkuji!"}]}`)
				answers++
			case 3: // multiple with other
				fmt.Fprintf(&b, `{"id": %d, "type": "multiple", "variable": "K%d", "answers": [`, qid, qid)
				fmt.Fprintf(&b, `{"choice_id": %d, "choice_label": "Doporučení známého"}, {"choice_id": %d, "choice_label": "Jiné", "other_id": %d, "text": "Veletrh v Brně"}]}`, qid*10+1, qid*10+9, qid*10+9)
				answers += 2
			}
		}
		b.WriteString("]}")
	}
	b.WriteString(`]}, "meta": {"requestId": "7f3c2a10-5b6d-4e8f-9a0b-1c2d3e4f5a6b", "http_status": 200}}`)
	return []byte(b.String())
}

func countAnswers(r *survey.Response) int {
	n := 0
	for _, p := range r.Pages {
		for _, q := range p.Questions {
			n += len(q.Answers)
		}
	}
	return n
}

func fmtV(o Options) string      { return fmt.Sprintf("%v %+v %s", o, o, o) }
func fmtSharpV(o Options) string { return fmt.Sprintf("%#v", o) }
