package surveyapi

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsRegisteredAndCounted(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.Write(responseJSON(testRID)) })
	h := newClient(t, s.URL, func(o *Options) { o.MaxConcurrency = 5 })
	for range 3 {
		if _, err := h.c.GetResponse(context.Background(), 4574, testRID); err != nil {
			t.Fatal(err)
		}
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	want := []string{
		"surveysync_api_auth_failed",
		"surveysync_api_calls_month",
		"surveysync_api_concurrency_limit",
		"surveysync_api_concurrency_wait_seconds_total",
		"surveysync_api_in_flight",
		"surveysync_api_pauses_total",
		"surveysync_api_paused",
		"surveysync_api_rate_limit_wait_seconds_total",
		"surveysync_api_request_duration_seconds",
		"surveysync_api_requests_total",
	}
	got := strings.Join(names, " ")
	for _, n := range want {
		if !strings.Contains(got, n) {
			t.Errorf("metric %s not registered (have %s)", n, got)
		}
	}
	if v := testutil.ToFloat64(h.c.m.requests.WithLabelValues(OpGetResponse, OutcomeOK)); v != 3 {
		t.Errorf("requests_total{get_response,ok} = %v", v)
	}
	if v := testutil.ToFloat64(h.c.m.monthCalls); v != 3 {
		t.Errorf("calls_month = %v", v)
	}
	if v := testutil.ToFloat64(h.c.m.limit); v != 5 {
		t.Errorf("concurrency_limit = %v", v)
	}
	if n := testutil.CollectAndCount(h.c.m.duration); n != len(operations) {
		t.Errorf("duration series = %d", n)
	}
	if st := h.c.Stats(); st.Total != 3 || st.CallsThisMonth != 3 || st.Requests[OpGetResponse][OutcomeOK] != 3 {
		t.Errorf("stats = %+v", st)
	}
	if probs, err := testutil.GatherAndLint(h.reg); err != nil || len(probs) > 0 {
		t.Errorf("lint: %v %v", probs, err)
	}
	// A second client on the same registry is refused (names are unique).
	if _, err := New(Options{BaseURL: s.URL + "/v1", Token: testToken, UserAgent: testUA, Registerer: h.reg}); err == nil {
		t.Error("second registration accepted")
	}
}

func TestCallsThisMonthRollsOver(t *testing.T) {
	m, err := newMetrics(nil, func() (int, int) { return 1, 0 })
	if err != nil {
		t.Fatal(err)
	}
	nov := time.Date(2026, 11, 30, 23, 59, 0, 0, time.UTC)
	m.request(OpPing, OutcomeOK, time.Millisecond, nov)
	m.request(OpPing, OutcomeOK, time.Millisecond, nov)
	if n := m.callsThisMonth(nov); n != 2 {
		t.Errorf("november = %d", n)
	}
	dec := nov.Add(2 * time.Minute)
	if n := m.callsThisMonth(dec); n != 0 {
		t.Errorf("december before any call = %d", n)
	}
	m.request(OpPing, OutcomeOK, time.Millisecond, dec)
	if n := m.callsThisMonth(dec); n != 1 {
		t.Errorf("december = %d", n)
	}
}
