package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/surveysync/surveysync/config"
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
