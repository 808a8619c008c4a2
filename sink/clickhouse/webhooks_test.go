package clickhouse

import (
	"context"
	"testing"
	"time"

	"github.com/surveysync/surveysync/record"
	"github.com/surveysync/surveysync/webhookrx"
)

// The webhook log is what the receiver logs to.
var _ webhookrx.EventLog = (*WebhookLog)(nil)

func TestWebhookLog(t *testing.T) {
	t.Run("single", func(t *testing.T) { testWebhookLog(t, nil, "webhook_events") })
	// A one-shard cluster: webhook_events is a Distributed table over
	// webhook_events_local.
	t.Run("cluster", func(t *testing.T) {
		skipOnCluster(t)
		testWebhookLog(t, func(o *Options) { o.Cluster = "surveysync_local"; o.noOnClusterDDL = true }, "webhook_events_local")
	})
}

func testWebhookLog(t *testing.T, mod func(*Options), storage string) {
	s, _ := openTest(t, mod)
	ctx := ctxT(t)
	log := NewWebhookLog(s)
	recv := time.Date(2026, 11, 22, 4, 30, 1, 0, time.UTC)
	events := []record.WebhookEvent{
		{EventID: "msg_1", EventName: "response_received", SurveyID: 4574, ResponseID: "da453b67-791e-4d4d-9009-75b1ed8a33c1",
			ReceivedAt: recv, ProcessedAt: recv.Add(time.Second), Outcome: "processed", Attempts: 2,
			Body: `{"event_name":"response_received","survey_id":4574,"response_id":"DA453B67-791E-4D4D-9009-75B1ED8A33C1"}`},
		{EventID: "3b1f", EventName: "survey_paused", ReceivedAt: recv, Outcome: "ignored", Body: `{"event_name":"survey_paused","note":"Průzkum"}`},
	}
	if err := log.LogEvents(ctx, events); err != nil {
		t.Fatal(err)
	}
	// A re-log after a crash collapses to one row per event.
	if err := log.LogEvents(ctx, events[:1]); err != nil {
		t.Fatal(err)
	}
	optimizeFinal(t, s, storage)
	rows, err := s.Conn().Query(ctx, "SELECT event_id, event_name, survey_id, response_id, received_at, outcome, attempts, body FROM "+
		s.table("webhook_events")+" ORDER BY event_id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		id, name string
		survey   int64
		rid      *string
		recv     time.Time
		outcome  string
		attempts uint32
		body     string
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.name, &r.survey, &r.rid, &r.recv, &r.outcome, &r.attempts, &r.body); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d rows, want 2: %+v", len(got), got)
	}
	unknown, rr := got[0], got[1]
	if unknown.id != "3b1f" || unknown.rid != nil || unknown.outcome != "ignored" || unknown.body != events[1].Body {
		t.Errorf("unknown event row = %+v", unknown)
	}
	if rr.rid == nil || *rr.rid != events[0].ResponseID || rr.survey != 4574 || rr.attempts != 2 || !rr.recv.Equal(recv) {
		t.Errorf("response_received row = %+v", rr)
	}
}

func TestWebhookLogEmpty(t *testing.T) {
	log := NewWebhookLog(nil)
	if err := log.LogEvents(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
}
