package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/surveysync/surveysync/pipeline"
	"github.com/surveysync/surveysync/source/poll"

	"github.com/surveysync/surveysync/config"
)

func TestStatusShowsTheBudget(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("# HELP x\nsurveysync_api_calls_month 1834\nsurveysync_api_calls_projected_monthly 52310\nsurveysync_poll_interval_stretch 1\nsurveysync_api_calls_projected_monthly_distrusted 10462\nsurveysync_poll_interval_seconds{survey_id=\"1\",stream=\"completed\"} 30\n"))
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
	if !strings.Contains(out.String(), "of which 10462/month (20.0%) on list answers not believed") {
		t.Fatalf("no distrusted share in %q", out.String())
	}
	srv.Close()
	out.Reset()
	printBudget(context.Background(), &out, cfg)
	if !strings.Contains(out.String(), "no daemon answering") {
		t.Fatalf("daemon down: %q", out.String())
	}
}

func TestStatusMarksDistrustedStreams(t *testing.T) {
	now := time.Now()
	states := []pipeline.StreamState{
		{SurveyID: 1, Stream: "completed", Watermark: now.Add(-time.Hour), LastRunAt: now.Add(-time.Minute),
			LastError: poll.NotBelieved + " (page_adds_nothing×1; 3 passes in a row): backing off"},
		{SurveyID: 2, Stream: "completed", Watermark: now.Add(-5 * time.Second), LastRunAt: now},
	}
	var out strings.Builder
	printStates(&out, states, statusOptions{now: now, pollInterval: 30 * time.Second})
	if !strings.Contains(out.String(), "NOT BELIEVED, 1h0m0s") || strings.Count(out.String(), "NOT BELIEVED") != 2 ||
		!strings.Contains(out.String(), "1 stream(s) NOT BELIEVED") {
		t.Fatalf("distrusted stream not marked:\n%s", out.String())
	}
}
