package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/surveysync/surveysync/config"
)

func TestStatusShowsTheBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("# HELP x\nsurveysync_api_calls_month 1834\nsurveysync_api_calls_projected_monthly 52310\nsurveysync_poll_interval_stretch 1\nsurveysync_poll_interval_seconds{survey_id=\"1\",stream=\"completed\"} 30\n"))
	}))
	defer srv.Close()
	cfg := config.Default()
	cfg.Metrics.Listen = strings.TrimPrefix(srv.URL, "http://")
	cfg.API.MonthlyBudget = 100000
	var out strings.Builder
	printBudget(context.Background(), &out, cfg)
	want := "1834 this month by this process; projected 52310/month at the current pace = 52% of the budget 100000"
	if !strings.Contains(out.String(), want) {
		t.Fatalf("got %q, want it to contain %q", out.String(), want)
	}
	srv.Close()
	out.Reset()
	printBudget(context.Background(), &out, cfg)
	if !strings.Contains(out.String(), "no daemon answering") {
		t.Fatalf("daemon down: %q", out.String())
	}
}
