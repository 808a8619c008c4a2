package daemon

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
	"github.com/surveysync/surveysync/source/surveyapi"
)

// /debug/pprof is served only with metrics.pprof: true (issue 12 part 5).
func TestPprofOffByDefault(t *testing.T) {
	if config.Default().Metrics.Pprof {
		t.Fatal("metrics.pprof defaults to true")
	}
	for _, tc := range []struct {
		pprof bool
		want  int
	}{{false, http.StatusNotFound}, {true, http.StatusOK}} {
		srv := httptest.NewServer(metricsMux(tc.pprof, prometheus.NewRegistry(), &health{}))
		res, err := http.Get(srv.URL + "/debug/pprof/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("pprof %v: /debug/pprof/ answered %d, want %d", tc.pprof, res.StatusCode, tc.want)
		}
		res, err = http.Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("pprof %v: /healthz answered %d", tc.pprof, res.StatusCode)
		}
		srv.Close()
	}
}

type pingFunc func(context.Context) error

func (f pingFunc) Ping(ctx context.Context) error { return f(ctx) }

// /readyz answers 503 naming what is not ready; /healthz answers 200
// whatever the sink (surveysync healthcheck relies on both).
func TestReadyzNamesWhatIsNotReady(t *testing.T) {
	client, err := surveyapi.New(surveyapi.Options{BaseURL: "http://127.0.0.1:1/v1", Token: "t", UserAgent: "test (t@example.invalid)"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	h := &health{client: client, sink: pingFunc(func(context.Context) error { return errors.New("down") })}
	srv := httptest.NewServer(metricsMux(false, prometheus.NewRegistry(), h))
	defer srv.Close()
	for path, want := range map[string]int{"/healthz": http.StatusOK, "/readyz": http.StatusServiceUnavailable} {
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != want {
			t.Errorf("%s answered %d %q, want %d", path, res.StatusCode, body, want)
		}
		if path == "/readyz" && !strings.Contains(string(body), "sink: down") {
			t.Errorf("/readyz does not name the sink: %q", body)
		}
	}
}
